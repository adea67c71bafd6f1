"""Two graph servers sharing one PostgreSQL database (always PostgreSQL, whichever backend the rest
of the suite runs on): a client on one, the worker on the other. Work submitted and decided on
the first wakes the worker's long poll on the second at once (LISTEN/NOTIFY between the servers'
hubs), and when the first server is killed the second serves everything it left."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from atfg_harness import ServerProcess, WorkerProcess, create_pg_database, drop_pg_database
from atfg_waits import only_approval, reach

from atfgraph import Client

#: The server re-checks a claim's long poll at least every 5 s on its own; a pick-up faster than
#: this in every round can only come from the other server's notification.
WOKEN_WITHIN = 3.0


async def test_two_servers_on_one_database_wake_each_other_and_survive_one_dying(tmp_path: Path) -> None:
    url = create_pg_database()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = ServerProcess(tmp_path / "a", db=url)
    b = ServerProcess(tmp_path / "b", db=url)
    worker: WorkerProcess | None = None
    try:
        a.start()
        # The first server to start on the empty database minted the credentials; the second
        # found tokens there and minted none. Its users take the first one's.
        shutil.copy(tmp_path / "a" / "credentials.json", tmp_path / "b" / "credentials.json")
        b.start()
        assert not (tmp_path / "b" / "credentials.json.tmp").exists()
        worker = WorkerProcess(b, "atfg_agents:app").start()  # claims through server b only

        async with Client(a.url, token=a.token()) as client:
            for round_ in range(3):
                started = time.monotonic()
                handle = await client.submit("tester.pausing", {"key": f"k{round_}"})
                await reach(client, handle.id, "waiting", 15)
                to_pause = time.monotonic() - started
                approval = await only_approval(client, handle.id)
                decided = time.monotonic()
                await client.decide_approval(str(approval["id"]), "approved")
                result = await handle.result(timeout=15)
                to_finish = time.monotonic() - decided
                assert result["decision"]["status"] == "approved" and result["attempt"] == 2
                assert to_pause < WOKEN_WITHIN and to_finish < WOKEN_WITHIN, (round_, to_pause, to_finish)

            # Pending through a, then a dies: b has every row and serves the rest.
            handle = await client.submit("tester.pausing", {"key": "after-a"})
            await reach(client, handle.id, "waiting", 15)
            approval_id = str((await only_approval(client, handle.id))["id"])
        a.kill()
        async with Client(b.url, token=a.token()) as other:
            await other.decide_approval(approval_id, "rejected", {"why": "a is gone"})
            result = await other.handle(handle.id).result(timeout=15)
            assert result["decision"]["status"] == "rejected" and result["attempt"] == 2
    finally:
        if worker is not None:
            worker.kill()
        a.kill()
        b.kill()
        drop_pg_database(url)
