"""Id prefixes on the command line: ``atfg runs show AZr3kQ1`` for the run whose id starts with
it, when only one does; an ambiguous prefix is an error that lists the candidates, and a prefix
nothing starts with is used as it is, so the command reports ``not found`` as for any
unknown id. The server answers the look-up (``GET /ids``: a
primary-key range, never a scan); an id as long as a traverser's (32 characters) is used as it
is, without one.

A pyworkflow run's id (22 characters) is time-ordered: its first 8 characters are a millisecond
stamp, so runs started close together share a long prefix and the distinguishing characters
come after it. A traverser's (32 hex digits) is random: a few characters usually suffice.
"""

from __future__ import annotations

from ._api import Api
from ._base import EXIT_ERROR, EXIT_USAGE, CliError

#: The longest id either face makes (a traverser's, 32 hex digits); shorter may be a prefix.
ID_LENGTH = 32


def resolve_id(client: Api, kind: str, raw: str) -> str:
    """The one id of ``kind`` (run, approval, wait) that ``raw`` is or starts with."""
    if not raw:
        raise CliError(f"the {kind} id must not be empty", EXIT_USAGE)
    if len(raw) >= ID_LENGTH:
        return raw
    answer = client.get("/ids", {"kind": kind, "prefix": raw})
    items: list[str] = answer["items"]
    if raw in items or (len(items) == 1 and not answer["more"]):
        return raw if raw in items else items[0]
    if not items:
        return raw  # the command's own request says ``not found``, as for any unknown id
    more = ", ..." if answer["more"] else ""
    raise CliError(
        f"ambiguous {kind} id prefix {raw!r}: it matches {', '.join(items)}{more}; give more characters",
        EXIT_ERROR,
    )
