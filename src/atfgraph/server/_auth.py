"""The seam where authentication will go (a later issue adds roles and tokens).

Every route that acts on behalf of a person depends on :func:`caller`; today the caller is the
owner of a loopback server. Decisions record ``Principal.name`` as ``decided_by``."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    role: str  # "owner" | "admin" | "worker" once tokens exist; only owners and admins may decide


OWNER = Principal(name="owner", role="owner")


async def caller(request: Request) -> Principal:
    """The principal making this request."""
    return OWNER
