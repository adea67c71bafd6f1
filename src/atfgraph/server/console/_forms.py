"""The console's forms that change things: decide an approval, resume a hook, start a run (a
traverser, or a pyworkflow run by workflow name).

Each calls the service function the API calls (``Service.decide``, ``Service.resume_hook``), so
the console records exactly what ``POST /api/v2/approvals/{id}/decide`` and
``POST /api/v2/hooks/{id}/resume`` record, with the signed-in principal as ``decided_by``. A
success redirects (POST-redirect-GET) with a message. A refused answer (not JSON, a field of the
wrong type, a response or payload that does not match its schema) is *not* a redirect: the page
the form came from is rendered again (422) with what the reviewer typed and the error beside
the field it concerns, so nothing typed is lost. Other refusals (decided meanwhile, not found)
redirect with the reason.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar
from urllib.parse import quote, unquote, urlsplit

from fastapi import APIRouter, Request, Response

from pyworkflow import ConfigurationError, check_workflow_name
from pyworkflow.store import WaitKind

from ..._json import MAX_DEPTH, dumps, dumps_read, loads, loads_exact
from .._identity import Permission
from .._refusals import Invalid, NotFound, Refusal
from .._service import HOOK_KINDS
from ._answers import Answer, Field, field_of, read_answer, schema_fields
from ._common import (
    Auth,
    Draft,
    _back,
    _flash,
    _form,
    _redirect,
    _service,
    _store,
    _text,
    _writer,
    error_page,
    render,
)
from ._pages import inbox_context, runs_context
from ._run_pages import ACTIONS, UNCLAIMED, WORKFLOW_RUNTIME, run_page

router = APIRouter(include_in_schema=False)


async def _again(request: Request, auth: Auth, back: str, draft: Draft) -> Response:
    """The page at ``back`` (the inbox or a run's page) rendered again with ``draft``."""
    parts = urlsplit(back)
    if parts.path.startswith("/runs/") and parts.path.count("/") == 2:
        return await run_page(request, auth, unquote(parts.path[6:]), draft)
    scope = dict(request.scope, path="/inbox", query_string=parts.query.encode(), method="GET")
    context = inbox_context(Request(scope), draft)
    return render(request, "inbox.html", auth, 422, **context)


def _refused(answer: Answer, exc: Invalid, fields: list[Field] | None, raw: str) -> dict[str, str]:
    """The errors of a refused answer: beside the field the refusal's path points at; a refusal
    of the form itself (a decision that is neither approve nor reject) above the form."""
    errors = dict(answer.errors)
    where = "" if exc.code == "validation_error" and not exc.path else field_of(exc.path, fields, raw)
    errors[where] = f"{exc.message} ({exc.code})"
    return errors


@router.post("/approvals/{approval_id}/decide")
async def decide(request: Request, approval_id: str) -> Response:
    form = await _form(request)
    auth = await _writer(request, form, Permission.DECIDE, "approval.decide", approval_id)
    back = _back(form, "/inbox")
    decision = _text(form, "decision")
    store = _store(request)
    try:
        fields = schema_fields((await store.decision_terms(approval_id))[0])
    except NotFound:
        fields = None
    answer = read_answer(form, fields, "response", note_key="note")
    if answer.errors:
        return await _again(request, auth, back, Draft(approval_id, answer.typed, answer.errors))
    response: Any = answer.value
    if decision == "rejected" and response == {}:
        response = None  # a rejection with no field filled in carries no response
    try:
        stored = None if response is None else dumps(response, what="the response")
        await _service(request).decide(auth.principal, approval_id, decision, stored)
    except Invalid as exc:
        errors = _refused(answer, exc, fields, "response")
        return await _again(request, auth, back, Draft(approval_id, answer.typed, errors))
    except Refusal as exc:
        await _flash(
            request, auth, "error", f"Approval {approval_id} was not decided: {exc.message} ({exc.code})"
        )
        return _redirect(back)
    await _flash(request, auth, "ok", f"Approval {approval_id} {decision} by {auth.principal.name}.")
    return _redirect(back)


@router.post("/hooks/{hook_id}/resume")
async def resume(request: Request, hook_id: str) -> Response:
    form = await _form(request)
    auth = await _writer(request, form, Permission.DECIDE, "hook.resume", hook_id)
    back = _back(form, "/inbox")
    wait = await _store(request).pyworkflow.get_wait(hook_id)
    schema = None
    if wait is not None and wait.kind in HOOK_KINDS and wait.payload_schema is not None:
        schema = loads(wait.payload_schema)
    fields = schema_fields(schema)
    answer = read_answer(form, fields, "payload", note_key=None)
    if answer.errors:
        return await _again(request, auth, back, Draft(hook_id, answer.typed, answer.errors))
    try:
        await _service(request).resume_hook(auth.principal, hook_id, answer.value)
    except Invalid as exc:
        errors = _refused(answer, exc, fields, "payload")
        return await _again(request, auth, back, Draft(hook_id, answer.typed, errors))
    except Refusal as exc:
        await _flash(request, auth, "error", f"Hook {hook_id} was not resumed: {exc.message} ({exc.code})")
        return _redirect(back)
    kind = "step hook" if wait is not None and wait.kind == WaitKind.STEP_HOOK else "hook"
    await _flash(
        request,
        auth,
        "ok",
        f"Hook {hook_id} resumed by {auth.principal.name}: the payload is recorded. The run continues "
        f"on a pyworkflow runtime serving this database (the console cannot see one); its {kind} "
        "returns the payload there.",
    )
    return _redirect(back)


@router.post("/runs/{run_id}/{action}")
async def run_action(request: Request, run_id: str, action: str) -> Response:
    """Cancel or retry a run of either kind from its page, after the page's confirmation step."""
    if action not in ACTIONS:
        return error_page(request, 404, "Not found", f"There is no run action {action[:40]!r}.")
    form = await _form(request)
    auth = await _writer(request, form, Permission.SUBMIT, f"traverser.{action}", run_id)
    here = f"/runs/{quote(run_id, safe='')}"
    if _text(form, "confirmed") != "yes":
        return _redirect(f"{here}?confirm={action}")
    service = _service(request)
    try:
        if action == "cancel":
            view = await service.cancel_run(auth.principal, run_id, None)
        else:
            view = await service.retry(auth.principal, run_id)
    except Refusal as exc:
        await _flash(
            request, auth, "error", f"Run {run_id}: the {action} was refused: {exc.message} ({exc.code})"
        )
        return _redirect(here)
    done = "cancelled" if action == "cancel" else "queued again"
    text = f"Run {run_id} {done} by {auth.principal.name} (now {view['status']})."
    if view.get("kind") == "workflow" and action == "retry":
        text += " " + WORKFLOW_RUNTIME
    await _flash(request, auth, "ok", text)
    return _redirect(here)


#: The longest input a run may be started with from the console's form (the API's own bound, a
#: 1 MiB body, still applies after it).
MAX_START_INPUT = 256 * 1024
#: Attempts a run started from the console gets unless the form says otherwise (the API's default).
START_ATTEMPTS = 3


def _start_input(raw_input: str, errors: dict[str, str], whose: str) -> Any:
    """The form's input as ``POST /api/v2/traversers`` and ``POST /api/v2/runs`` read it: a JSON
    object ({} when blank); a refusal is said in ``errors``."""
    inputs: Any = {}
    if raw_input.strip():
        if len(raw_input) > MAX_START_INPUT:
            errors["input"] = f"The input is at most {MAX_START_INPUT // 1024} KiB here."
        else:
            try:
                inputs = loads_exact(raw_input, root="input", max_depth=MAX_DEPTH)
            except ValueError as exc:  # malformed, too deep, or a number JSON would not keep
                errors["input"] = f"The input is not JSON this server keeps exactly: {exc}"
            else:
                if not isinstance(inputs, dict):
                    errors["input"] = (
                        f"The input is the {whose} keyword arguments: a JSON object such as {{}}."
                    )
    return inputs


def _start_errors(target: str, raw_input: str, raw_attempts: str) -> tuple[dict[str, str], Any, int]:
    """The form's values checked as ``POST /api/v2/traversers`` checks them: the errors by field
    (none: valid), the input object, the attempts."""
    errors: dict[str, str] = {}
    node, dot, skill = target.partition(".")
    if not dot or not node or not skill or len(target) > 200 or any(c.isspace() for c in target):
        errors["target"] = "Write the target as node.skill (for example refunds.request_refund)."
    inputs = _start_input(raw_input, errors, "skill's")
    attempts = START_ATTEMPTS
    if raw_attempts.strip():
        try:
            attempts = int(raw_attempts)
        except ValueError:
            attempts = 0
        if not 1 <= attempts <= 1000:
            errors["max_attempts"] = "Attempts are a whole number from 1 to 1000."
    return errors, inputs, attempts


@router.post("/runs")
async def start_run(request: Request) -> Response:
    """Start a run from the Runs page, as ``atfg runs start`` does: a traverser of
    ``node.skill`` (the service's submission, audited as ``traverser.submit``) or a pyworkflow
    run of a workflow by name (``Service.start_run``, audited as ``run.start``), as the form's
    kind says. A refused form (no target or name, input that is not a JSON object) renders the
    Runs page again (422) with what was typed and the reason beside the field; a start lands on
    the new run's page, saying when no worker serves its node yet, or that a pyworkflow run
    waits for a runtime the console cannot see."""
    form = await _form(request)
    workflow_kind = _text(form, "kind") == "workflow"
    action = "run.start" if workflow_kind else "traverser.submit"
    auth = await _writer(request, form, Permission.SUBMIT, action, None)
    typed = {k: _text(form, k) for k in ("target", "workflow", "input", "max_attempts")}
    typed["kind"] = "workflow" if workflow_kind else "traverser"
    if workflow_kind:
        return await _start_workflow_run(request, auth, typed)
    target = typed["target"].strip()
    errors, inputs, attempts = _start_errors(target, typed["input"], typed["max_attempts"])
    if not errors:
        started = await _refused_into(
            errors, _service(request).submit(auth.principal, target, dumps_read(inputs), attempts)
        )
    if errors:
        return _start_refused(request, auth, typed, errors)
    assert started is not None
    view, _ = started
    node = target.partition(".")[0]
    served = any(w["node_id"] == node for w in _store(request).list_workers(1000))
    text = f"Run {view['id']} of {target} started by {auth.principal.name}."
    if not served:
        text += f" No worker has registered node {node!r} yet: it waits in the queue until one does."
    await _flash(request, auth, "ok", text)
    return _redirect(f"/runs/{quote(str(view['id']), safe='')}")


T = TypeVar("T")


async def _refused_into(errors: dict[str, str], start: Awaitable[T]) -> T | None:
    """What ``start`` returns, or None with the service's refusal written into ``errors``
    (beside the input, or above the form)."""
    try:
        return await start
    except Invalid as exc:
        errors["input"] = f"{exc.message} ({exc.code})"
    except Refusal as exc:
        errors[""] = f"The run was not started: {exc.message} ({exc.code})"
    return None


async def _start_workflow_run(request: Request, auth: Auth, typed: dict[str, str]) -> Response:
    errors: dict[str, str] = {}
    name = typed["workflow"].strip()
    try:
        check_workflow_name(name)
    except ConfigurationError as exc:
        errors["workflow"] = (
            "Write the name the workflow is registered under (@workflow(name=...), or "
            f"module:qualname): {exc}"
        )
    inputs = _start_input(typed["input"], errors, "workflow's")
    if not errors:
        run = await _refused_into(errors, _service(request).start_run(auth.principal, name, inputs))
    if errors:
        return _start_refused(request, auth, typed, errors)
    assert run is not None
    text = f"Run {run['id']} of workflow {name} started by {auth.principal.name}. "
    await _flash(request, auth, "ok", text + UNCLAIMED.format(name=name))
    return _redirect(f"/runs/{quote(str(run['id']), safe='')}")


def _start_refused(request: Request, auth: Auth, typed: dict[str, str], errors: dict[str, str]) -> Response:
    """The Runs page again (422) with what was typed and why it was refused."""
    context = runs_context(request)
    context["start"] = {"typed": typed, "errors": errors}
    return render(request, "runs.html", auth, 422, **context)


__all__ = ["router"]
