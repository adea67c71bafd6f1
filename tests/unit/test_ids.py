"""Run and wait ids: unique, URL-safe, and ordered by creation time as plain text."""

from __future__ import annotations

import re
import time

from pyworkflow._ids import new_id


def test_ids_sort_by_creation_time_and_are_unique() -> None:
    earlier = [new_id() for _ in range(1000)]
    time.sleep(0.002)
    later = [new_id() for _ in range(1000)]
    assert len(set(earlier + later)) == 2000
    assert max(earlier) < min(later)
    for ident in earlier + later:
        assert re.fullmatch(r"A[-0-9A-Z_a-z]{21}", ident), ident
