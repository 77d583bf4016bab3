"""The ledger's records: a session's reservation in ``sessions`` (with its kernels), a
queued session in ``queue``, how a batch session ended in ``ended``, a forced destroy's
leftovers in ``forsaken``, an agent's kept read in ``agents``, an agent held out of
service in ``availability`` (and in the agent's own file), and the ``counters``.

A field reads as the key did: None (or the empty value) when the document does not have
it. Only its owners change a reservation, through the methods here: reservations.py
(:meth:`Reservation.confirm`), the queue's preemption (:meth:`Reservation.preempted_for`),
end signals (:meth:`Reservation.signalled`) and restarts
(:meth:`Reservation.keep_for_restarts`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_state import (
    AgentState,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.json_record import (
    Record,
    record_of,
    records_of,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import SessionSpec
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import spec_canonical

CREATING = "creating"
READY = "ready"


@dataclass(kw_only=True)
class Kernel(Record):
    """One container of a reservation: where it runs and what it was given."""

    KIND: ClassVar[str] = "kernel"

    host: str = ""  # main1, sub1, ...
    agent: str = ""
    cpu: float = 0.0
    mem: int = 0
    gpu: int = 0
    gpu_devices: list[int] = field(default_factory=list)


@dataclass(kw_only=True)
class Attempt(Record):
    """An earlier attempt of a gang that restarted (steps/restarts.py makes it): its
    number, how it ended (session/job_end.py's fields, as given), where each member ran
    (its output is kept there), when it was removed, why it started again, and the agents
    that did not answer then (``left_on``)."""

    KIND: ClassVar[str] = "attempt"

    attempt: int = 0
    state: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    failed: Any = None
    started: Any = None
    ended: Any = None
    members: dict[str, str] | None = None
    removed_at: float | None = None
    restarted_because: str | None = None
    left_on: list[str] | None = None


def _attempts() -> tuple[Any, Any]:
    """The NESTED pair of a record's ``attempts`` (a list of :class:`Attempt`)."""
    load, dump = records_of(Attempt)
    return (lambda raw: None if raw is None else load(raw)), (
        lambda value: None if value is None else dump(value)
    )


@dataclass(kw_only=True)
class Reservation(Record):
    """A session's reservation (document.py; reservations.py makes and ends it)."""

    KIND: ClassVar[str] = "reservation"
    NESTED: ClassVar[Mapping[str, Any]] = {"kernels": records_of(Kernel), "attempts": _attempts()}

    name: str = ""
    session_id: str = ""
    spec_hash: str = ""
    state: str = ""  # CREATING until its create confirms it READY
    reserved_at: float = 0.0
    expires_at: float | None = None  # a creating reservation's end, unless confirmed
    ready_at: float | None = None
    kernels: list[Kernel] = field(default_factory=list)
    owner: str | None = None
    type: str | None = None  # batch, interactive
    lifetime_s: float | None = None
    deadline: float | None = None  # when its lifetime is up (epoch seconds)
    end_signal: str | None = None  # USR1@300: the signal and its lead before the end
    end_signal_at: float | None = None  # when its end signal went out
    adopted: bool | None = None  # taken in from its agents, not confirmed by its create
    submitted_at: float | None = None  # a session that waited in the queue
    preempted_by: dict[str, Any] | None = None  # {session, at}: a preemption stops it
    # What a restart needs (restarts.py): the request, the people's keys, the attempt.
    spec: dict[str, Any] | None = None
    authorized_keys: list[str] | None = None
    attempt: int | None = None
    attempts: list[Attempt] | None = None

    @property
    def agents(self) -> set[str]:
        """The agents its kernels run on."""
        return {str(k.agent) for k in self.kernels}

    def confirm(self, now: float, *, adopted: bool = False) -> None:
        """Its session is made: it lasts until the session is destroyed. ``adopted``: its
        containers were found on its agents, not confirmed by its create."""
        self.state, self.expires_at, self.ready_at = READY, None, now
        if adopted:
            self.adopted = True

    def preempted_for(self, session: str, now: float) -> None:
        """A preemption stops it to make room for queued session ``session``."""
        self.preempted_by = {"session": session, "at": now}

    def signalled(self, now: float) -> None:
        """Its end signal went out."""
        self.end_signal_at = now

    def came_from_queue(self, submitted_at: float) -> None:
        self.submitted_at = submitted_at

    def keep_for_restarts(
        self,
        spec: SessionSpec,
        authorized_keys: Sequence[str],
        attempt: int,
        attempts: Sequence[Attempt],
    ) -> None:
        """What placing it again needs: its request (kept in its canonical form), the
        people's keys, its attempt and the ends of the attempts before it."""
        self.spec = spec_canonical(spec)
        if authorized_keys:
            self.authorized_keys = list(authorized_keys)
        self.attempt = attempt
        if attempts:
            self.attempts = list(attempts)


@dataclass(kw_only=True)
class QueueEntry(Record):
    """A queued session (queue/entries.py makes it and takes it out): what its start
    needs, the canonical request (``spec``), its hash, the people's public keys, when it
    was submitted (the ledger's clock) and its sequence number, why it waited at the last
    pass, and a lease while a scheduler pass starts it."""

    KIND: ClassVar[str] = "queue entry"
    NESTED: ClassVar[Mapping[str, Any]] = {"attempts": _attempts()}

    name: str = ""
    spec: dict[str, Any] = field(default_factory=dict)
    spec_hash: str = ""
    group: str = ""
    owner: str | None = None
    submitted_at: float = 0.0
    seq: int | None = None
    reason: str | None = None
    wait: str | None = None  # why it waits, in one word (errors.WAIT_KINDS)
    authorized_keys: list[str] | None = None
    head: bool | None = None  # a gang starting again: at the head of its group
    lease: dict[str, Any] | None = None  # {ticket, until}: a pass starts it
    preempting: dict[str, Any] | None = None  # {victims, at}: stopped to make it room
    # A batch session's gang waiting to start again (restarts.py).
    session_id: str | None = None
    attempt: int | None = None
    attempts: list[Attempt] | None = None
    # Its spec parsed (queue/entries.py), once: never in the document.
    parsed: Any = field(
        default=None, init=False, repr=False, compare=False, metadata={"json": False}
    )

    def waits(self, reason: str, wait: str) -> None:
        """Why it waits now (in words, and in one word)."""
        self.reason, self.wait = reason, wait

    def end_lease(self) -> None:
        """The pass's lease on its start is over: it waits again."""
        if "lease" not in self.absent:
            self.drop("lease")

    def lease_to(self, ticket: str, until: float) -> None:
        """Its start is the create's that shows ``ticket``, until ``until``."""
        self.lease = {"ticket": ticket, "until": until}

    def preempting_for(self, victims: Sequence[str], now: float) -> None:
        """A preemption stops ``victims`` to make it room."""
        self.preempting = {"victims": list(victims), "at": now}
        self.reason = f"preempting {', '.join(victims)} to make room"


@dataclass(kw_only=True)
class Ended(Record):
    """How a batch session ended (history.py keeps the newest): what `session show` and
    `session logs` find once it is gone. The end's fields are job.combine's, as given."""

    KIND: ClassVar[str] = "ended session"
    NESTED: ClassVar[Mapping[str, Any]] = {"attempts": _attempts()}

    name: str = ""
    session_id: str = ""
    removed_at: float = 0.0
    owner: str = ""
    state: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    failed: Any = None  # the member that failed first
    started: Any = None
    ended: Any = None
    reason: str | None = None
    members: Any = None  # each member's agent, where its output is kept
    # A session that restarted: its last attempt's number, the ends of the earlier ones.
    attempt: int | None = None
    attempts: list[Attempt] | None = None


@dataclass(kw_only=True)
class Forsaken(Record):
    """A session a forced destroy released while agents did not answer
    (reservations.forsake): reconcile removes what it left there once they answer."""

    KIND: ClassVar[str] = "forsaken session"

    name: str = ""
    agents: list[str] = field(default_factory=list)  # the agents that did not answer
    at: float = 0.0


@dataclass(kw_only=True)
class KeptRead(Record):
    """An agent's last read, as the ledger keeps it (kept_reads.py makes it and takes a
    removed session out of it): when it was stored and read (the ledger's clock), the
    read's agent (identity, capacity, what is in use: a bai_agent_info result's), the
    sessions it showed (session id -> what it uses there), what it knows of images and
    mount sources, and what the inventory declared for the agent then."""

    KIND: ClassVar[str] = "kept read"
    NESTED: ClassVar[Mapping[str, Any]] = {"agent": record_of(AgentState)}

    stored_at: float = 0.0
    read_at: float = 0.0
    agent: AgentState = field(default_factory=AgentState)
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    images: dict[str, Any] = field(default_factory=dict)
    paths: dict[str, Any] = field(default_factory=dict)
    declared: dict[str, Any] | None = None

    @property
    def identity(self) -> str:
        """The agent's identity when it was read ('' when the read had none)."""
        return str(self.agent.id or "")


@dataclass(kw_only=True)
class Availability(Record):
    """An agent held out of service (availability.py makes it and merges a new one into
    a table of them): paused or drained, the agent's inventory name and identity, by whom,
    why and when, and whose record it is (``purpose``; absent: the operator's). The same
    record is in the ledger (by identity) and in the agent's own file (by slot)."""

    KIND: ClassVar[str] = "record of availability"

    availability: str = ""  # pause, drain
    name: str = ""
    id: str = ""
    by: str = ""
    reason: str = ""
    at: float | None = None
    purpose: str | None = None


@dataclass(kw_only=True)
class Counters(Record):
    """What the scheduler did over time, for the metrics (counters.py counts into it and
    says what each field holds). A counter only grows; one never counted is not in the
    document."""

    KIND: ClassVar[str] = "counters"

    ends: dict[str, float] = field(default_factory=dict)  # "TYPE/RESULT" -> sessions
    restarts: dict[str, float] = field(default_factory=dict)  # cause -> gangs
    wait: dict[str, dict[str, Any]] = field(default_factory=dict)  # group -> histogram
    retries: float = 0  # ledger writes started again
    schedule: dict[str, Any] = field(default_factory=dict)  # the last scheduler pass
    reconcile: dict[str, Any] = field(default_factory=dict)  # the last reconcile
