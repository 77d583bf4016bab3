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


# Why a queued session waits, as one word of a closed set (its ``reason`` says it in full;
# metrics count PENDING sessions by this word, docs/metrics.md):
WAIT_RESOURCES = "resources"  # the agents in service lack the room now
WAIT_BEHIND = "behind"  # it would fit, but sessions ahead in its queue claim those agents
WAIT_OWNER_LIMIT = "owner_limit"  # its owner's limits hold it back
WAIT_NO_AGENTS = "no_agents"  # no agent of its resource group is in service
WAIT_TOPOLOGY = "topology"  # it fits across its agents, but not inside one domain it asks for
WAIT_RESTART = "restart"  # a gang queued to start again, not yet looked at by a pass
WAIT_STARTING = "starting"  # a scheduler pass is starting it (its lease runs)
WAIT_UNKNOWN = "unknown"  # queued by an older toolkit, before a pass looked at it
WAIT_KINDS = (
    WAIT_RESOURCES,
    WAIT_BEHIND,
    WAIT_OWNER_LIMIT,
    WAIT_NO_AGENTS,
    WAIT_TOPOLOGY,
    WAIT_RESTART,
    WAIT_STARTING,
    WAIT_UNKNOWN,
)


class Pending(Exception):
    """The session is valid but cannot be placed now (docs/placement.md).

    Its text starts with ``PENDING:``. ``permanent`` is True when waiting cannot help
    (the group has no agents, or the request exceeds the agents' *total* capacity), so
    callers can skip retry loops. ``kind``: why it waits, one of :data:`WAIT_KINDS`.
    """

    def __init__(self, reason: str, *, permanent: bool = False, kind: str = WAIT_RESOURCES) -> None:
        super().__init__(f"PENDING: {reason}")
        self.reason = reason
        self.permanent = permanent
        self.kind = kind


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
