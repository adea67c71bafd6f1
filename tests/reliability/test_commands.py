"""The reliability commands the README and the Makefile document take the options they are
given (running them is what ``make reliability`` and ``make soak`` are for)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from tests.doc_snippets import code_blocks, shell_lines
from tests.reliability.__main__ import make_parser as reliability_parser
from tests.reliability.soak import make_parser as soak_parser

REPO = Path(__file__).resolve().parents[2]
PARSERS = {"reliability": (reliability_parser, "RELIABILITY_ARGS"), "soak": (soak_parser, "SOAK_ARGS")}


def _defaults() -> dict[str, str]:
    makefile = (REPO / "Makefile").read_text()
    return {var: re.search(rf"^{var} \?= (.*)$", makefile, re.M).group(1) for _, var in PARSERS.values()}  # type: ignore[union-attr]


def test_the_documented_commands_parse() -> None:
    defaults = _defaults()
    lines = shell_lines(code_blocks("README.md", "What the tests need", "bash")[0])
    seen = set()
    for line in lines:
        words = shlex.split(line)
        assert words[0] == "make" and words[1] in PARSERS, line
        make_parser, var = PARSERS[words[1]]
        given = dict(w.split("=", 1) for w in words[2:])
        make_parser().parse_args(shlex.split(given.get(var, defaults[var])))
        seen.add(words[1])
    assert seen == set(PARSERS)
    ns = reliability_parser().parse_args(shlex.split(defaults["RELIABILITY_ARGS"]))
    assert ns.full
    ns = soak_parser().parse_args(shlex.split(defaults["SOAK_ARGS"]))
    assert (ns.minutes, ns.runs) == (10, 10_000)
