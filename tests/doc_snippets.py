"""The code blocks of the README and docs/*.md, found by the section that holds them, so that the
tests run each snippet as the page shows it (tests/acceptance/test_doc_snippets.py,
tests/acceptance/atfgraph/test_atfg_doc_snippets.py)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)


def code_blocks(page: str, heading: str, lang: str) -> list[str]:
    """The ``lang`` blocks of ``page`` (relative to the repository) in the section whose heading
    is ``heading`` (up to the next heading of the same or a higher level), in order."""
    lines = (REPO / page).read_text().splitlines(keepends=True)
    section: list[str] | None = None
    level = 0
    in_code = False
    for line in lines:
        if line.startswith("```"):
            in_code = not in_code
        heading_match = None if in_code else re.match(r"(#+) (.*)$", line.rstrip("\n"))
        if heading_match and section is not None and len(heading_match.group(1)) <= level:
            break
        if heading_match and section is None and heading_match.group(2) == heading:
            section, level = [], len(heading_match.group(1))
        elif section is not None:
            section.append(line)
    assert section is not None, f"{page} has no section {heading!r}"
    blocks = [body for found_lang, body in _BLOCK.findall("".join(section)) if found_lang == lang]
    assert blocks, f"{page}, {heading!r}: no {lang} block"
    return blocks


def as_coroutine(snippet: str, name: str = "_snippet") -> str:
    """A snippet written with top-level ``await`` (as in ``python -m asyncio``) as the body of
    ``async def name()``; the free names it uses are the caller's globals."""
    return f"async def {name}():\n" + textwrap.indent(snippet, "    ")


def shell_lines(block: str) -> list[str]:
    """A sh block's commands, comments and blank lines left out."""
    lines = []
    for line in block.splitlines():
        command = line.split("  #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if command:
            lines.append(command)
    return lines
