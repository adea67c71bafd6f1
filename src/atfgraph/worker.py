"""``python -m atfgraph.worker --module package.module:app``: serve an agent's skills."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import signal
import sys
from dataclasses import asdict

from pyworkflow import ConfigurationError
from pyworkflow.store import log_format, setup_logging, tracing

from ._agent import Agent
from ._worker import Worker, WorkerStats

__all__ = ["Worker", "WorkerStats", "load_agent", "main"]


def load_agent(spec: str) -> Agent:
    """Import ``package.module:attribute`` and return the Agent it names."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise SystemExit(f"--module must look like package.module:app, not {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    agent = getattr(importlib.import_module(module_name), attr, None)
    if not isinstance(agent, Agent):
        raise SystemExit(f"{spec} is not an atfgraph Agent")
    return agent


async def _serve(worker: Worker) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop)
    await worker.run()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m atfgraph.worker", description="Run an atfgraph worker.")
    parser.add_argument("--module", required=True, help="package.module:app naming an Agent")
    parser.add_argument("--server", default=None, help="graph server URL (default: $ATFGRAPH_SERVER)")
    parser.add_argument("--capacity", type=int, default=None, help="handlers at once (default: the agent's)")
    parser.add_argument(
        "--grace-seconds", type=float, default=10.0, help="time to finish handlers on SIGTERM"
    )
    parser.add_argument("--log-level", default="warning", help="debug, info, warning (default), error")
    parser.add_argument(
        "--log-format", default=None, help="text or json (default: $ATFGRAPH_LOG_FORMAT, else text)"
    )
    args = parser.parse_args(argv)
    try:
        setup_logging(args.log_level, log_format(args.log_format))
        tracing.setup_from_env()  # OTEL_TRACES_EXPORTER: spans to a collector (docs/operations.md)
    except (ValueError, ConfigurationError) as exc:
        parser.error(str(exc))
    agent = load_agent(args.module)
    worker = Worker(agent, args.server, capacity=args.capacity, grace_seconds=args.grace_seconds)
    print(
        f"atfgraph worker {agent.node_id}@{agent.version} capacity {worker.capacity}"
        f" -> {worker.transport.base_url}",
        file=sys.stderr,
        flush=True,
    )
    asyncio.run(_serve(worker))
    print(json.dumps({"stats": asdict(worker.stats)}), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
