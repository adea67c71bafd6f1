"""The named crash points (``pyworkflow._crashpoints``): every point the code passes is in a
registry (the engine's ``POINTS``, the graph server's ``SERVER_POINTS``) and every registered
point is passed somewhere, so the reliability campaigns that require each one to be hit
(``tests/reliability/campaigns.py``) cannot require a point that no longer exists."""

from __future__ import annotations

import ast
from pathlib import Path

from pyworkflow._crashpoints import POINTS, SERVER_POINTS

SRC = Path(__file__).resolve().parents[2] / "src"


def passed(package: str) -> set[str]:
    """The names given to ``crashpoint("...")`` in ``src/<package>``."""
    found = set()
    for path in (SRC / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name | ast.Attribute)
                and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr) == "crashpoint"
            ):
                assert node.args and isinstance(node.args[0], ast.Constant), f"{path}: a literal name"
                found.add(node.args[0].value)
    return found


def test_the_engine_passes_exactly_its_points() -> None:
    assert passed("pyworkflow") == set(POINTS)


def test_the_graph_server_passes_exactly_its_points() -> None:
    assert passed("atfgraph") == set(SERVER_POINTS)
    assert passed("atfgraph/server") == set(SERVER_POINTS)


def test_the_registries_are_disjoint() -> None:
    assert len(set(POINTS) | set(SERVER_POINTS)) == len(POINTS) + len(SERVER_POINTS)
