"""The faces meet only through public names: atfgraph imports ``pyworkflow`` and
``pyworkflow.store`` (never their private modules), pyworkflow never imports atfgraph, and
``pyworkflow.contrib`` uses only ``pyworkflow``'s facade. Read from the source with ``ast``, so
an import inside a function or under ``TYPE_CHECKING`` counts too."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def imports(package: str) -> Iterator[tuple[str, int, str, tuple[str, ...]]]:
    """(file, line, module, names taken from it) for every import in ``src/<package>``; relative
    imports are resolved to absolute module names."""
    for path in sorted((SRC / package).rglob("*.py")):
        file = str(path.relative_to(SRC))
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        package_parts = parts[:-1]  # the package a relative import starts from
        for node in ast.walk(ast.parse(path.read_text(), file)):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield file, node.lineno, alias.name, ()
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package_parts[: len(package_parts) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                yield file, node.lineno, module, tuple(alias.name for alias in node.names)


def private(name: str) -> bool:
    return any(part.startswith("_") and part != "__future__" for part in name.split("."))


def test_atfgraph_uses_only_pyworkflows_public_modules() -> None:
    found = [
        f"{file}:{line} imports {module} {names}"
        for file, line, module, names in imports("atfgraph")
        if module.split(".")[0] == "pyworkflow"
        and (module not in ("pyworkflow", "pyworkflow.store") or any(private(n) for n in names))
    ]
    assert found == []


def test_pyworkflow_never_imports_atfgraph() -> None:
    found = [f"{f}:{n} imports {m}" for f, n, m, _ in imports("pyworkflow") if m.split(".")[0] == "atfgraph"]
    assert found == []


def test_contrib_uses_only_the_pyworkflow_facade() -> None:
    found = [
        f"{file}:{line} imports {module} {names}"
        for file, line, module, names in imports("pyworkflow/contrib")
        if module.split(".")[0] == "pyworkflow"
        and not module.startswith("pyworkflow.contrib")
        and (module != "pyworkflow" or any(private(n) for n in names))
    ]
    assert found == []


def test_the_walker_resolves_relative_imports_and_sees_private_names() -> None:
    assert private("pyworkflow.store._sqlite") and private("_waits")
    assert not private("pyworkflow.store") and not private("__future__")
    service = [(m, n) for f, _, m, n in imports("atfgraph") if f.endswith("server/_service.py")]
    assert ("atfgraph.server._store", ("GraphStore",)) in service
    assert ("atfgraph._models", ("DECISIONS", "TraverserStatus")) in service
