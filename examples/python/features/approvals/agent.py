from __future__ import annotations

from typing import Dict  # noqa: UP035 - the spec's example, kept as written

from atfgraph import Agent, HandlerError, current_context

app = Agent(
    node_id="refunds", version="1.0.0", description="Refund desk with a durable approval pause", capacity=2
)

AUTO_LIMIT_AUD = 200.0
CASE = "refund case"

FIXTURE_TICKETS: Dict[str, dict] = {  # noqa: UP006
    "QF-4417": {"route": "BNE-SYD", "fare_aud": 612.40, "fare_basis": "flex", "flown": False},
    "NZ-0882": {"route": "AKL-QUN", "fare_aud": 189.00, "fare_basis": "saver", "flown": False},
}


@app.skill()
async def assess(ticket: str) -> dict:
    record = FIXTURE_TICKETS.get(ticket.upper())
    if record is None:
        raise HandlerError(f"unknown ticket {ticket!r}", code="ticket_not_found")
    return {"ticket": ticket.upper(), **record}


@app.traversal(timeout_seconds=3600)
async def request_refund(ticket: str, amount_aud: float, reason: str = "schedule change") -> dict:
    attempt = current_context().attempt
    case = await app.load_checkpoint(CASE)
    if case is None:
        ticket_record = await app.traverse("refunds.assess", ticket=ticket)
        case = {
            "ticket": ticket_record["ticket"],
            "route": ticket_record["route"],
            "fare_aud": ticket_record["fare_aud"],
            "amount_aud": round(float(amount_aud), 2),
            "reason": reason,
            "prepared_on_attempt": attempt,
        }
        await app.save_checkpoint(CASE, case, expected_revision=0)

    if case["amount_aud"] <= AUTO_LIMIT_AUD:
        return {
            "ticket": case["ticket"],
            "amount_aud": case["amount_aud"],
            "status": "approved",
            "decided_by": "desk-policy",
            "attempts": attempt,
        }

    decision = await app.request_approval(
        {
            "question": f"Refund {case['amount_aud']} AUD on {case['ticket']} ({case['route']})?",
            "case": case,
            "auto_limit_aud": AUTO_LIMIT_AUD,
        },
        operation_key=f"refund:{case['ticket']}",
        checkpoint=case,
    )
    return {
        "ticket": case["ticket"],
        "amount_aud": case["amount_aud"],
        "status": decision["status"],
        "decided_by": decision.get("decided_by"),
        "response": decision.get("response"),
        "attempts": current_context().attempt,
        "prepared_on_attempt": case["prepared_on_attempt"],
    }
