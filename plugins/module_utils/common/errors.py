"""The toolkit's error types, one home for all of them.

``SpecError`` (bad input), ``SessionConflict`` (the name is taken by something else) and
``Pending`` (valid, but nothing fits now) come from the pure logic; ``Failure`` is what a
module raises to end in its one ``fail_json`` with a message a person can act on. The
others belong to one concept each: app proxy routes (``RouteError``), GPUs
(``GpuError``, ``GpuAllocationError``), the session ledger (``LedgerError``, and its store's
``StoreError`` and ``Stale``) and host locks (``Busy``).
"""

from __future__ import annotations


class SpecError(ValueError):
    """Invalid user input; the message says which field, what was given, what is allowed."""


class SessionConflict(ValueError):
    """The session name is taken by containers that do not match the request (another
    spec, leftovers of an earlier attempt); nothing may be changed."""


class Pending(Exception):
    """The session is valid but cannot be placed now (docs/placement.md).

    Its text starts with ``PENDING:``. ``permanent`` is True when waiting cannot help
    (the group has no agents, or the request exceeds the agents' *total* capacity), so
    callers can skip retry loops.
    """

    def __init__(self, reason: str, *, permanent: bool = False) -> None:
        super().__init__(f"PENDING: {reason}")
        self.reason = reason
        self.permanent = permanent


class Failure(Exception):
    """A module's run went wrong; the message is what its ``fail_json`` reports."""


class Refused(Failure):
    """An agent's admission refused a session: what its engine holds leaves no room (the
    create places the session again, with a fresh read of that agent)."""


class RouteError(SpecError):
    """An app proxy route that cannot be made; the message says why and what to change."""


class GpuError(ValueError):
    """Output a parser cannot read, input an allocator cannot honour, or devices Docker
    cannot be given."""


class GpuAllocationError(GpuError):
    """Not enough free devices on an agent. The text starts with ``PENDING:`` so the
    session layer can report it like any other placement that must wait; ``reason`` is
    the text without that prefix."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"PENDING: {reason}")
        self.reason = reason


class LedgerError(ValueError):
    """The ledger file cannot be read; the message says what to do."""


class StoreError(Exception):
    """The store cannot serve the ledger (no swarm, no quorum, too large); changes nothing."""


class Stale(Exception):
    """Another writer changed the ledger since it was read: read again and redo the step."""


class Busy(Exception):
    """A lock was not had within the timeout."""
