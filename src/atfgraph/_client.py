"""The client: submit traversers, follow them, and review approvals from any program.

``waiting`` is not terminal: :meth:`TraverserHandle.result`, :meth:`Client.wait` and
:meth:`Client.traverse` keep waiting through a pause until the resumed handler finishes, so their
timeout includes human review time. Waits are long polls: the server answers the moment the
traverser changes, so following a traverser costs a request per change, not per interval.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any

from ._errors import ServerUnavailableError, TraverserFailedError, TraverserTimeoutError
from ._models import Checkpoint, ErrorInfo, PathItem, TraverserInfo, TraverserPath
from ._transport import Transport, q

_POLL_SECONDS = 30.0
_RECONNECT_SECONDS = 0.25


class TraverserHandle:
    """A submitted traverser."""

    def __init__(self, client: Client, traverser_id: str) -> None:
        self.client = client
        self.id = traverser_id

    def __repr__(self) -> str:
        return f"TraverserHandle({self.id!r})"

    async def result(self, timeout: float | None = None) -> Any:
        """The handler's result once it succeeds; TraverserFailedError if it fails or is
        cancelled, TraverserTimeoutError after ``timeout`` seconds (None waits forever)."""
        info = await self.client.wait(self.id, timeout=timeout)
        if info.status != "succeeded":
            raise TraverserFailedError(self.id, info.status, info.error)
        return info.result

    async def status(self) -> TraverserInfo:
        return await self.client.get(self.id)

    async def path(self) -> TraverserPath:
        return await self.client.path(self.id)


class Client:
    """``async with Client() as client:`` — talks to ``server_url``, else ``ATFGRAPH_SERVER``,
    else http://127.0.0.1:7878, over one keep-alive connection pool. ``token`` defaults to
    ``$ATFGRAPH_TOKEN``, else the owner credential a local server wrote on its first start."""

    def __init__(
        self, server_url: str | None = None, *, timeout: float = 30.0, token: str | None = None
    ) -> None:
        self._transport = Transport(server_url, timeout=timeout, token=token, kind="owner")

    @property
    def server_url(self) -> str:
        return self._transport.base_url

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def request(
        self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None
    ) -> Any:
        """A raw API v2 call (``path`` below /api/v2); errors raise the typed exceptions."""
        return await self._transport.request(method, path, body, params)

    # -- traversers ----------------------------------------------------------------------------

    async def submit(
        self,
        target: str,
        input: dict[str, Any] | None = None,
        *,
        max_attempts: int = 3,
        idempotency_key: str | None = None,
    ) -> TraverserHandle:
        """Queue skill ``target`` (``node.skill``) with ``input`` as its keyword arguments. With
        ``idempotency_key``, submitting again returns the traverser the first call created."""
        body = {
            "target": target,
            "input": input or {},
            "max_attempts": max_attempts,
            "idempotency_key": idempotency_key,
        }
        view = await self._transport.request("POST", "/traversers", body)
        return TraverserHandle(self, view["id"])

    async def submit_and_wait(
        self,
        target: str,
        input: dict[str, Any] | None = None,
        *,
        statuses: str = "terminal",
        timeout: float = 30.0,
        max_attempts: int = 3,
    ) -> tuple[TraverserHandle, TraverserInfo]:
        """Submit and follow in one round trip: returns once the traverser reaches one of
        ``statuses`` (comma-separated, or ``terminal``) or after ``timeout`` seconds (at most 60)."""
        timeout = max(0.0, min(timeout, 60.0))
        body = {
            "target": target,
            "input": input or {},
            "max_attempts": max_attempts,
            "wait_for": statuses,
            "wait_seconds": timeout,
        }
        view = await self._transport.request("POST", "/traversers", body, read_timeout=timeout + 15)
        return TraverserHandle(self, view["id"]), TraverserInfo.from_json(view)

    def handle(self, traverser_id: str) -> TraverserHandle:
        return TraverserHandle(self, traverser_id)

    async def get(self, traverser_id: str) -> TraverserInfo:
        """The traverser's current state (NotFoundError for an unknown id)."""
        return TraverserInfo.from_json(await self._transport.request("GET", f"/traversers/{q(traverser_id)}"))

    async def wait_for_status(self, traverser_id: str, statuses: str, timeout: float) -> TraverserInfo:
        """One long poll: returns when the status is among ``statuses`` (comma-separated, or
        ``terminal``) or after ``timeout`` seconds, whichever comes first."""
        timeout = max(0.0, min(timeout, 60.0))
        view = await self._transport.request(
            "GET",
            f"/traversers/{q(traverser_id)}",
            params={"wait_for": statuses, "timeout": timeout},
            read_timeout=timeout + 15,
        )
        return TraverserInfo.from_json(view)

    async def wait(self, traverser_id: str, timeout: float | None = None) -> TraverserInfo:
        """Wait until the traverser is terminal (through any pauses)."""
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        return await self._wait_until(traverser_id, deadline, timeout)

    async def _wait_until(
        self, traverser_id: str, deadline: float | None, timeout: float | None
    ) -> TraverserInfo:
        """:meth:`wait` until the loop's clock reads ``deadline``; ``timeout`` is the caller's,
        for the message of TraverserTimeoutError (the time it waited in all)."""
        loop = asyncio.get_running_loop()
        while True:
            remaining = _POLL_SECONDS if deadline is None else deadline - loop.time()
            try:
                info = await self.wait_for_status(traverser_id, "terminal", min(remaining, _POLL_SECONDS))
            except ServerUnavailableError:
                # The traverser's state is durable: ride out a server restart within the timeout.
                if deadline is not None and loop.time() >= deadline:
                    raise
                await asyncio.sleep(min(_RECONNECT_SECONDS, max(0.0, remaining)))
                continue
            if info.is_terminal:
                return info
            if deadline is not None and loop.time() >= deadline:
                raise TraverserTimeoutError(
                    f"traverser {traverser_id} is still {info.status} after {timeout}s"
                )

    async def traverse(
        self, target: str, input: dict[str, Any] | None = None, *, timeout: float | None = None, **kwargs: Any
    ) -> Any:
        """Submit and wait for the result (``input`` and keyword arguments are merged);
        TraverserTimeoutError once ``timeout`` seconds have passed in all."""
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        first_wait = _POLL_SECONDS if timeout is None else min(timeout, _POLL_SECONDS)
        handle, info = await self.submit_and_wait(target, {**(input or {}), **kwargs}, timeout=first_wait)
        if not info.is_terminal:
            info = await self._wait_until(handle.id, deadline, timeout)
        if info.status != "succeeded":
            raise TraverserFailedError(handle.id, info.status, info.error)
        return info.result

    async def path(self, traverser_id: str) -> TraverserPath:
        """The traversal itself, then its child steps in order."""
        data = await self._transport.request("GET", f"/traversers/{q(traverser_id)}/path")
        trav = data["traverser"]
        items = [PathItem(trav["target"], trav["status"], trav["attempt"], trav.get("result"), _error(trav))]
        items += [
            PathItem(s["target"], s["status"], s["attempt"], s.get("result"), _error(s))
            for s in data["steps"]
        ]
        return TraverserPath(traverser_id, items)

    async def cancel(self, traverser_id: str) -> TraverserInfo:
        return TraverserInfo.from_json(
            await self._transport.request("POST", f"/traversers/{q(traverser_id)}/cancel", {})
        )

    async def list_traversers(self, status: str = "waiting", limit: int = 100) -> list[TraverserInfo]:
        data = await self._transport.request("GET", "/traversers", params={"status": status, "limit": limit})
        return [TraverserInfo.from_json(v) for v in data["items"]]

    # -- checkpoints and memory ----------------------------------------------------------------

    async def get_checkpoint(self, traverser_id: str, name: str) -> Checkpoint:
        """The checkpoint's value and revision, or NotFoundError."""
        data = await self._transport.request("GET", f"/traversers/{q(traverser_id)}/checkpoints/{q(name)}")
        return Checkpoint(name, data["value"], data["revision"])

    async def get_memory(self, scope: str, key: str) -> Checkpoint:
        data = await self._transport.request("GET", f"/memory/{q(scope)}/{q(key)}")
        return Checkpoint(key, data["value"], data["revision"])

    # -- approvals -----------------------------------------------------------------------------

    async def list_approvals(
        self, status: str = "pending", traverser_id: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Approvals, oldest first: pending ones unless ``status`` is approved, rejected,
        expired or all."""
        params: dict[str, Any] = {"status": status, "limit": limit}
        if traverser_id is not None:
            params["traverser_id"] = traverser_id
        data = await self._transport.request("GET", "/approvals", params=params)
        items: list[dict[str, Any]] = data["items"]
        return items

    async def get_approval(self, approval_id: str) -> dict[str, Any]:
        approval: dict[str, Any] = await self._transport.request("GET", f"/approvals/{q(approval_id)}")
        return approval

    async def decide_approval(self, approval_id: str, decision: str, response: Any = None) -> dict[str, Any]:
        """Record ``approved`` or ``rejected`` (with an optional JSON ``response``); the paused
        traverser continues. Deciding the same way again is idempotent; differently raises
        ApprovalDecidedError."""
        body = {"decision": decision, "response": response}
        approval: dict[str, Any] = await self._transport.request(
            "POST", f"/approvals/{q(approval_id)}/decide", body
        )
        return approval

    async def create_decision_link(
        self, approval_id: str, *, expires_in_seconds: float | None = None, label: str | None = None
    ) -> dict[str, Any]:
        """Mint a single-use decision link for a pending approval (reviewer, administrator or
        owner): ``{"url", "link"}``. The URL is in this answer only; send it to the reviewer."""
        body = {"expires_in_seconds": expires_in_seconds, "label": label}
        minted: dict[str, Any] = await self._transport.request(
            "POST", f"/approvals/{q(approval_id)}/links", body
        )
        return minted

    async def create_webhook(
        self, wait_id: str, *, expires_in_seconds: float | None = None, label: str | None = None
    ) -> dict[str, Any]:
        """Mint a webhook for a pending approval or pyworkflow hook: ``{"url", "secret", "link"}``;
        the secret signs each POST (docs/reviewers.md) and is in this answer only."""
        body = {"expires_in_seconds": expires_in_seconds, "label": label}
        minted: dict[str, Any] = await self._transport.request("POST", f"/waits/{q(wait_id)}/webhooks", body)
        return minted

    async def list_links(self, wait_id: str) -> list[dict[str, Any]]:
        """The decision links and webhooks of one wait, with their state (never their secrets)."""
        data = await self._transport.request("GET", f"/approvals/{q(wait_id)}/links")
        items: list[dict[str, Any]] = data["items"]
        return items

    async def revoke_link(self, link_id: str) -> dict[str, Any]:
        """Revoke a decision link or a webhook."""
        data = await self._transport.request("POST", f"/links/{q(link_id)}/revoke", {})
        link: dict[str, Any] = data["link"]
        return link

    async def request_approval(
        self,
        traverser_id: str,
        prompt: Any,
        *,
        operation_key: str,
        checkpoint: Any = None,
        expires_in_seconds: float | None = None,
        pause: bool = False,
        response_schema: dict[str, Any] | None = None,
        assign_to: dict[str, list[str]] | None = None,
        escalate: dict[str, Any] | None = None,
        decision_link: bool | dict[str, Any] = False,
    ) -> dict[str, Any]:
        """Create (or find) an approval on a traverser from outside its handler. Without the task
        lease the traverser cannot be paused, so ``pause`` must stay False. ``assign_to``,
        ``escalate`` and ``decision_link`` as for ``Agent.request_approval``: the record of a
        created approval then carries ``decision_link`` (``{"url", "link"}``), in this answer
        only."""
        if pause:
            raise ValueError("Client.request_approval cannot pause a traverser; use app.request_approval")
        body = {
            "traverser_id": traverser_id,
            "operation_key": operation_key,
            "prompt": prompt,
            "checkpoint": checkpoint,
            "expires_in_seconds": expires_in_seconds,
            "pause": False,
            "response_schema": response_schema,
            "assign_to": assign_to,
            "escalate": escalate,
            "decision_link": decision_link,
        }
        answer = await self._transport.request("POST", "/approvals", body)
        approval: dict[str, Any] = answer["approval"]
        if "decision_link" in answer:
            approval = {**approval, "decision_link": answer["decision_link"]}
        return approval


def _error(view: dict[str, Any]) -> ErrorInfo | None:
    error = view.get("error")
    return ErrorInfo(error["code"], error["message"]) if error else None
