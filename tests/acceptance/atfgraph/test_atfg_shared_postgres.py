"""Two graph servers sharing one PostgreSQL database (always PostgreSQL, whichever backend the rest
of the suite runs on): a client on one, the worker on the other. Work submitted and decided on
the first wakes the worker's long poll on the second at once (LISTEN/NOTIFY between the servers'
hubs), and when the first server is killed the second serves everything it left."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import httpx
import psycopg
from atfg_harness import ServerProcess, WorkerProcess, create_pg_database, drop_pg_database
from atfg_waits import carries_on_after, only_approval, reach

from atfgraph import Client
from pg_queue import churn, queue_stats, wait_vacuumed, without_autovacuum
from pyworkflow.store import DEAD_QUEUE_ROWS

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
        # A reviewer signs in to the console on a; the session is in the database.
        async with httpx.AsyncClient(base_url=a.url, timeout=10) as console:
            login = await console.get("/login")
            nonce = re.search(r'name="csrf" value="([^"]+)"', login.text)
            assert nonce is not None
            signed = await console.post("/login", data={"csrf": nonce.group(1), "token": a.token()})
            assert signed.status_code == 303
            cookie = console.cookies["atfg_console"]
        a.kill()
        async with httpx.AsyncClient(base_url=b.url, timeout=10, cookies={"atfg_console": cookie}) as console:
            page = await console.get("/inbox")  # b knows a's session
            assert page.status_code == 200 and approval_id in page.text, page.headers.get("location")
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


async def test_database_connections_ended_between_requests_are_replaced_unseen(tmp_path: Path) -> None:
    """PostgreSQL restarting between requests (here: every connection of the server terminated,
    and gone, while idle) costs no request: the server finds each ended connection before it
    sends on it and opens a new one, so the next requests answer as usual (before, the first on
    each connection was a 503), and the worker finishes its cycle. A connection lost under a
    request in flight is a 503 in the one error shape: tests/reliability/test_db_faults.py."""
    url = create_pg_database()
    server = ServerProcess(tmp_path, db=url)
    worker: WorkerProcess | None = None
    try:
        server.start()
        worker = WorkerProcess(server, "atfg_agents:app").start()

        async def end_connections() -> None:
            with psycopg.connect(url, autocommit=True) as admin:
                killed = admin.execute(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchone()
            assert killed is not None and killed[0] >= 3  # writer, readers, listener, pool

        await carries_on_after(server, end_connections)
    finally:
        if worker is not None:
            worker.kill()
        server.kill()
        drop_pg_database(url)


async def test_the_server_vacuums_the_run_queue(tmp_path: Path) -> None:
    """Every claim and every end of a traverser leaves dead row versions in the run queue, which
    every later claim reads past until a vacuum removes them. The server's sweeper vacuums the
    queue once it has ``DEAD_QUEUE_ROWS`` of them, instead of leaving them to autovacuum's next
    visit (a minute by default): pyworkflow/store/_pg_vacuum.py."""
    url = create_pg_database()
    server = ServerProcess(tmp_path, db=url)
    try:
        server.start()
        without_autovacuum(url)
        churn(url, DEAD_QUEUE_ROWS + 200)
        wait_vacuumed(url, 15)
        assert queue_stats(url)[0] < DEAD_QUEUE_ROWS
    finally:
        server.kill()
        drop_pg_database(url)
