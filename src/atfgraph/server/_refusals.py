"""Domain refusals: what the graph store and the service functions raise when a transition is not
allowed. A refusal rolls its transaction back, so it changed nothing. It carries the stable code
the API reports (documented in docs/atfgraph.md) but no HTTP status: the edge (``_errors``) maps
each kind to one::

    Refusal                  a transition was refused; nothing changed
    ├── NotFound             the traverser, approval, checkpoint, worker, ... does not exist
    ├── LeaseLost            the caller's lease (epoch) is not the live one, or it ran out
    ├── Forbidden            the caller may not do this (a worker naming a lease it does not hold)
    ├── Conflict             the current state forbids it: approval_decided, approval_conflict,
    │                        revision_conflict, idempotency_conflict, invalid_state, lease_required,
    │                        hook_not_pending
    ├── Invalid              the request is well formed but its content is refused (payload_invalid)
    └── Forbidden            the approval is assigned to others (not_assigned)
"""

from __future__ import annotations


class Refusal(Exception):
    """A transition was refused; nothing changed."""

    code = "refused"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __reduce__(self) -> tuple[type[Refusal], tuple[str, str]]:
        return (type(self), (self.message, self.code))


class NotFound(Refusal):
    code = "not_found"

    @classmethod
    def of(cls, kind: str, ident: str) -> NotFound:
        return cls(f"{kind} {ident!r} not found")


class LeaseLost(Refusal):
    code = "lease_lost"

    @classmethod
    def of(cls, traverser_id: str) -> LeaseLost:
        return cls(f"the lease on traverser {traverser_id!r} is not held (stale epoch or expired)")


class Forbidden(Refusal):
    code = "forbidden"


class Conflict(Refusal):
    code = "conflict"


class Invalid(Refusal):
    """Bad input. ``path`` locates it inside a JSON answer (a response or payload checked
    against its schema; empty when the answer as a whole is wrong or no schema applies)."""

    code = "invalid"

    def __init__(self, message: str, code: str | None = None, path: tuple[str | int, ...] = ()) -> None:
        super().__init__(message, code)
        self.path = path


__all__ = ["Conflict", "Forbidden", "Invalid", "LeaseLost", "NotFound", "Refusal"]
