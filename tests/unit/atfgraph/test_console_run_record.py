"""What the console's run page and Runs page rest on, on a temporary SQLite file or (with
``PYWORKFLOW_TEST_STORE=postgresql``) a new PostgreSQL database: the kept checkpoint revisions
(the last 20, written by the migration's triggers whoever writes, gone with their checkpoint),
the diff between two revisions, the safe Markdown of a question, the Runs page's cursors, and
the per-node notification endpoints and the decision link request (each refusal changes
nothing)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from types import SimpleNamespace
from typing import Any

import pytest
from starlette.requests import Request

import atfgraph.server._console_reads as console_reads
import atfgraph.server.console._common as console_common
import atfgraph.server.console._pages as console_pages
from atfgraph._json import dumps
from atfgraph.server._console_reads import CHECKPOINT_HISTORY
from atfgraph.server._hub import Hub
from atfgraph.server._identity import Identity, Principal, Role
from atfgraph.server._notify import NotifySettings, check_node_endpoint, endpoints_for
from atfgraph.server._refusals import Invalid
from atfgraph.server._routes import parse_link_request
from atfgraph.server._service import LinkRequest, Service
from atfgraph.server._store import GraphStore
from atfgraph.server.console._common import Auth, render, shown_count
from atfgraph.server.console._history import json_diff, revisions
from atfgraph.server.console._markdown import question_html
from atfgraph.server.console._pages import inbox_context, runs_context
from pyworkflow.store import write_checkpoint

ON_POSTGRES = os.environ.get("PYWORKFLOW_TEST_STORE", "sqlite") in ("postgresql", "postgres")
OWNER = Principal("t-owner", "olga", Role.OWNER)


@pytest.fixture
async def service(location: str) -> AsyncIterator[Service]:
    store = GraphStore(location, lease_seconds=30)
    yield Service(store, Identity(store.db), Hub())
    store.close()


async def _traverser_with_checkpoint(service: Service, writes: int) -> str:
    store = service.store
    worker = (await store.register_worker("n", "1.0", 1))["id"]
    trav, _ = await store.submit("n.skill", b"{}", max_attempts=1)
    (task,) = await store.claim(worker, 1)
    for n in range(1, writes + 1):
        value = dumps({"n": n, "items": list(range(n % 4))})
        assert await store.save_checkpoint(trav["id"], task["epoch"], "plan", value, n - 1, []) == n
    return str(trav["id"])


async def test_the_last_20_revisions_of_each_checkpoint_are_kept_and_go_with_it(service: Service) -> None:
    run_id = await _traverser_with_checkpoint(service, 25)
    history, cut = service.store.console_checkpoint_history(run_id)
    assert not cut and list(history) == [("", "plan")]
    kept = history[("", "plan")]
    assert [r["revision"] for r in kept] == list(range(25, 5, -1)) and len(kept) == CHECKPOINT_HISTORY
    assert kept[0]["value"] == {"n": 25, "items": [0]}
    # A bounded read says it was cut.
    assert service.store.console_checkpoint_history(run_id, limit=5)[1] is True
    # Written by another store (pyworkflow's rule on the same database): kept the same way.
    await service.store.db.write(
        lambda c: write_checkpoint(c, run_id, "step#1", "draft", b'{"v": 1}', 0, 1.0)
    )
    history, _ = service.store.console_checkpoint_history(run_id)
    assert [r["revision"] for r in history[("step#1", "draft")]] == [1]
    # Deleted with its checkpoint.
    await service.store.db.write(
        lambda c: c.execute("DELETE FROM checkpoints WHERE run_id = ? AND scope = 'step#1'", (run_id,))
    )
    assert ("step#1", "draft") not in service.store.console_checkpoint_history(run_id)[0]


def test_the_diff_between_two_revisions() -> None:
    before = {"a": 1, "b": {"c": [1, 2, 3], "d": "x"}, "gone": True, "t": 1}
    after = {"a": 1, "b": {"c": [1, 5], "d": "x", "e": None}, "new/key": [], "t": 1.0}
    changes, more = json_diff(before, after)
    assert not more
    assert [(c.path, c.what, c.before, c.after) for c in changes] == [
        ("/b/c/1", "changed", 2, 5),
        ("/b/c/2", "removed", 3, None),
        ("/b/e", "added", None, None),
        ("/gone", "removed", True, None),
        ("/t", "changed", 1, 1.0),  # 1 and 1.0 are different JSON
        ("/new~1key", "added", None, []),
    ]
    assert json_diff("x", 1)[0][0].path == "" and json_diff([1], [1]) == ([], False)
    many, cut = json_diff({str(i): 0 for i in range(300)}, {str(i): 1 for i in range(300)})
    assert len(many) == 200 and cut
    views = revisions([{"revision": 3, "value": {"n": 3}, "saved_at": 30.0},
                       {"revision": 2, "value": {"n": 2}, "saved_at": 20.0}])  # fmt: skip
    assert (views[0]["previous"], views[0]["since"], len(views[0]["changes"])) == (2, 10.0, 1)
    assert views[1]["changes"] is None


@pytest.mark.parametrize(
    "hostile",
    [
        "<script>alert(1)</script>",
        '<img src=x onerror="alert(1)">',
        "[x](javascript:alert(1))",
        "[x](JaVaScRiPt:alert(1))",
        "[x](data:text/html;base64,PHNjcmlwdD4=)",
        "[x](vbscript:msgbox(1))",
        "[x](/relative/path)",
        "<javascript:alert(1)>",
        '[x](https://a.example/" onmouseover="alert(1))',
        '[x](https://a.example "t\\" onclick=\\"alert(1)")',
        "![i](https://a.example/i.png)",
        "<a href='https://a.example'>raw</a>",
    ],
)
def test_a_hostile_question_renders_to_nothing_active(hostile: str) -> None:
    heading, body = question_html(f"Refund?\n\n{hostile}")
    found = _Elements()
    found.feed(str(heading) + str(body))
    for tag, attrs in found.elements:
        assert tag in ALLOWED_TAGS, (tag, hostile)
        assert set(attrs) <= ALLOWED_ATTRIBUTES.get(tag, set()), (tag, attrs, hostile)
        if tag == "a":
            assert (attrs["href"] or "").startswith(("http://", "https://")), attrs
            assert attrs["rel"] == "nofollow noopener noreferrer"


ALLOWED_TAGS = {"p", "strong", "em", "code", "pre", "ul", "ol", "li", "a", "br"}
ALLOWED_ATTRIBUTES = {"a": {"href", "rel", "title"}, "ol": {"start"}}


class _Elements(HTMLParser):
    """Every element of a fragment with its attributes, as a browser's parser would see them."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))


def test_the_markdown_subset() -> None:
    heading, body = question_html("Refund **480** on `QF-1`?\n\n- a *b*\n- [c](https://c.example/?q=1&r=2)")
    assert str(heading) == "Refund <strong>480</strong> on <code>QF-1</code>?"
    assert '<a href="https://c.example/?q=1&amp;r=2" rel="nofollow noopener noreferrer">c</a>' in str(body)
    assert "<ul>" in str(body) and "<em>b</em>" in str(body)
    assert question_html("just text") == ("just text", "")


async def test_the_runs_pages_cursors_reach_every_run_once(service: Service) -> None:
    store = service.store
    ids = [(await store.submit("n.skill", dumps({"i": i}), max_attempts=1))[0]["id"] for i in range(7)]
    newest = ids[::-1]
    first = store.console_runs("all", None, None, None, None, 3)
    assert [r["id"] for r in first.items] == newest[:3] and first.previous is None and first.next
    second = store.console_runs("all", None, None, None, None, 3, after=first.next)
    third = store.console_runs("all", None, None, None, None, 3, after=second.next)
    assert [r["id"] for r in second.items + third.items] == newest[3:] and third.next is None
    back = store.console_runs("all", None, None, None, None, 3, before=second.previous)
    assert [r["id"] for r in back.items] == newest[:3] and back.previous is None
    found = store.console_runs("all", None, None, None, None, 3, search='"i":4')
    assert [r["id"] for r in found.items] == [ids[4]]
    counts = store.console_run_counts("all", None, None, None, None)
    assert counts.by_status == {
        "pending": 7,
        "running": 0,
        "suspended": 0,
        "completed": 0,
        "failed": 0,
        "cancelled": 0,
    }
    assert not counts.partial


async def test_a_search_reads_a_window_at_a_time_and_its_cursors_go_on_past_it(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search reads SEARCH_WINDOW rows a request (here 3), not every row of the listing: a page
    the window did not fill stops there and its cursor goes on from the window's end, so walking
    the cursors reaches every match once; counts are of the newest window and say so."""
    monkeypatch.setattr(console_reads, "SEARCH_WINDOW", 3)
    store = service.store
    needles = {1, 8}
    ids = [
        (
            await store.submit(
                "n.skill", dumps({"i": i, "tag": "needle" if i in needles else "hay"}), max_attempts=1
            )
        )[0]["id"]
        for i in range(10)
    ]
    newest = [r["id"] for r in store.console_runs("all", None, None, None, None, 50).items]
    assert sorted(newest) == sorted(ids)
    wanted = [r for r in newest if ids.index(r) in needles]

    seen: list[str] = []
    pages = []
    page = store.console_runs("all", None, None, None, None, 5, search="NEEDLE")
    while True:
        pages.append(page)
        seen += [r["id"] for r in page.items]
        if page.next is None:
            break
        page = store.console_runs("all", None, None, None, None, 5, search="needle", after=page.next)
    assert seen == wanted  # each match once, newest first
    assert len(pages) == 4  # windows of 3, 3, 3 and the last run
    assert [p.stopped for p in pages] == [True, True, True, False]
    assert pages[0].previous is None and pages[0].next == _cursor_of(store, newest[2])
    assert pages[1].items == [] and pages[1].next == _cursor_of(store, newest[5])
    # The third page's newer runs are not searched yet past one window: it says there may be some.
    assert pages[2].previous is not None
    back = store.console_runs("all", None, None, None, None, 5, search="needle", before=pages[2].previous)
    assert back.items == [] and back.stopped and back.previous == _cursor_of(store, newest[5])
    # From the last window's edge, one run is left: it is searched and nothing goes on past it.

    assert (
        store.console_runs("all", None, None, None, None, 5, search="needle", after=pages[2].next).next
        is None
    )

    counts = store.console_run_counts("all", None, None, None, "needle")
    assert counts.by_status["pending"] == 1 and counts.partial  # one needle in the newest 3
    monkeypatch.setattr(console_reads, "SEARCH_WINDOW", 10)
    counts = store.console_run_counts("all", None, None, None, "needle")
    assert counts.by_status["pending"] == 2 and not counts.partial
    assert store.console_run_counts("all", None, None, None, "nowhere").by_status["pending"] == 0
    monkeypatch.setattr(console_reads, "SEARCH_WINDOW", 3)

    def waits(conn: Any) -> None:
        for i, run_id in enumerate(ids):
            conn.execute(
                "INSERT INTO waits (id, run_id, wait_key, kind, name, status, created_at)"
                " VALUES (?, ?, ?, 'hook', ?, 'pending', ?)",
                (f"w{i}", run_id, f"k{i}", "needle" if i in needles else "hay", float(i)),
            )

    await store.db.write(waits)
    kinds = ("approval", "hook", "step_hook")
    found: list[str] = []
    inbox = store.console_inbox(kinds, "needle", None, 5)
    stops = [inbox.stopped]
    found += [w["id"] for w in inbox.items]
    while inbox.next is not None:
        inbox = store.console_inbox(kinds, "needle", inbox.next, 5)
        stops.append(inbox.stopped)
        found += [w["id"] for w in inbox.items]
    assert found == ["w1", "w8"] and stops == [True, True, True, False]
    assert store.console_inbox(kinds, None, None, 5).stopped is False


async def test_the_pages_say_where_a_search_stopped(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Runs page and the inbox, rendered for a search past its window (here 2): the counts
    end in "+", the page says it read 2 at a time, and the link on continues the search."""
    monkeypatch.setattr(console_reads, "SEARCH_WINDOW", 2)
    monkeypatch.setattr(console_pages, "SEARCH_WINDOW", 2)
    store = service.store
    runs = [(await store.submit("n.skill", dumps({"i": i}), max_attempts=1))[0]["id"] for i in range(4)]

    def waits(conn: Any) -> None:
        for i, run_id in enumerate(runs):
            conn.execute(
                "INSERT INTO waits (id, run_id, wait_key, kind, name, status, created_at)"
                " VALUES (?, ?, ?, 'hook', 'w', 'pending', ?)",
                (f"w{i}", run_id, f"k{i}", float(i)),
            )

    await store.db.write(waits)
    app = SimpleNamespace(state=SimpleNamespace(store=store))
    auth = Auth(OWNER, None)

    def page(path: str, query: str, context: Any) -> str:
        scope = {
            "type": "http",
            "method": "GET",
            "path": path,
            "query_string": query.encode(),
            "headers": [],
            "app": app,
        }
        request = Request(scope)
        return bytes(render(request, path.strip("/") + ".html", auth, **context(request)).body).decode()

    runs_html = page("/runs", "q=nowhere", runs_context)
    assert "0+ matching" in runs_html and "A search reads 2 runs at a time" in runs_html
    assert (
        'rel="next">Search older runs →' in runs_html
        and "No run matches among those searched so far." in runs_html
    )
    found = page("/runs", f"q={runs[0]}", runs_context)  # the oldest run, past the first window
    assert "0+ matching" in found and 'rel="next"' in found and f'data-run-id="{runs[0]}"' not in found
    # ... and yet linked at once: the search is the start of its id (4 characters at least).
    assert f'starts with “{runs[0][:6]}”: <a href="/runs/{runs[0]}">' in page(
        "/runs", f"q={runs[0][:6]}", runs_context
    )
    assert "starts with" not in page("/runs", f"q={runs[0][:3]}", runs_context)
    assert "starts with" not in page("/runs", f"q={runs[0][:4]}%20x", runs_context)
    inbox_html = page("/inbox", "q=nowhere", inbox_context)
    assert "reads 2 waiting items at a time and stopped there" in inbox_html
    assert "matches “nowhere” among those searched so far." in inbox_html
    assert 'rel="next">Search the next 2 →' in inbox_html
    plain = page("/inbox", "", inbox_context)
    assert "Search the next" not in plain and "reads 2 waiting" not in plain
    assert "A search reads" not in page("/runs", "", runs_context)


def _cursor_of(store: GraphStore, run_id: str) -> tuple[float, str]:
    run = next(r for r in store.console_runs("all", None, None, None, None, 50).items if r["id"] == run_id)
    return (run["created_at"], run["id"])


def test_node_endpoints() -> None:
    settings = NotifySettings(
        endpoints=("https://all.example",),
        node_endpoints=(("refunds", "https://r.example"), ("refunds", "https://all.example")),
    )
    assert endpoints_for(settings, "refunds") == ("https://all.example", "https://r.example")
    assert endpoints_for(settings, "billing") == endpoints_for(settings, None) == ("https://all.example",)
    assert check_node_endpoint(" refunds = https://r.example ") == ("refunds", "https://r.example")
    for bad in ("refunds", "=https://x", "refunds=ftp://x", "refunds=", "a\nb=https://x"):
        with pytest.raises(ValueError):
            check_node_endpoint(bad)


async def test_a_decision_link_request(service: Service) -> None:
    assert parse_link_request(None) is None and parse_link_request(False) is None
    assert parse_link_request(True) == LinkRequest()
    assert parse_link_request({"expires_in_seconds": 60, "label": "x"}) == LinkRequest(60.0, "x")
    for bad in ("yes", 1, [], {"expires_in_seconds": True}, {"label": 3}, {"other": 1}):
        with pytest.raises(Invalid):
            parse_link_request(bad)
    trav, _ = await service.submit(OWNER, "n.skill", b"{}", 1)
    approval, paused, minted = await service.request_approval(
        OWNER, trav["id"], None, "k", b'"ok?"', None, 120.0, False, decision_link=LinkRequest(3600.0, "ops")
    )
    assert minted is not None and not paused
    link, secret = minted
    assert (link.wait_id, link.label, link.created_by) == (approval["id"], "ops", "olga")
    assert link.expires_at <= approval["expires_at"]  # never after the approval itself
    assert secret.startswith(link.id + "_")
    again = await service.request_approval(
        OWNER, trav["id"], None, "k", b'"ok?"', None, 120.0, False, decision_link=LinkRequest()
    )
    assert again[2] is None and len(await service.links_of(approval["id"])) == 1
    with pytest.raises(Invalid):
        await service.request_approval(
            OWNER, trav["id"], None, "k2", b'"ok?"', None, None, False, decision_link=LinkRequest(-1.0)
        )
    assert service.store.console_approvals(True, 10)[0]["id"] == approval["id"]
    assert len(service.store.console_approvals(True, 10)) == 1  # the refused one created nothing


async def test_the_consoles_counts_stop_at_the_cap_and_say_so(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A count is a read of every row counted, asked on every live refresh: the inbox's and the
    Runs page's stop at COUNT_CAP (here 3) and show "3+"; a sum of counts says so when any did."""
    monkeypatch.setattr(console_reads, "COUNT_CAP", 3)
    monkeypatch.setattr(console_common, "COUNT_CAP", 3)
    store = service.store
    for _ in range(5):
        await store.submit("n.skill", b"{}", max_attempts=1)
    counts = store.console_run_counts("all", None, None, None, None).by_status
    assert counts["pending"] == 4 and counts["running"] == 0  # stopped at 3 + 1
    assert store.console_run_counts("workflow", None, None, None, None).by_status["pending"] == 0

    def waits(conn: Any) -> None:
        for i, kind in enumerate(["step_hook"] * 5 + ["hook"] + ["timer"] * 4):
            conn.execute(
                "INSERT INTO waits (id, run_id, wait_key, kind, name, status, created_at)"
                " VALUES (?, ?, ?, ?, 'w', 'pending', ?)",
                (f"w{i}", f"r{i}", f"k{i}", kind, float(i)),
            )

    await store.db.write(waits)
    assert store.console_inbox_counts() == {"approval": 0, "hook": 1, "step_hook": 4}
    assert [shown_count(n) for n in (0, 3, 4)] == ["0", "3", "3+"]
    assert shown_count([1, 2]) == "3" and shown_count([4, 1, 0]) == "4+"
    assert shown_count([1, 2], partial=True) == "3+" and shown_count(0, partial=True) == "0+"
