"""The session ledger: the scheduler pass that starts queued sessions, and the reconcile
that makes the ledger agree with what the agents run."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import runner
from ..errors import BaiClusterError, classify
from .base import Event

RECONCILE = "playbooks/session_reconcile.yml"
SCHEDULE = "playbooks/session_schedule.yml"
# session_destroy.yml (and reconcile, drain and remove, which end with it) runs one run of
# the scheduler pass while sessions wait; the commands here run the pass themselves
# (schedule_sessions: one playbook run per start, a start that fails is reported and
# never fails what came before), so they switch the playbook's off.
NO_PASS: dict[str, Any] = {"session_schedule_after": False}


@dataclass
class Reconciled:
    """What ``reconcile`` found and did (session names; ``remove``: one row per agent and
    session removed, with ``agent``, ``session``, ``session_id``, ``containers``)."""

    adopted: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    remove: list[dict[str, Any]] = field(default_factory=list)
    in_flight: list[str] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    spared: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    forsaken: list[str] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)
    # Batch sessions whose command had ended: destroyed, their output kept.
    ended: list[str] = field(default_factory=list)
    # Sessions whose lifetime was up: stopped (SIGTERM, then SIGKILL) and destroyed.
    lifetime_up: list[str] = field(default_factory=list)
    # Batch sessions that may restart whose part on an agent that did not answer stopped
    # by itself: destroyed, forced there, and queued again ({name, session_id, agents}).
    fenced: list[dict[str, Any]] = field(default_factory=list)
    # Seconds until such a session's fence is over (its members that answer stopped, not
    # yet for the fence's 30 s): the command waits it out and reconciles once more.
    fence_in: float | None = None
    # Running sessions with stopped containers: started again and their SSH mesh checked
    # (``restarted``), or why not (``restart_failed``: name -> why); with ``check``, the
    # sessions that would be (``stopped``).
    restarted: list[str] = field(default_factory=list)
    restart_failed: dict[str, str] = field(default_factory=dict)
    stopped: list[str] = field(default_factory=list)
    # The end signals (session_end_signal) due at this reconcile: session -> signal sent
    # to every member, or session -> why not (sent once: the ledger marked them).
    end_signals: dict[str, str] = field(default_factory=dict)
    end_signal_failed: dict[str, str] = field(default_factory=dict)
    rebuilt: str | None = None
    ledger_ids: list[str] = field(default_factory=list)
    check: bool = False
    # The sessions still queued, and the scheduler pass run after the reconcile.
    waiting: int = 0
    schedule: Scheduled | None = None


@dataclass
class Scheduled:
    """What a scheduler pass did (``session schedule``; also run by destroy and
    reconcile while sessions are queued): the queued sessions it started, those whose
    start failed (name -> why), and the queue afterwards (rows as ``session list``
    gives PENDING sessions); the preemptions it made (each: the queued ``session``, the
    ``victims`` it stopped, and the ``reason``)."""

    started: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    queue: list[dict[str, Any]] = field(default_factory=list)
    runs: int = 0
    preempted: list[dict[str, Any]] = field(default_factory=list)


def schedule_sessions(
    *,
    inventory: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> Scheduled:
    """The scheduler pass: start the queued sessions that fit now, in queue order, one
    playbook run each (playbooks/session_schedule.yml), until a run finds no other one
    to start. A start that fails is reported in ``failed`` and the pass goes on."""
    done = Scheduled()
    budget: int | None = None
    while budget is None or done.runs < budget:
        result = runner.run_playbook(SCHEDULE, {}, inventory=inventory, on_event=on_event, **kwargs)
        done.runs += 1
        data = result.stats.get("bai_schedule")
        error = classify(result)
        if data is None:  # failed before it decided anything
            raise error or BaiClusterError("failed", "session_schedule.yml decided nothing")
        names = [str(n) for n in data.get("start") or []]
        preempted = result.stats.get("bai_preempted")
        if preempted:
            done.preempted.append(
                {key: preempted.get(key) for key in ("session", "victims", "reason")}
            )
        done.queue = list(data.get("queue") or [])
        summary = result.stats.get("bai_session") or {}
        for name in names:
            if error is not None:
                done.failed[name] = error.message
            elif summary.get("state") != "PENDING":
                done.started.append(name)
        # Every run leases one more, so the pass ends: at most this many more runs.
        more = int(data.get("more") or 0)
        if budget is None:
            budget = 1 + more
        # A run that preempted starts nothing: the next one starts what it made room for.
        if not (names or preempted) or not more:
            break
    if done.started or done.failed:
        # The queue as it is now, without the sessions that left it.
        gone = set(done.started) | set(done.failed)
        done.queue = [q for q in done.queue if q.get("name") not in gone]
    return done


def reconcile_sessions(
    *,
    check: bool = False,
    adopt_ledgers: Sequence[str] = (),
    inventory: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> Reconciled:
    """Make the session ledger agree with what the agents run (``check``: report only;
    ``adopt_ledgers``: identities of ledgers gone for good whose sessions it takes in).
    When a restartable batch session with a lost agent is within FENCE_WAIT_S of its
    fence's end, wait it out and reconcile once more, so that its gang starts again in
    this pass rather than the next one (docs/sessions.md, "Restarts")."""
    try:
        return _reconcile(check, adopt_ledgers, inventory, on_event, **kwargs)
    except _FenceSoon as soon:
        time.sleep(soon.seconds + 1)
        return _reconcile(check, adopt_ledgers, inventory, on_event, wait=False, **kwargs)


class _FenceSoon(Exception):
    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.seconds = seconds


# The longest a reconcile waits for a fence to end (scheduling/steps/fencing.py: FENCE_S).
FENCE_WAIT_S = 30


def _reconcile(
    check: bool,
    adopt_ledgers: Sequence[str],
    inventory: str | None,
    on_event: Event | None,
    wait: bool = True,
    **kwargs: Any,
) -> Reconciled:
    extravars: dict[str, Any] = dict(NO_PASS)
    if adopt_ledgers:
        extravars["session_adopt_ledgers"] = list(adopt_ledgers)
    result = runner.run_playbook(
        RECONCILE, extravars, inventory=inventory, on_event=on_event, check=check, **kwargs
    )
    error = classify(result)
    data = result.stats.get("bai_reconcile") or {}
    known = set(Reconciled.__dataclass_fields__) - {"check", "schedule"}
    done = Reconciled(**{k: v for k, v in data.items() if k in known}, check=check)
    done.fence_in = _seconds(data.get("fence_in"))
    waiting = max(int(done.waiting or 0), int(result.stats.get("bai_queue_waiting") or 0))
    # Capacity the reconcile freed (ended lifetimes, dead creates) goes to the queue; so
    # does a gang it queued again while an agent did not answer (the run then fails, naming
    # that agent, after the pass).
    restarted = bool(result.stats.get("bai_sessions_restarted"))
    if not check and waiting > 0 and (error is None or restarted):
        done.schedule = schedule_sessions(inventory=inventory, on_event=on_event, **kwargs)
    if wait and not check and done.fence_in is not None and done.fence_in <= FENCE_WAIT_S:
        raise _FenceSoon(done.fence_in)
    if error is not None:
        raise error
    return done


def _seconds(value: Any) -> float | None:
    """A number of seconds from set_stats (a number, its text, or null/None)."""
    try:
        return None if value is None or value == "" else float(value)
    except (TypeError, ValueError):
        return None
