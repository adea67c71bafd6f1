"""The reliability commands the README, docs/guarantees.md and the Makefile document take the
options they are given (running them is what ``make reliability`` and ``make soak`` are for)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from tests.doc_snippets import code_blocks, shell_lines
from tests.reliability.__main__ import make_parser as reliability_parser
from tests.reliability.soak import make_parser as soak_parser

REPO = Path(__file__).resolve().parents[2]
PARSERS = {"reliability": (reliability_parser, "RELIABILITY_ARGS"), "soak": (soak_parser, "SOAK_ARGS")}
MODULES = {"tests.reliability": reliability_parser, "tests.reliability.soak": soak_parser}
PAGES = [("README.md", "What the tests need"), ("docs/guarantees.md", "Measured by the reliability suite")]


def _defaults() -> dict[str, str]:
    makefile = (REPO / "Makefile").read_text()
    found = {}
    for _, var in PARSERS.values():
        match = re.search(rf"^{var} \?= (.*)$", makefile, re.M)
        assert match, f"the Makefile sets no default {var}"
        found[var] = match.group(1)
    return found


def _check(line: str, defaults: dict[str, str]) -> str:
    words = shlex.split(line)
    if words[0] == "make":
        assert words[1] in PARSERS, line
        make_parser, var = PARSERS[words[1]]
        given = dict(w.split("=", 1) for w in words[2:])
        make_parser().parse_args(shlex.split(given.get(var, defaults[var])))
        return words[1]
    assert words[:2] == [".venv/bin/python", "-m"], line
    if words[2] == "pytest":
        assert (REPO / words[-1]).is_dir(), line
        return "pytest"
    MODULES[words[2]]().parse_args(words[3:])
    return words[2]


def test_the_documented_commands_parse() -> None:
    defaults = _defaults()
    seen = {
        _check(line, defaults)
        for page, heading in PAGES
        for line in shell_lines(code_blocks(page, heading, "bash")[0])
    }
    assert {"reliability", "soak", "tests.reliability"} <= seen
    assert reliability_parser().parse_args(shlex.split(defaults["RELIABILITY_ARGS"])).full
    ns = soak_parser().parse_args(shlex.split(defaults["SOAK_ARGS"]))
    assert (ns.minutes, ns.runs) == (10, 10_000)
