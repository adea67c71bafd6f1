"""Resume every run of a Celery test from a separate process: ``python cdriver.py STORAGE N``
(broker and queue from ``$CELERY_BROKER_URL`` and ``$PWTEST_QUEUE``)."""

from __future__ import annotations

import asyncio
import os
import sys

import cwf

import pyworkflow


async def main(storage: str, count: int) -> None:
    pyworkflow.configure(storage=storage, runtime="celery", queue=os.environ["PWTEST_QUEUE"])
    try:
        for start in range(0, count, 50):
            batch = range(start, min(start + 50, count))
            await asyncio.gather(*(pyworkflow.resume_hook(cwf.token_of(i), {"ok": i}) for i in batch))
    finally:
        await pyworkflow.shutdown()
    print(f"resumed {count}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
