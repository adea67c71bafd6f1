"""The server's service functions: each change a person or a program asks for, written once.

Submit, start a pyworkflow run, cancel, request an approval, decide, resume a hook: each is one
function that performs the transition and writes its audit entry in the same transaction (so the
trail records exactly the changes that committed), then wakes whoever waits for it (workers
long-polling the node, clients following the traverser; a pyworkflow runtime polls, or hears
PostgreSQL's NOTIFY). A refused change raises a domain refusal (``_refusals``)
after recording the refusal in the trail; nothing else changed. The HTTP routes, the fast path
and the console call these functions and only translate: request -> arguments, result or
refusal -> response.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema

import pyworkflow
from pyworkflow import validate_payload
from pyworkflow.store import WaitKind, WaitRecord, crashpoint

from .._json import dumps, dumps_read, fragment, loads
from .._models import DECISIONS, TraverserStatus
from . import _tracing as tracing
from ._assign import Assignees, Escalation, assignees_of, deadline_with, write_assignment
from ._graph_rows import Lease, StepRecord
from ._hub import Hub, node_key, traverser_key
from ._identity import AuditEntry, Identity, Principal, Role, write_audit
from ._links import (
    DEFAULT_LINK_SECONDS,
    MAX_LINK_SECONDS,
    Link,
    LinkKind,
    LinkState,
    WaitLinks,
    check_label,
    new_secret,
    write_link,
)
from ._refusals import Conflict, Forbidden, Invalid, NotFound, Refusal
from ._store import GraphStore

log = logging.getLogger("atfgraph.server")

#: The wait kinds a person may resume through the server (approvals are decided instead).
HOOK_KINDS = (WaitKind.HOOK, WaitKind.STEP_HOOK)
#: A wait's deadline (primary key): a link made with its approval never outlives it.
SQL_WAIT_EXPIRY = "SELECT expires_at FROM waits WHERE id = ?"
#: The idempotency keys of a handler's child steps: ``child:<parent traverser id>:<step>``.
CHILD_KEY_PREFIX = "child:"


class Service:
    """The transitions the API, its fast path and the console share."""

    def __init__(self, store: GraphStore, identity: Identity, hub: Hub) -> None:
        self.store = store
        self.identity = identity
        self.hub = hub
        self.links = WaitLinks(store.db)

    async def submit(
        self,
        who: Principal,
        target: str,
        input_json: bytes,
        max_attempts: int,
        idempotency_key: str | None = None,
        parent: Lease | None = None,
        *,
        ident: str | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Queue a traverser (``node.skill``); returns it and whether it was created (False: the
        earlier submission with this idempotency key). ``parent``: the live lease of the handler
        whose child step it is (a worker submits nothing else); its idempotency key is then
        ``child:<parent id>:<step>``, so that a repeated submission (the handler following its
        child) reaches only that handler's children. ``ident``: the new traverser's id, when the
        caller made it (to listen on it before it exists)."""
        detail: dict[str, Any] = {"target": target}
        if parent is not None:
            prefix = f"{CHILD_KEY_PREFIX}{parent.traverser_id}:"
            if idempotency_key is None or not idempotency_key.startswith(prefix):
                raise Invalid(
                    f"a child step's idempotency_key must start with {prefix!r}", "validation_error"
                )
            detail["parent_id"] = parent.traverser_id
        audit = AuditEntry(who, "traverser.submit", None, "allowed", detail)
        with tracing.submitting(target) as traced:
            view, created = await self.store.submit(
                target, input_json, max_attempts, idempotency_key, audit, parent,
                trace_context=None if traced is None else traced[1], ident=ident,
            )  # fmt: skip
            if traced is not None:
                traced[0](view["id"])
        if created:
            crashpoint("server_after_submit")
            self.hub.notify(node_key(view["node_id"]), queued=1)
            log.info("traverser %s: queued (%s)", view["id"], target, extra={"run_id": view["id"]})
        return view, created

    async def start_run(self, who: Principal, workflow: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Start a pyworkflow run of the workflow registered as ``workflow`` with ``kwargs``
        (``pyworkflow.start_by_name``): recorded due now, its audit entry (``run.start``) in the
        same transaction, for whichever pyworkflow runtime serving this database has that
        workflow registered. Answers with the run's summary. A name or input pyworkflow refuses
        is ``Invalid`` and nothing is written."""
        detail = {"workflow": workflow}

        def audit(conn: Any, run_id: str) -> None:
            write_audit(conn, AuditEntry(who, "run.start", run_id, "allowed", detail), time.time())

        try:
            run_id = await pyworkflow.start_by_name(self.store.pyworkflow, workflow, kwargs, also=audit)
        except (pyworkflow.ConfigurationError, pyworkflow.SerializationError) as exc:
            raise Invalid(str(exc), "validation_error") from None
        return await self._summary(run_id)  # start_by_name logged the transition

    async def cancel(self, who: Principal, traverser_id: str) -> dict[str, Any]:
        """Cancel a traverser that has not finished; one already finished is returned as it is."""
        audit = AuditEntry(who, "traverser.cancel", traverser_id, "allowed")
        view = await self.store.cancel(traverser_id, audit)
        self.hub.notify(traverser_key(traverser_id))
        log.info("traverser %s: %s", traverser_id, view["status"], extra={"run_id": traverser_id})
        return view

    async def cancel_run(self, who: Principal, run_id: str, reason: str | None) -> dict[str, Any]:
        """Cancel a run of either kind that has not finished, with an operator's ``reason``
        (kept in its error and the audit entry); one already finished is returned as it is.
        A pyworkflow run ends by the engine's rule (``Store.cancel_run``), its audit entry in the
        same transaction."""
        audit = AuditEntry(who, "run.cancel", run_id, "allowed", {"reason": reason} if reason else None)
        try:
            view = await self.store.cancel(run_id, audit, reason)
        except NotFound:
            pass
        else:
            self.hub.notify(traverser_key(run_id))
            log.info("traverser %s: %s", run_id, view["status"], extra={"run_id": run_id})
            return await self._summary(run_id)
        try:
            cancelled = await self.store.pyworkflow.cancel_run(
                run_id,
                now=time.time(),
                reason=reason,
                also=lambda conn: write_audit(conn, audit, time.time()),
            )
        except pyworkflow.WorkflowNotFoundError:
            await self._refused(who, "run.cancel", run_id, "not_found")
            raise NotFound.of("run", run_id) from None
        if cancelled:
            log.info("run %s: cancelled", run_id, extra={"run_id": run_id})
        return await self._summary(run_id)

    async def retry(self, who: Principal, run_id: str) -> dict[str, Any]:
        """A new attempt of a failed run: a traverser from its checkpoints (``GraphStore.retry``),
        its node's workers woken; a pyworkflow run from what it recorded (``Store.retry_run``:
        completed steps replayed), for the pyworkflow runtime serving this database to claim.
        A traverser answers with its view, a pyworkflow run with its summary."""
        audit = AuditEntry(who, "traverser.retry", run_id, "allowed")
        try:
            view = await self.store.retry(run_id, audit)
        except NotFound:
            return await self._retry_workflow_run(who, run_id)
        except Refusal as exc:
            await self._refused(who, "traverser.retry", run_id, exc.code)
            raise
        self.hub.notify(node_key(view["node_id"]), queued=1)
        self.hub.notify(traverser_key(run_id))
        return view

    async def _retry_workflow_run(self, who: Principal, run_id: str) -> dict[str, Any]:
        audit = AuditEntry(who, "run.retry", run_id, "allowed")
        try:
            outcome = await self.store.pyworkflow.retry_run(
                run_id, now=time.time(), also=lambda conn: write_audit(conn, audit, time.time())
            )
        except pyworkflow.WorkflowNotFoundError:
            await self._refused(who, "run.retry", run_id, "not_found")
            raise NotFound.of("run", run_id) from None
        if outcome != "ok":
            await self._refused(who, "run.retry", run_id, "invalid_state")
            raise Conflict(f"run {run_id!r} is {outcome}; only a failed run is retried", "invalid_state")
        log.info("run %s: retried", run_id, extra={"run_id": run_id})
        return await self._summary(run_id)

    async def _summary(self, run_id: str) -> dict[str, Any]:
        summary: dict[str, Any] = (await self.store.get_run(run_id))["run"]
        return summary

    async def request_approval(
        self,
        who: Principal,
        traverser_id: str,
        epoch: int | None,
        operation_key: str,
        prompt: bytes,
        checkpoint: bytes | None,
        expires_in_seconds: float | None,
        pause: bool,
        steps: Sequence[StepRecord] = (),
        response_schema: bytes | None = None,
        assign_to: Assignees | None = None,
        escalate: Escalation | None = None,
        decision_link: LinkRequest | None = None,
    ) -> tuple[dict[str, Any], bool, tuple[Link, str] | None]:
        """Find or create the approval (traverser, operation_key); with ``pause`` (under the lease
        ``epoch``) a pending one also parks the traverser. Returns it, whether it paused, and the
        decision link minted with it (and its secret) when ``decision_link`` asked for one and
        the approval was created by this call (never for one that existed: its secret was handed
        out once). ``response_schema``, a JSON Schema, is what an approving response must match.
        A new approval is assigned to ``assign_to`` (only they may decide) and, with
        ``escalate``, re-assigned once when it falls due instead of expiring (``_assign``)."""
        if response_schema is not None:
            check_response_schema(loads(response_schema))
        audit = AuditEntry(
            who,
            "approval.request",
            None,
            "allowed",
            {"traverser_id": traverser_id, "operation_key": operation_key},
        )
        if escalate is not None and expires_in_seconds is None:
            raise Invalid("an escalation needs expires_in_seconds (when it escalates)", "validation_error")
        link_seconds = link_label = None
        if decision_link is not None:
            if assign_to is not None or escalate is not None:
                raise Invalid(
                    "a decision link lets whoever holds it decide, which an assignment forbids: "
                    "drop decision_link, or have an assignee mint one (POST /approvals/{id}/links)",
                    "validation_error",
                )
            link_seconds, link_label = _link_terms(decision_link.expires_in, decision_link.label)
        minted: list[tuple[Link, str]] = []
        also = None
        if assign_to is not None or escalate is not None or link_seconds is not None:

            def also(conn: Any, approval_id: str) -> None:
                if assign_to is not None or escalate is not None:
                    write_assignment(conn, approval_id, assign_to, escalate)
                if link_seconds is not None:
                    minted.append(_link_with(conn, who, approval_id, link_seconds, link_label))

        if escalate is not None and expires_in_seconds is not None:
            expires_in_seconds = deadline_with(expires_in_seconds, escalate)
        approval, paused = await self.store.request_approval(
            traverser_id, epoch, operation_key, prompt, checkpoint, expires_in_seconds, pause, steps, audit,
            response_schema, also,
        )  # fmt: skip
        if paused:
            crashpoint("server_after_approval_requested")
            self.hub.notify(traverser_key(traverser_id), TraverserStatus.WAITING.value)
            if epoch is not None:
                self.store.attempts.ended(traverser_id, epoch, "paused")
            log.info(
                "traverser %s: waiting on approval %s",
                traverser_id,
                approval["id"],
                extra={"run_id": traverser_id, "wait_id": approval["id"], "attempt": epoch},
            )
        return approval, paused, (minted[-1] if minted else None)

    async def decide(
        self,
        who: Principal,
        approval_id: str,
        decision: str,
        response: bytes | None,
        link: Link | None = None,
    ) -> dict[str, Any]:
        """Record ``approved`` or ``rejected`` by ``who``; the paused traverser continues. The same
        decision again is idempotent; a different one is refused (``approval_decided``). When the
        approval declares a response schema, an approving response (null when absent) must match
        it (``response_invalid``, with the path in the message and on the refusal); a rejection's
        response is free (a note, or nothing). Through a decision ``link`` (``who`` is the link's
        principal) the link is used in the same transaction, and the approval must still be
        pending."""
        if decision not in DECISIONS:
            raise Invalid("decision must be 'approved' or 'rejected'", "validation_error")
        began = time.time()
        audit = AuditEntry(who, "approval.decide", approval_id, "allowed")
        checks: list[Callable[[Any, float], None]] = []
        if link is not None:  # its minter was allowed to decide (checked when it was minted)
            audit = AuditEntry(who, "approval.decide", approval_id, "allowed", {"link_id": link.id})
            if link.kind is LinkKind.PAGE:
                checks.append(lambda conn, now: self.links.use(conn, link, decision, now))
        try:
            # No link: decided at once unless the approval has terms to read first (PostgreSQL).
            plain = None if link is not None else await self.store.decide_plain(
                approval_id, decision, response, who.name, audit
            )  # fmt: skip
            if plain is not None:
                (approval, node), schema = plain, None
            else:
                approval, node, schema = await self._decide_by_terms(
                    who, approval_id, decision, response, audit, checks, assignees_checked=link is None
                )
        except Refusal as exc:
            await self._refused(who, "approval.decide", approval_id, exc.code)
            raise
        if schema is not None:
            approval["response_schema"] = fragment(dumps(schema))
        if tracing.enabled():
            tracing.decided(approval, self.store.trace_context(approval["traverser_id"]), began)
        if node is not None:
            crashpoint("server_after_decision")
            self.hub.notify(node_key(node), queued=1)
            self.hub.notify(traverser_key(approval["traverser_id"]))
        log.info(
            "approval %s: %s",
            approval_id,
            approval["status"],
            extra={"run_id": approval["traverser_id"], "wait_id": approval_id},
        )
        return approval

    async def _decide_by_terms(
        self,
        who: Principal,
        approval_id: str,
        decision: str,
        response: bytes | None,
        audit: AuditEntry,
        checks: list[Callable[[Any, float], None]],
        *,
        assignees_checked: bool,
    ) -> tuple[dict[str, Any], str | None, Any]:
        """Read the approval's terms, check the response against its schema and (unless a link
        decides) the assignees, then decide with ``checks`` in the decision's transaction:
        ``(approval, node to wake, response schema)``."""
        schema, assigned = await self.store.decision_terms(approval_id)
        if assignees_checked and assigned:
            # Checked again in the decision's transaction: an escalation may re-assign it.
            checks.append(lambda conn, now: _check_assigned(conn, who, approval_id))
        if schema is not None and decision == "approved":
            check_response(schema, None if response is None else loads(response))
        also = None
        if checks:

            def also(conn: Any, now: float) -> None:
                for check in checks:
                    check(conn, now)

        approval, node = await self.store.decide(approval_id, decision, response, who.name, audit, also)
        return approval, node, schema

    async def resume_hook(self, who: Principal, hook_id: str, payload: Any) -> WaitRecord:
        """Deliver ``payload`` to a pending pyworkflow hook or step hook (authorized by role
        instead of the hook's token), checked against the hook's payload schema. The run
        continues on whatever pyworkflow runtime serves this database."""
        pyworkflow_store = self.store.pyworkflow
        wait = await pyworkflow_store.get_wait(hook_id)
        if wait is None or wait.kind not in HOOK_KINDS:
            raise NotFound.of("hook", hook_id)
        now = time.time()
        entry = AuditEntry(who, "hook.resume", hook_id, "allowed", {"payload": payload})
        try:
            data = validate_payload(wait, payload)
            resolved: WaitRecord = await pyworkflow_store.resolve_wait(
                wait_id=hook_id, payload=data, now=now, also=lambda conn: write_audit(conn, entry, now)
            )
        except pyworkflow.SerializationError as exc:
            # Not a value the run could be given exactly (the HTTP and console readers refuse
            # such numbers first; a direct caller may still pass one).
            await self._refused(who, "hook.resume", hook_id, str(exc))
            raise Invalid(str(exc), "validation_error") from None
        except pyworkflow.HookError as exc:
            await self._refused(who, "hook.resume", hook_id, str(exc))
            if isinstance(exc, pyworkflow.PayloadValidationError):
                raise Invalid(str(exc), "payload_invalid", exc.path) from None
            raise Conflict(str(exc), "hook_not_pending") from None
        log.info("hook %s: received", hook_id, extra={"run_id": resolved.run_id, "wait_id": hook_id})
        return resolved

    # -- decision links and webhooks --------------------------------------------------------------

    async def mint_link(
        self,
        who: Principal,
        kind: LinkKind,
        wait_id: str,
        expires_in: float | None,
        label: str | None,
    ) -> tuple[Link, str]:
        """A decision link on a pending approval (``page``) or a webhook on a pending approval or
        hook (``webhook``), minted by ``who``; returns it and its secret (shown once)."""
        action = f"{'approval.link' if kind is LinkKind.PAGE else 'wait.webhook'}.create"
        seconds, label = _link_terms(expires_in, label)
        wait = await self.store.pyworkflow.get_wait(wait_id)
        kinds = (WaitKind.APPROVAL,) if kind is LinkKind.PAGE else (WaitKind.APPROVAL, *HOOK_KINDS)
        if wait is None or wait.kind not in kinds:
            raise NotFound.of("approval" if kind is LinkKind.PAGE else "wait", wait_id)
        if wait.status != "pending":
            await self._refused(who, action, wait_id, f"the wait is {wait.status}")
            raise Conflict(f"wait {wait_id!r} is {wait.status}, not pending", "wait_not_pending")
        try:
            self.store.read_one(lambda conn: _check_assigned(conn, who, wait_id))
        except Forbidden as exc:
            await self._refused(who, action, wait_id, exc.code)
            raise
        if wait.expires_at is not None:  # a link outlives its wait for nothing
            seconds = min(seconds, max(wait.expires_at - time.time(), 1.0))
        audit = AuditEntry(who, action, wait_id, "allowed", {"label": label} if label else None)
        return await self.links.mint(kind, wait_id, who.name, seconds, label, audit)

    async def links_of(self, wait_id: str, kind: LinkKind | None = None) -> list[Link]:
        """The links of an existing wait (of ``kind``, or every kind); an unknown wait is refused."""
        if await self.store.pyworkflow.get_wait(wait_id) is None:
            raise NotFound.of("wait", wait_id)
        return [link for link in self.links.of_wait(wait_id) if kind is None or link.kind is kind]

    def link_principal(self, link: Link) -> Principal:
        """Who acts through a link: named after it, with a reviewer's rights on its one wait."""
        return Principal(link.id, link.principal_name, Role.REVIEWER)

    async def decide_by_link(self, link: Link, decision: str, response: bytes | None) -> dict[str, Any]:
        """Decide the link's approval through the link (single use); a link that is not live is
        refused (``link_used``, ``link_revoked``, ``link_expired``) and the refusal audited."""
        who = self.link_principal(link)
        state = link.state(time.time())
        if state is not LinkState.LIVE:
            await self._refused(who, "approval.decide", link.wait_id, f"link {link.id} is {state.value}")
            raise Conflict(f"this decision link was {state.value}", f"link_{state.value}")
        return await self.decide(who, link.wait_id, decision, response, link)

    async def resume_by_webhook(self, link: Link, body: dict[str, Any]) -> dict[str, Any]:
        """Resume the webhook's wait with a signed body: an approval's ``decision`` (and
        ``response``) through :meth:`decide`, a hook's ``payload`` through :meth:`resume_hook`.
        The same body again answers as the first did; a different decision or payload is
        refused (409)."""
        who = self.link_principal(link)
        state = link.state(time.time())
        if state is not LinkState.LIVE:
            await self._refused(
                who, "wait.webhook.resume", link.wait_id, f"webhook {link.id} is {state.value}"
            )
            raise Conflict(f"this webhook was {state.value}", f"webhook_{state.value}")
        wait = await self.store.pyworkflow.get_wait(link.wait_id)
        if wait is None:
            raise NotFound.of("wait", link.wait_id)
        if wait.kind is WaitKind.APPROVAL:
            decision = body.get("decision")
            if decision not in DECISIONS:
                raise Invalid("body.decision must be 'approved' or 'rejected'", "validation_error")
            response = body.get("response")
            approval = await self.decide(
                who, wait.id, decision, None if response is None else dumps_read(response)
            )
            return {"kind": "approval", "approval": approval}
        if set(body) - {"payload"}:
            raise Invalid('a hook\'s webhook body is {"payload": ...}', "validation_error")
        payload = body.get("payload")
        if wait.status == "received" and _same_payload(wait, payload):
            return {"kind": wait.kind.value, "hook_id": wait.id, "run_id": wait.run_id, "status": "received"}
        resolved = await self.resume_hook(who, wait.id, payload)
        return {
            "kind": resolved.kind.value,
            "hook_id": resolved.id,
            "run_id": resolved.run_id,
            "status": "received",
        }

    async def revoke_link(self, who: Principal, link_id: str) -> Link:
        link = self.links.get(link_id)
        action = "approval.link.revoke" if link.kind is LinkKind.PAGE else "wait.webhook.revoke"
        return await self.links.revoke(link_id, AuditEntry(who, action, link_id, "allowed"))

    async def _refused(self, who: Principal, action: str, target: str, detail: str) -> None:
        await self.identity.audit(who, action, target=target, outcome="refused", detail=detail)


def _link_with(
    conn: Any, who: Principal, approval_id: str, seconds: float, label: str | None
) -> tuple[Link, str]:
    """The decision link asked for with an approval, written in its transaction: it never
    outlives the approval's deadline. Returns it and its secret."""
    now = time.time()
    expires_at = now + seconds
    row = conn.execute(SQL_WAIT_EXPIRY, (approval_id,)).fetchone()
    if row is not None and row[0] is not None:  # a link outlives its wait for nothing
        expires_at = min(expires_at, float(row[0]))
    link_id, secret = new_secret()
    detail: dict[str, Any] = {"with_approval": True, **({"label": label} if label else {})}
    entry = AuditEntry(who, "approval.link.create", approval_id, "allowed", detail)
    link = write_link(
        conn, LinkKind.PAGE, link_id, secret, approval_id, who.name, now, expires_at, label, entry
    )
    return link, secret


@dataclass(frozen=True, slots=True)
class LinkRequest:
    """A decision link asked for with the approval it decides (``decision_link`` at creation)."""

    expires_in: float | None = None
    label: str | None = None


def _link_terms(expires_in: float | None, label: str | None) -> tuple[float, str | None]:
    """A link's lifetime (the default when None) and label, checked; ``Invalid`` otherwise."""
    try:
        label = check_label(label)
    except ValueError as exc:
        raise Invalid(str(exc), "validation_error") from None
    seconds = DEFAULT_LINK_SECONDS if expires_in is None else expires_in
    if not 0 < seconds <= MAX_LINK_SECONDS:
        raise Invalid(f"expires_in_seconds must be in (0, {MAX_LINK_SECONDS:.0f}]", "validation_error")
    return seconds, label


def check_response_schema(schema: Any) -> None:
    """A response schema must be a JSON Schema object that its own metaschema accepts."""
    if not isinstance(schema, dict):
        raise Invalid("body.response_schema must be a JSON Schema object", "validation_error")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise Invalid(
            f"body.response_schema is not a valid JSON Schema: {exc.message}", "validation_error"
        ) from None


def check_response(schema: Any, response: Any) -> None:
    """Refuse an approving response that does not match the approval's response schema."""
    try:
        pyworkflow.check_json_schema(schema, response, "the approval's response schema")
    except pyworkflow.PayloadValidationError as exc:
        message = str(exc).replace("payload does not match", "the response does not match", 1)
        raise Invalid(message, "response_invalid", exc.path) from None


def _check_assigned(conn: Any, who: Principal, approval_id: str) -> None:
    """Refuse ``who`` an approval assigned to others (``not_assigned``)."""
    assignees = assignees_of(conn, approval_id)
    if assignees is not None and not assignees.allows(who):
        names = ", ".join([*(f"role {r}" for r in assignees.roles), *assignees.principals])
        raise Forbidden(f"approval {approval_id!r} is assigned to {names}", "not_assigned")


def _same_payload(wait: WaitRecord, payload: Any) -> bool:
    """Whether a received hook got this payload (a webhook's repeated delivery)."""
    try:
        return bytes(validate_payload(wait, payload)) == bytes(wait.payload or b"")
    except (pyworkflow.HookError, pyworkflow.SerializationError):  # not a payload it could take
        return False


__all__ = [
    "CHILD_KEY_PREFIX",
    "HOOK_KINDS",
    "LinkRequest",
    "Service",
    "check_response",
    "check_response_schema",
]
