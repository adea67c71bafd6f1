from __future__ import annotations

from atfgraph import Agent

app = Agent(node_id="approval", capacity=1)


@app.skill()
async def reviewed() -> dict:
    saved = await app.load_checkpoint("travel brief")
    if saved is None:
        saved = {"origin": "BNE", "revision": 1}
        await app.save_checkpoint("travel brief", saved, expected_revision=0)
    decision = await app.request_approval("Review this plan", operation_key="review", checkpoint=saved)
    return {"decision": decision["status"], "saved": saved}
