"""The question of a decision card as a small, safe subset of Markdown.

Paragraphs, emphasis (``*em*``, ``**strong**``), inline code and code blocks, bulleted and
numbered lists, line breaks, and links whose target is an absolute ``http://`` or ``https://``
URL. Nothing else is interpreted: raw HTML is escaped (markdown-it's ``html`` option is off),
images, headings, tables and block quotes stay text, and a link to any other scheme
(``javascript:``, ``data:``, a relative path) is not a link: its text is shown as typed. Every
link opens with ``rel="nofollow noopener noreferrer"``. The renderer is markdown-it-py (in the
``server`` extra), whose escaping of text and attributes is what keeps the output safe; the
console's Content-Security-Policy (no inline scripts) is the second fence.

The first paragraph is the card's heading (rendered inline: emphasis, code, links); the rest of
the question follows it as blocks.
"""

from __future__ import annotations

from typing import Any

from markdown_it import MarkdownIt
from markupsafe import Markup

#: The block and inline rules of the subset (markdown-it's "zero" preset enables none).
RULES = (
    "paragraph",
    "list",
    "code",
    "fence",
    "newline",
    "emphasis",
    "backticks",
    "link",
    "autolink",
    "escape",
)
#: Link targets allowed: absolute http and https URLs, nothing else.
SCHEMES = ("http://", "https://")


def _safe_link(url: str) -> bool:
    return url.strip().lower().startswith(SCHEMES)


def _renderer() -> MarkdownIt:
    md = MarkdownIt("zero", {"html": False, "breaks": True, "linkify": False, "typographer": False})
    md.enable(list(RULES))
    md.validateLink = _safe_link  # type: ignore[method-assign]

    def link_open(renderer: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
        tokens[idx].attrSet("rel", "nofollow noopener noreferrer")
        rendered: str = renderer.renderToken(tokens, idx, options, env)
        return rendered

    md.add_render_rule("link_open", link_open)
    return md


_MD = _renderer()


def question_html(text: str) -> tuple[Markup, Markup]:
    """(the heading, the body) of a question given as Markdown, as safe HTML: the first
    paragraph inline, the rest as blocks (empty when the question is one paragraph)."""
    first, _, rest = text.strip().partition("\n\n")
    heading = Markup(_MD.renderInline(first.strip()).strip())
    body = Markup(_MD.render(rest.strip()).strip()) if rest.strip() else Markup("")
    return heading, body


__all__ = ["RULES", "SCHEMES", "question_html"]
