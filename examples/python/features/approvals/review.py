from __future__ import annotations

import argparse
import asyncio
import json
import os

from atfgraph import Client


async def wait_for_status(client: Client, traverser_id: str, status: str, seconds: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        current = await client.get(traverser_id)
        if current.status == status:
            return
        if current.is_terminal:
            raise SystemExit(
                f"traverser {traverser_id} reached {current.status} before {status}: {current.error}"
            )
        await asyncio.sleep(0.05)
    raise SystemExit(f"traverser {traverser_id} never reached {status}")


async def wait_for_review_or_result(client: Client, traverser_id: str, seconds: float = 30.0) -> str:
    """'waiting' when the desk asked a person; the terminal status when it decided on its own."""
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        current = await client.get(traverser_id)
        if current.status == "waiting" or current.is_terminal:
            return current.status
        await asyncio.sleep(0.05)
    raise SystemExit(f"traverser {traverser_id} never reached waiting")


async def main(
    ticket: str = "QF-4417", amount: float = 480.0, decision: str = "approved", decide: bool = True
) -> None:
    """Submit a refund; when the desk asks a person, decide it as ``decision`` (or, with
    ``decide=False``, leave it pending and say how to decide it) and print the result."""
    async with Client(os.getenv("ATFGRAPH_SERVER")) as client:
        handle = await client.submit(
            "refunds.request_refund", {"ticket": ticket, "amount_aud": amount, "reason": "cancelled leg"}
        )
        if await wait_for_review_or_result(client, handle.id) == "waiting":
            await wait_for_status(client, handle.id, "waiting")
            pending = [a for a in await client.list_approvals() if a["traverser_id"] == handle.id]
            approval = pending[0]
            print("prompt    ", json.dumps(approval["prompt"]["question"]))
            print("checkpoint", json.dumps(approval["checkpoint"], sort_keys=True))
            if not decide:
                print("run       ", handle.id)
                print("approval  ", approval["id"], "(pending: it waits for a person)")
                print(f"decide it: atfg approvals decide {approval['id']} --approve (or --reject)")
                print(f"follow it: atfg runs watch {handle.id}")
                return
            decided = await client.decide_approval(
                approval["id"], decision, {"note": "verified against the disruption log"}
            )
            print("decided   ", decided["status"], "by", decided["decided_by"])
        else:
            print("no review needed: within the desk's auto-approval limit")
        result = await handle.result(timeout=60)
        print("result", json.dumps(result, sort_keys=True))
        for step in (await handle.path()).items:
            print(f"  {step.target:<26} {step.status}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Submit a refund and review it out of band.")
    parser.add_argument("--ticket", default="QF-4417")
    parser.add_argument("--amount", type=float, default=480.0)
    parser.add_argument("--decision", default="approved", choices=["approved", "rejected"])
    parser.add_argument(
        "--no-decide", action="store_true", help="leave the approval pending for a person and exit"
    )
    args = parser.parse_args()
    asyncio.run(main(args.ticket, args.amount, args.decision, decide=not args.no_decide))
