"""Approval cycles through a real graph server and one worker on SQLite (or PostgreSQL).

    python -m bench.atfgraph_cycles                 # N=1000 cycles, then 10,000 parked traversers
    python -m bench.atfgraph_cycles -n 200 --park 2000
    python -m bench.atfgraph_cycles --db postgresql://postgres@127.0.0.1:5432/postgres
                                    # a new database on that server, dropped afterwards
    python -m bench.atfgraph_cycles -c 8 --capacity 8 --park 0    # more in flight, as many permits
    python -m bench.atfgraph_cycles --db postgresql://... --servers 2
                                    # two graph servers on that one database, a worker each

A cycle: submit, the handler prepares (a child step and a checkpoint) and pauses, the client finds
the approval and decides it, the handler resumes and succeeds. Reported: cycles/s, HTTP requests
per cycle (counted by the server), store commits per cycle (write-function commits and
pipelined statement groups; a statement sent alone is its own, uncounted, transaction),
statements sent in those groups, and the latency from ``decide_approval`` returning to the
handler running again (p50/p99), and the CPU per cycle of each process (servers, workers, this
client, PostgreSQL's backends). With ``--servers N`` (PostgreSQL) N servers share the database,
each with its own worker, and the cycles in flight are spread over them round-robin. Each worker
has ``--capacity`` permits (default 2: a handler holds one from its claim to its pause or its
report, so with 4 cycles in flight the permits, not the server, can set the pace). Then
``--park`` traversers are left waiting: permits in use must be 0 and memory flat.

The worker runs this module's ``app`` (``--module bench.atfgraph_cycles:app``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from atfgraph import Agent, Client, current_context

from ._machine import describe

#: The worker's permits (handlers running at once): ``--capacity``, which reaches the worker
#: process, which imports this module, through its environment.
CAPACITY_VARIABLE = "ATFG_BENCH_CAPACITY"
app = Agent(node_id="bench", version="1.0.0", capacity=int(os.environ.get(CAPACITY_VARIABLE, "2")))


@app.skill()
async def assess(ticket: str) -> dict[str, Any]:
    return {"ticket": ticket.upper(), "fare_aud": 612.40}


@app.traversal(timeout_seconds=60)
async def refund(ticket: str, amount_aud: float) -> dict[str, Any]:
    """The refund example's shape: prepare once (child step + checkpoint), pause, resume."""
    started_at = time.time()
    case = await app.load_checkpoint("case")
    if case is None:
        record = await app.traverse("bench.assess", ticket=ticket)
        case = {"ticket": record["ticket"], "amount_aud": amount_aud}
        await app.save_checkpoint("case", case, expected_revision=0)
    decision = await app.request_approval(
        {"question": f"Refund {amount_aud} on {case['ticket']}?"}, operation_key=f"refund:{case['ticket']}"
    )
    return {"status": decision["status"], "attempt": current_context().attempt, "started_at": started_at}


@app.skill(name="park")
async def park_one(n: int) -> None:
    await app.request_approval({"park": n}, operation_key="park")


REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _postgres_cpu_seconds(db: str | None) -> float:
    """CPU of the PostgreSQL backends serving the benchmark's database (0 on SQLite)."""
    if db is None:
        return 0.0
    import psycopg

    with psycopg.connect(db, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    total = 0.0
    for (pid,) in rows:
        with contextlib.suppress(OSError):  # a backend that ended meanwhile
            total += _cpu_seconds(int(pid))
    return total


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Stack:
    """Graph servers (one unless ``servers``), a worker for each, as subprocesses on a fresh
    SQLite file (or the given database, which several servers may share)."""

    def __init__(self, home: Path, lease_seconds: float, db: str | None = None, servers: int = 1) -> None:
        if servers > 1 and db is None:
            raise SystemExit("--servers above 1 needs --db postgresql://... (servers share one database)")
        self.ports = [_free_port() for _ in range(servers)]
        self.urls = [f"http://127.0.0.1:{port}" for port in self.ports]
        self.url = self.urls[0]
        self.env = {
            **os.environ,
            "ATFGRAPH_SERVER": self.url,
            "ATFGRAPH_HOME": str(home),
            "ATFGRAPH_LEASE_SECONDS": str(lease_seconds),
            # This checkout's code, before any installed copy: a worktree's bench runs its own.
            "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]),
        }
        self.db = db or str(home / "bench.db")
        self.home = home
        self.procs: list[subprocess.Popen[bytes]] = []
        self.servers: list[subprocess.Popen[bytes]] = []
        self.workers: list[subprocess.Popen[bytes]] = []

    @property
    def server(self) -> subprocess.Popen[bytes]:
        return self.servers[0]

    @property
    def worker(self) -> subprocess.Popen[bytes]:
        return self.workers[0]

    def token(self) -> str:
        """The owner credential the server wrote on its first start."""
        return str(json.loads((self.home / "credentials.json").read_text())["owner"])

    def start(self) -> None:
        # One server at a time: the first one creates the schema and the credentials.
        for port, url in zip(self.ports, self.urls, strict=True):
            argv = [sys.executable, "-m", "atfgraph.server", "--port", str(port), "--db", self.db]
            self.servers.append(self._spawn(argv, self.env))
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                try:
                    if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.05)
        for url in self.urls:
            worker = [sys.executable, "-m", "atfgraph.worker", "--module", "bench.atfgraph_cycles:app"]
            self.workers.append(self._spawn(worker, {**self.env, "ATFGRAPH_SERVER": url}))
        while len(
            httpx.get(
                self.url + "/api/v2/workers", headers={"Authorization": f"Bearer {self.token()}"}, timeout=5
            ).json()["items"]
        ) < len(self.urls):
            time.sleep(0.05)

    def capacities(self) -> list[int]:
        """Each registered worker's permits, as the server knows them."""
        workers = httpx.get(
            self.url + "/api/v2/workers", headers={"Authorization": f"Bearer {self.token()}"}, timeout=5
        ).json()["items"]
        return sorted(int(w["capacity"]) for w in workers)

    def _spawn(self, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stderr=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    def cpu_seconds(self) -> tuple[float, float, float, float]:
        """CPU so far of the servers, the workers, this process, PostgreSQL's backends."""
        return (
            sum(_cpu_seconds(p.pid) for p in self.servers),
            sum(_cpu_seconds(p.pid) for p in self.workers),
            time.process_time(),
            _postgres_cpu_seconds(None if self.db.endswith(".db") else self.db),
        )

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


async def _counts(client: Client) -> tuple[int, int, int]:
    """Requests; transactions of the store's writer (write-function commits and statement
    groups); statements sent as single jobs (pipelined server-side transitions and reads)."""
    stats = await client.request("GET", "/stats")
    commits = int(stats["commits"]) + int(stats.get("groups", 0))
    return int(stats["requests"]), commits, int(stats.get("statements", 0))


_ROUTE_COUNT = "atfgraph_http_request_duration_seconds_count{"
_GC_COUNT = "python_gc_collections_total{generation="


async def _by_route(url: str, token: str) -> tuple[dict[str, float], list[float]]:
    """Requests so far by method and route template, and the server process's garbage
    collections so far by generation, from the server's ``/metrics``."""
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=10) as http:
        response = await http.get(url + "/metrics")
    counts: dict[str, float] = {}
    collections = [0.0, 0.0, 0.0]
    for line in response.text.splitlines():
        if line.startswith(_GC_COUNT):
            generation, value = line[len(_GC_COUNT) :].rsplit("} ", 1)
            collections[int(generation.strip('"'))] = float(value)
            continue
        if not line.startswith(_ROUTE_COUNT):
            continue
        labels, value = line[len(_ROUTE_COUNT) :].rsplit("} ", 1)
        fields = dict(part.split("=", 1) for part in labels.split(","))
        key = f"{fields['method'].strip(chr(34))} {fields['route'].strip(chr(34))}"
        counts[key] = counts.get(key, 0.0) + float(value)
    return counts, collections


async def one_cycle(client: Client, i: int, latencies: list[float]) -> None:
    handle, info = await client.submit_and_wait(
        "bench.refund", {"ticket": f"T-{i}", "amount_aud": 480.0}, statuses="waiting,terminal"
    )
    if info.status != "waiting":
        raise RuntimeError(f"cycle {i}: {info.status} {info.error}")
    assert info.waiting_on is not None  # the approval it paused on
    await client.decide_approval(info.waiting_on, "approved")
    decided_at = time.time()
    result = await handle.result(timeout=60)
    if result["status"] != "approved" or result["attempt"] != 2:
        raise RuntimeError(f"cycle {i}: unexpected result {result}")
    latencies.append(result["started_at"] - decided_at)


async def run_cycles(urls: str | list[str], token: str, n: int, concurrency: int) -> dict[str, Any]:
    """``n`` cycles, ``concurrency`` in flight, spread round-robin over the servers at ``urls``."""
    urls = [urls] if isinstance(urls, str) else urls
    latencies: list[float] = []
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(Client(url, token=token)) for url in urls]

        async def counts() -> tuple[int, int, int]:
            each = [await _counts(c) for c in clients]
            return (sum(c[0] for c in each), sum(c[1] for c in each), sum(c[2] for c in each))

        async def by_route() -> tuple[dict[str, float], list[float]]:
            total: dict[str, float] = {}
            collections = [0.0, 0.0, 0.0]
            for url in urls:
                routes, walks = await _by_route(url, token)
                for key, value in routes.items():
                    total[key] = total.get(key, 0.0) + value
                collections = [a + b for a, b in zip(collections, walks, strict=True)]
            return total, collections

        def theirs(routes: dict[str, float]) -> dict[str, float]:
            return {k: v for k, v in routes.items() if not k.endswith(("/stats", "/metrics"))}

        async def still() -> tuple[
            tuple[int, int, int], dict[str, float], dict[str, float], list[float], int
        ]:
            """The counts and the requests by route at one instant: the routes read before and
            after the counts, again until no request but these reads was answered in between (a
            server counts a request, and observes its route, once it is answered, and a worker's
            long polls and heartbeats answer at any time). Returns the counts, the routes before
            and after them, the collections, and the attempts that found a request answered."""
            for again in range(50):
                before, _ = await by_route()
                counted = await counts()
                after, collections = await by_route()
                if theirs(before) == theirs(after):
                    return counted, before, after, collections, again
            raise RuntimeError("the servers answered requests during every one of 50 snapshots")

        (requests0, commits0, statements0), _, routes0, collections0, _ = await still()
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(n):
            queue.put_nowait(i)

        async def runner(client: Client) -> None:
            while not queue.empty():
                await one_cycle(client, queue.get_nowait(), latencies)

        started = time.perf_counter()
        await asyncio.gather(*(runner(clients[k % len(clients)]) for k in range(concurrency)))
        elapsed = time.perf_counter() - started
        (requests1, commits1, statements1), routes1, _, collections1, retries = await still()
    # Between the two reads of the counts each server also answered this harness's own: the first
    # snapshot's /stats and second /metrics, three per retried snapshot at the end, and the last
    # one's first /metrics. Left out of the requests, as they are of the routes.
    own = len(urls) * (3 + 3 * retries)
    # The requests of the cycles by route (the snapshots' own /stats and /metrics left out).
    cycles = theirs(routes1)
    routes = {
        key: round((cycles[key] - routes0.get(key, 0.0)) / n, 3)
        for key in sorted(cycles)
        if cycles[key] - routes0.get(key, 0.0) > 0
    }
    ms = sorted(x * 1000 for x in latencies)
    return {
        "cycles": n,
        "concurrency": concurrency,
        "seconds": round(elapsed, 2),
        "cycles_per_s": round(n / elapsed, 1),
        "requests_per_cycle": round((requests1 - requests0 - own) / n, 2),
        "commits_per_cycle": round((commits1 - commits0) / n, 2),
        "statements_per_cycle": round((statements1 - statements0) / n, 2),
        "requests_per_cycle_by_route": routes,
        # The servers' garbage collector, a count not a time (pyworkflow/store/_gc.py): its passes
        # per 1,000 cycles by generation, from python_gc_collections_total.
        "server_gc_collections_per_1000_cycles": [
            round((b - a) * 1000 / n, 2) for a, b in zip(collections0, collections1, strict=True)
        ],
        "resume_latency_ms_p50": round(statistics.median(ms), 1),
        "resume_latency_ms_p99": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 1),
    }


async def park(stack: Stack, n: int) -> dict[str, Any]:
    samples: list[tuple[int, float, float]] = []
    async with Client(stack.url, token=stack.token()) as client:
        samples.append((0, _rss_mib(stack.server.pid), _rss_mib(stack.worker.pid)))
        step = max(1, n // 4)
        started = time.perf_counter()
        sem = asyncio.Semaphore(32)

        async def submit(i: int) -> None:
            async with sem:
                await client.submit("bench.park", {"n": i})

        for base in range(0, n, step):
            batch = range(base, min(n, base + step))

            await asyncio.gather(*(submit(i) for i in batch))
            while (await client.list_traversers("queued", 1)) or (await client.list_traversers("running", 1)):
                await asyncio.sleep(0.2)
            samples.append((batch.stop, _rss_mib(stack.server.pid), _rss_mib(stack.worker.pid)))
        elapsed = time.perf_counter() - started
        await asyncio.sleep(stack_heartbeat_seconds(stack) + 0.5)  # let the worker report its counters
        worker = (await client.request("GET", "/workers"))["items"][0]
        waiting = len(await client.list_traversers("waiting", 1000))
    return {
        "parked": n,
        "seconds": round(elapsed, 1),
        "waiting_listed_first_1000": waiting,
        "worker_permits_in_use": worker["stats"]["permits_in_use"],
        "worker_paused": worker["stats"]["paused"],
        "rss_mib_by_parked": [
            {"parked": k, "server": round(s, 1), "worker": round(w, 1)} for k, s, w in samples
        ],
    }


def stack_heartbeat_seconds(stack: Stack) -> float:
    return float(stack.env["ATFGRAPH_LEASE_SECONDS"]) / 3


@contextlib.contextmanager
def _database(server_url: str | None) -> Iterator[str | None]:
    """None (SQLite in the stack's directory), or a new database on a PostgreSQL server."""
    if server_url is None:
        yield None
        return
    import psycopg

    name = f"atfg_bench_{os.getpid()}"
    base = server_url.rsplit("/", 1)[0]
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--cycles", type=int, default=1000)
    parser.add_argument("-c", "--concurrency", type=int, default=4, help="cycles in flight at once")
    parser.add_argument("--park", type=int, default=10_000, help="traversers to leave waiting (0 to skip)")
    parser.add_argument(
        "--servers",
        type=int,
        default=1,
        help="graph servers sharing the --db PostgreSQL database (default 1)",
    )
    parser.add_argument(
        "--capacity",
        type=int,
        default=2,
        help="the worker's permits, handlers running at once (default 2: fewer than the cycles in flight)",
    )
    parser.add_argument(
        "--db",
        default=None,
        help="a postgresql:// server URL to run on a new database there (default: SQLite)",
    )
    args = parser.parse_args()
    if args.capacity < 1:
        raise SystemExit("--capacity must be at least 1")
    os.environ[CAPACITY_VARIABLE] = str(args.capacity)  # the workers' environment is a copy of ours
    with tempfile.TemporaryDirectory(prefix="atfg-bench-") as tmp, _database(args.db) as db:
        stack = Stack(Path(tmp), lease_seconds=6.0, db=db, servers=args.servers)
        stack.start()
        try:
            report: dict[str, Any] = {
                "database": "postgresql" if db else "sqlite (synchronous=FULL)",
                "servers": args.servers,
                "settings": {"lease_seconds": 6.0, "worker_capacity": stack.capacities()},
                "load_average_1m_before": round(os.getloadavg()[0], 2),
                "machine": describe(),
            }
            report["warmup"] = asyncio.run(
                run_cycles(stack.urls, stack.token(), min(50, args.cycles), args.concurrency)
            )
            cpu0 = stack.cpu_seconds()
            report["throughput"] = asyncio.run(
                run_cycles(stack.urls, stack.token(), args.cycles, args.concurrency)
            )
            cpu1 = stack.cpu_seconds()
            report["throughput"]["cpu_ms_per_cycle"] = {
                name: round((b - a) * 1000 / args.cycles, 2)
                for name, a, b in zip(("servers", "workers", "client", "postgres"), cpu0, cpu1, strict=True)
            }
            report["sequential"] = asyncio.run(
                run_cycles(stack.urls, stack.token(), min(200, args.cycles), 1)
            )
            if args.park:
                report["parking"] = asyncio.run(park(stack, args.park))
        finally:
            stack.stop()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
