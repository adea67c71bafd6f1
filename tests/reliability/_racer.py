"""One racing process: ``python _racer.py SPEC.json``. It prepares (connections, threads), prints
``ready``, waits for ``go`` on stdin, fires everything its spec lists at once and prints one JSON
line of outcomes. The test starts several, waits for every ``ready`` and then says ``go`` to all,
so that the requests of different processes overlap.

Kinds of spec: ``http`` (a list of requests, one thread each), ``cas`` (writers, one thread
each, that read a value and write it back incremented with ``expected_revision`` until each has
made its share of writes) and ``resume`` (``pyworkflow.resume_hook`` on one token, concurrently,
through this process's own store)."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx


def _fire(count: int, one: Callable[[int], Any]) -> list[Any]:
    """Run ``one(i)`` for i in range(count) on threads released together."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = one(i)
        except Exception as exc:  # reported, and the test fails on it
            results[i] = {"exception": f"{type(exc).__name__}: {exc}"}

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    _go()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def _go() -> None:
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("racer: expected 'go'")


def http_race(spec: dict[str, Any]) -> list[Any]:
    requests = spec["requests"]
    with httpx.Client(timeout=60, limits=httpx.Limits(max_connections=len(requests))) as client:

        def one(i: int) -> dict[str, Any]:
            r = requests[i]
            answer = client.request(r["method"], r["url"], headers=r.get("headers"), json=r.get("json"))
            return {**r.get("tag", {}), "status": answer.status_code, "body": answer.json()}

        return _fire(len(requests), one)


def cas_race(spec: dict[str, Any]) -> list[Any]:
    """Each writer makes ``writes`` increments of ``value.count``, each read-modify-write checked
    by revision; a ``409 revision_conflict`` means someone wrote in between: read again."""
    headers = spec["headers"]
    with httpx.Client(timeout=60, headers=headers) as client:

        def one(i: int) -> dict[str, Any]:
            writer = spec["writers"][i]
            done: list[dict[str, Any]] = []
            conflicts = 0
            while len(done) < spec["writes"]:
                got = client.get(spec["url"], params=spec.get("params"))
                if got.status_code == 404:
                    count, revision = 0, 0
                else:
                    got.raise_for_status()
                    count, revision = got.json()["value"]["count"], got.json()["revision"]
                body = {
                    **spec.get("body", {}),
                    "value": {"count": count + 1, "writer": writer, "seq": len(done)},
                    "expected_revision": revision,
                }
                put = client.put(spec["url"], json=body)
                if put.status_code == 409:
                    assert put.json()["error"]["code"] == "revision_conflict", put.text
                    conflicts += 1
                    continue
                assert put.status_code == 200, put.text
                done.append({"writer": writer, "count": count + 1, "revision": put.json()["revision"]})
            return {"writes": done, "conflicts": conflicts}

        return _fire(len(spec["writers"]), one)


def resume_race(spec: dict[str, Any]) -> list[Any]:
    import pyworkflow

    pyworkflow.configure(storage=spec["storage"])

    async def main() -> list[Any]:
        pyworkflow.get_store()  # opened (and its connections made) before the start signal

        async def one(payload: Any) -> dict[str, Any]:
            try:
                result = await pyworkflow.resume_hook(spec["token"], payload)
            except pyworkflow.HookError as exc:
                return {"payload": payload, "ok": False, "error": type(exc).__name__}
            return {"payload": payload, "ok": True, "run_id": result.run_id}

        await asyncio.to_thread(_go)
        try:
            return list(await asyncio.gather(*(one(p) for p in spec["payloads"])))
        finally:
            await pyworkflow.shutdown()

    return asyncio.run(main())


KINDS = {"http": http_race, "cas": cas_race, "resume": resume_race}

if __name__ == "__main__":
    spec = json.loads(Path(sys.argv[1]).read_text())
    print(json.dumps(KINDS[spec["kind"]](spec)), flush=True)
