"""What a run's page derives from its record: the difference between two checkpoint revisions,
and the timeline with durations.

A **diff** walks two JSON values: objects by key, arrays by position, anything else by value;
each difference is (path, what, before, after) with ``what`` one of ``added``, ``removed``,
``changed``, the path written as a JSON Pointer (``/order/lines/0/qty``; ``""`` is the whole
value). At most MAX_DIFF differences are listed (the page says when there were more).

The **timeline** lists what the store recorded, in time order, each entry with how long after
the previous one it came and, where the record tells it, how long its span took: a wait from
its creation to its resolution, a run from its creation to its end, a checkpoint revision since
the previous one, a pyworkflow step since the previous step or the turn that ran it began (its
events: steps of one turn run one after another).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: At most this many differences between two revisions are listed.
MAX_DIFF = 200


@dataclass(frozen=True, slots=True)
class Change:
    path: str
    what: str  # added, removed, changed
    before: Any = None
    after: Any = None


def _pointer(path: tuple[str, ...]) -> str:
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in path)


def json_diff(before: Any, after: Any, limit: int = MAX_DIFF) -> tuple[list[Change], bool]:
    """The differences from ``before`` to ``after``, and whether there were more than ``limit``."""
    out: list[Change] = []
    more = False

    def walk(a: Any, b: Any, path: tuple[str, ...]) -> None:
        nonlocal more
        if len(out) >= limit:
            more = True
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for key in list(a) + [k for k in b if k not in a]:
                if key not in b:
                    add(Change(_pointer((*path, key)), "removed", a[key], None))
                elif key not in a:
                    add(Change(_pointer((*path, key)), "added", None, b[key]))
                else:
                    walk(a[key], b[key], (*path, key))
            return
        if isinstance(a, list) and isinstance(b, list):
            for i in range(max(len(a), len(b))):
                if i >= len(b):
                    add(Change(_pointer((*path, str(i))), "removed", a[i], None))
                elif i >= len(a):
                    add(Change(_pointer((*path, str(i))), "added", None, b[i]))
                else:
                    walk(a[i], b[i], (*path, str(i)))
            return
        # 1 and 1.0 and True are different JSON; compare types as well as values.
        if type(a) is not type(b) or a != b:
            add(Change(_pointer(path), "changed", a, b))

    def add(change: Change) -> None:
        nonlocal more
        if len(out) >= limit:
            more = True
        else:
            out.append(change)

    walk(before, after, ())
    return out, more


def revisions(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A checkpoint's kept revisions, newest first, each with its diff from the revision kept
    before it (None for the oldest kept) and the seconds since that one was saved."""
    out = []
    for i, rev in enumerate(history):
        older = history[i + 1] if i + 1 < len(history) else None
        view = dict(rev, previous=None, changes=None, more=False, since=None)
        if older is not None:
            changes, more = json_diff(older["value"], rev["value"])
            view.update(
                previous=older["revision"],
                changes=changes,
                more=more,
                since=rev["saved_at"] - older["saved_at"],
            )
        out.append(view)
    return out


@dataclass(frozen=True, slots=True)
class Entry:
    at: float
    what: str
    detail: str
    took: float | None = None  # the span this entry ends, when the record tells it
    gap: float | None = None  # seconds since the previous entry


def timeline(
    record: dict[str, Any],
    approvals: list[dict[str, Any]],
    history: dict[tuple[str, str], list[dict[str, Any]]],
    audit: list[dict[str, Any]],
) -> list[Entry]:
    """The timeline of one run's record (``get_run``'s, decoded) with its approvals (a
    traverser's), kept checkpoint revisions and audit entries."""
    r = record["run"]
    traverser = r["kind"] == "traverser"
    status = r.get("traverser_status", r["status"])
    entries = [Entry(r["created_at"], "submitted" if traverser else "started", r["workflow"])]
    if traverser:
        for s in record["steps"]:
            detail = f"{s['target'] or s['key']} (attempt {s['attempt']})"
            entries.append(Entry(s["updated_at"], f"step {s['status']}", detail))
    else:
        entries += _workflow_steps(record)
    for (scope, name), revs in history.items():
        label = name if not scope else f"{scope} / {name}"
        for i, rev in enumerate(revs):
            since = rev["saved_at"] - revs[i + 1]["saved_at"] if i + 1 < len(revs) else None
            entries.append(
                Entry(rev["saved_at"], "checkpoint saved", f"{label} (revision {rev['revision']})", since)
            )
    for w in record["waits"]:
        if w["kind"] == "approval":
            continue
        entries.append(Entry(w["created_at"], f"{w['kind']} waiting", w["name"] or w["key"]))
        if w["resolved_at"] is not None:
            took = w["resolved_at"] - w["created_at"]
            entries.append(Entry(w["resolved_at"], f"{w['kind']} {w['status']}", w["name"] or w["key"], took))
    for a in approvals:
        entries.append(Entry(a["created_at"], "approval requested", a["operation_key"]))
        if a["decided_at"] is not None:
            took = a["decided_at"] - a["created_at"]
            entries.append(Entry(a["decided_at"], f"approval {a['status']}", f"by {a['decided_by']}", took))
    for e in audit:
        entries.append(
            Entry(e["at"], f"audit {e['action']}", f"{e['principal']} ({e['role']}): {e['outcome']}")
        )
    if r["finished_at"] is not None:
        how = f"after attempt {r['attempt']}" if traverser else r["workflow"]
        entries.append(Entry(r["finished_at"], status, how, r["finished_at"] - r["created_at"]))
    else:
        now = f"attempt {r['attempt']} of {r['max_attempts']}" if traverser else "not finished"
        entries.append(Entry(r["updated_at"], f"now {status}", now))
    entries.sort(key=lambda e: e.at)
    return [
        Entry(e.at, e.what, e.detail, e.took, None if i == 0 else e.at - entries[i - 1].at)
        for i, e in enumerate(entries)
    ]


def _workflow_steps(record: dict[str, Any]) -> list[Entry]:
    """A pyworkflow run's step outcomes from its events, each timed since the previous step or
    the start of the turn that ran it (the run's creation, or a resume or recovery)."""
    out = []
    began: float | None = record["run"]["created_at"]
    for e in record["events"]:
        if e["type"] in ("run_created", "run_resumed", "run_recovered", "run_retried"):
            began = e["at"]
        elif e["type"] in ("step_completed", "step_failed", "step_retrying"):
            took = None if began is None else e["at"] - began
            out.append(Entry(e["at"], e["type"].replace("_", " "), e["key"] or "", took))
            began = e["at"]
        elif e["type"] == "run_suspended":
            began = None
    return out


__all__ = ["MAX_DIFF", "Change", "Entry", "json_diff", "revisions", "timeline"]
