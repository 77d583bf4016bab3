"""Preemption (docs/placement.md, "Preemption"): a queued session that cannot start may
stop running *preemptible* sessions of a lower priority to make room, as Slurm's
QOS-based preemption does. What a scheduler pass (state=scheduled) decides, and marks in
the ledger in the same compare-and-swap; session_schedule.yml then warns the victims
(their end signal, else the stop's SIGTERM), destroys them as ``preempted`` and starts the
queued session. A victim's gang is queued again through its restarts (restarts.py).

The rules, each one to keep preemption predictable:

- Only a batch session that asked for it (``session_preemptible``) with restarts left is
  ever a victim: it always comes back. Its preempted attempt is not charged to its owner's
  fair-share usage (steps.released).
- Priority here is the *explicit* one only (the owners' policy ``priority``): a victim's
  owner's is strictly lower than the queued session's. Age and fair share order the queue
  but never stop a running session, so a preemptible session is not stopped for a
  colleague who merely waited longer.
- Only when the pass starts nothing, for the first queued session that waits for resources
  nobody ahead of it claims, on agents nobody ahead claims, in its own resource group.
- The fewest victims: the lowest priority first, then the latest started (the least work
  lost), then the victims not needed dropped again.
- One preemption at a time: while a marked victim still runs (for at most ``stale_s``, then
  a pass may choose again), no other starts.

    plan(queue_decisions, agents, ledger, standing_of, now, stale_s) -> Preemption or None
    mark(ledger, preemption, now)    the victims' and the queued session's marks
    under_way(ledger, now, stale_s)  the victims still marked
    victim_of(entry)                 whether a ledger entry was stopped by a preemption
    victim_end(entry, ended, id)     a marked victim's end, made preempted
Pure: no Ansible, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    WAIT_RESOURCES,
    WAIT_TOPOLOGY,
    Pending,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.document import (
    READY,
    Ledger,
    Reservation,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import (
    Agent,
    place,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue.backfill import (
    Running,
    freed,
    held_by,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue.queued import (
    Decision,
    Waiting,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.job_end import JobEnd

# The end of a preempted batch session (jobs/job.py's PREEMPTED).
PREEMPTED = "preempted"
# The mark on a victim's reservation and on the queued session it makes room for.
MARK = "preempted_by"
QUEUED_MARK = "preempting"


@dataclass(frozen=True)
class Victim:
    """A running session a preemption may stop."""

    name: str
    session_id: str
    owner: str
    priority: float  # its owner's explicit priority (0-100)
    started: float  # when it was confirmed
    held: tuple[Running, ...]


@dataclass(frozen=True)
class Preemption:
    """What a pass preempts: ``victims`` for queued session ``session``."""

    session: str
    victims: tuple[str, ...]
    reason: str  # why, as the victims' end and the queue show it
    at: float = 0.0  # when it was decided (the ledger's clock): the warnings go after it

    def as_result(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "victims": list(self.victims),
            "reason": self.reason,
            "at": self.at,
        }


def victim_of(entry: Reservation | None) -> bool:
    """Whether a reservation was marked by a preemption (its end is then ``preempted``)."""
    return bool(entry and entry.preempted_by)


# The ends a preemption turns into ``preempted`` once its victim is marked: the command's
# own after its warning (it saved a checkpoint and exited, or the signal killed it). The
# preemption's stop is preempted already (session_schedule.yml's destroy says so); a
# destroy by hand meanwhile stays cancelled, a lost agent or a lifetime up what it was.
_TURNED = ("succeeded", "failed")


def victim_end(
    entry: Reservation | None, ended: JobEnd | None, session_id: str | None
) -> JobEnd | None:
    """How a session ended, as the ledger records it: a marked victim's end (of that
    ``session_id``) that came after the mark is ``preempted`` for the session it made
    room for - so its gang queues again through its restarts; any other as given."""
    mark = (entry.preempted_by if entry else None) or {}
    if not ended or not mark or entry is None or entry.session_id != session_id:
        return ended
    at = ended.ended
    after = not isinstance(at, (int, float)) or float(at) >= float(mark.get("at") or 0)
    if ended.state not in _TURNED or not after:
        return ended
    return ended.preempted(f"preempted for {mark.get('session')}")


def under_way(ledger: Ledger, now: float, stale_s: float) -> list[str]:
    """The running sessions a preemption marked within ``stale_s``: it is under way."""
    return sorted(
        name
        for name, entry in ledger.sessions.items()
        if entry.preempted_by and now - float(entry.preempted_by.get("at") or 0) < stale_s
    )


def candidates(
    ledger: Ledger, group: str, standing_of: Callable[[str], float], below: float
) -> list[Victim]:
    """The running sessions of ``group`` a preemption may stop for a session of explicit
    priority ``below``: preemptible, confirmed, with restarts left, of an owner whose
    priority is lower; the lowest priority, then the latest started, first."""
    found = []
    for name, entry in ledger.sessions.items():
        spec = entry.spec or {}
        if not spec.get("preemptible") or entry.state != READY:
            continue
        if (spec.get("resource_group") or "default") != group:
            continue
        if int(entry.attempt or 0) >= int(spec.get("restarts") or 0):
            continue
        owner = str(entry.owner or "")
        mine = standing_of(owner)
        if mine >= below:
            continue
        held = tuple(held_by(entry, 0.0))  # ends now
        started = float(entry.ready_at or entry.reserved_at or 0)
        found.append(Victim(name, str(entry.session_id), owner, mine, started, held))
    return sorted(found, key=lambda v: (v.priority, -v.started, v.name))


def fewest(session: Waiting, agents: Sequence[Agent], victims: Sequence[Victim]) -> list[Victim]:
    """The fewest of ``victims`` (in their order) whose stop gives ``session`` room on
    ``agents``: added in order until it fits, then each one not needed dropped again,
    the last added first. [] when even all of them would not give it room."""

    def fits(chosen: Sequence[Victim]) -> bool:
        held = [r for v in chosen for r in v.held]
        try:
            place(session.request, freed(agents, held, 0.0))
        except Pending:
            return False
        return True

    chosen: list[Victim] = []
    for victim in victims:
        chosen.append(victim)
        if fits(chosen):
            break
    else:
        return []
    for victim in reversed(list(chosen)):
        trial = [v for v in chosen if v is not victim]
        if trial and fits(trial):
            chosen = trial
    return chosen


def plan(
    decisions: Sequence[Decision],
    agents: Sequence[Agent],
    ledger: Ledger,
    standing_of: Callable[[str], float],
    now: float,
    stale_s: float,
) -> Preemption | None:
    """What this pass preempts (module docstring), from its ``decisions`` (in queue
    order) over ``agents``; None when it starts something, a preemption is under way, or
    nobody waiting may stop anybody."""
    if any(d.starts for d in decisions) or under_way(ledger, now, stale_s):
        return None
    claimed: set[str] = set()
    for decision in decisions:
        session = decision.session
        # Waiting for room (anywhere, or inside one domain of its topology level).
        blocked = decision.wait in (WAIT_RESOURCES, WAIT_TOPOLOGY) and not decision.permanent
        if blocked and not decision.behind:
            mine = standing_of(session.owner)
            victims = candidates(ledger, session.group, standing_of, mine)
            usable = [a for a in agents if a.name not in claimed]
            chosen = fewest(session, usable, victims) if victims else []
            if chosen:
                names = tuple(v.name for v in chosen)
                reason = (
                    f"preempted for {session.name} (priority {mine:g} over "
                    f"{max(v.priority for v in chosen):g})"
                )
                return Preemption(session.name, names, reason, now)
        claimed.update(decision.claims)
    return None


def mark(ledger: Ledger, preemption: Preemption, now: float) -> None:
    """Mark the victims' reservations and the queued session (ledger.queue)."""
    for name in preemption.victims:
        ledger.sessions[name].preempted_for(preemption.session, now)
    queued = (ledger.queue or {}).get(preemption.session)
    if queued is not None:
        queued.preempting_for(preemption.victims, now)
