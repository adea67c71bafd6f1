"""``pyworkflow.list_runs``: every run of the store, newest first, filtered and cursor-paged, and
refusals of bad arguments that change nothing (on the backend under test)."""

from __future__ import annotations

import pytest

import pyworkflow
from pyworkflow import ConfigurationError, RunStatus, WorkflowNotFoundError, step, workflow


@step
async def double(x: int) -> int:
    return 2 * x


@workflow
async def doubling(x: int) -> int:
    return await double(x)


@workflow
async def failing() -> None:
    raise pyworkflow.FatalError("no")


async def test_list_runs_filters_and_pages(engine: str) -> None:
    ran = [await pyworkflow.start(doubling, i) for i in range(5)]
    failed = await pyworkflow.start(failing)
    for run_id in [*ran, failed]:
        await pyworkflow.wait_for_run(run_id, 30)

    every = await pyworkflow.list_runs()
    assert [r.run_id for r in every] == [failed, *ran[::-1]]  # newest first
    assert every[-1].result == 0 and every[-2].result == 2 and every[0].status == RunStatus.FAILED
    assert [r.run_id for r in await pyworkflow.list_runs(status="failed")] == [failed]
    assert [r.run_id for r in await pyworkflow.list_runs(status=RunStatus.COMPLETED, limit=2)] == ran[::-1][
        :2
    ]
    by_fn = await pyworkflow.list_runs(workflow=doubling)
    assert [r.run_id for r in by_fn] == ran[::-1]
    assert [r.run_id for r in await pyworkflow.list_runs(workflow=by_fn[0].workflow_name)] == ran[::-1]

    pages: list[str] = []
    after: str | None = None
    while True:
        page = await pyworkflow.list_runs(limit=4, after=after)
        pages += [r.run_id for r in page]
        if len(page) < 4:
            break
        after = page[-1].run_id
    assert pages == [r.run_id for r in every]
    assert await pyworkflow.list_runs(after=ran[0]) == []  # the oldest: nothing after it


@pytest.mark.parametrize(
    "kwargs",
    [
        {"limit": 0},
        {"limit": 1001},
        {"limit": True},
        {"limit": "10"},
        {"status": "finished"},
        {"status": 3},
        {"workflow": ""},
        {"workflow": print},
    ],
)
async def test_bad_arguments_are_refused(engine: str, kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        await pyworkflow.list_runs(**kwargs)  # type: ignore[arg-type]


async def test_an_unknown_cursor_is_refused(engine: str) -> None:
    with pytest.raises(WorkflowNotFoundError):
        await pyworkflow.list_runs(after="no-such-run")
    with pytest.raises(WorkflowNotFoundError):
        await pyworkflow.list_runs(after="")


def test_the_blocking_form(tmp_path: object) -> None:
    pyworkflow.configure(storage=f"sqlite:///{tmp_path}/sync.db")
    try:
        assert pyworkflow.list_runs_sync(status="pending") == []
        with pytest.raises(ConfigurationError):
            pyworkflow.list_runs_sync(limit=0)
    finally:
        import asyncio

        asyncio.run(pyworkflow.shutdown())
