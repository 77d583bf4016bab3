"""What the scheduler did, in words: the text the CLI prints and the playbooks' filters
(``bai_reconcile_text``) show, after a reconcile or a scheduler pass. Controller-side only:
the modules that run on the hosts never need it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def reconcile_lines(result: Mapping[str, Any]) -> list[str]:
    """What a reconcile (bai_session_ledger state=reconciled's result) did, as lines."""
    lines = []
    if result.get("rebuilt"):
        lines.append(f"the ledger was rebuilt from the agents' labels ({result['rebuilt']})")
    said = {
        "adopted": "adopted (run on the agents, now in the ledger)",
        "dropped": "reservations dropped (nothing of them runs)",
        "in_flight": "left alone (a create is making them)",
        "incomplete": "missing containers (run their create again to repair, or destroy)",
        "unchecked": "kept (an agent they use was not read)",
        "spared": "incomplete, not removed (not every agent was read)",
        "conflicts": "not adopted (another session holds the name; destroy one)",
        "foreign": "left alone, another session ledger counts them (if that ledger is gone "
        "for good: reconcile --adopt-ledger ID)",
    }
    for key, text in said.items():
        if result.get(key):
            lines.append(f"{text}: {', '.join(result[key])}")
    for row in result.get("remove") or ():
        what = "left by a forced destroy of" if row.get("forced") else "of incomplete"
        lines.append(
            f"removed {row['containers']} container(s) {what} session {row['session']} "
            f"({row['session_id']}) on {row['agent']}"
        )
    if result.get("routes_removed"):
        lines.append(
            f"app proxy routes removed (their sessions are gone): "
            f"{', '.join(result['routes_removed'])}"
        )
    if result.get("stopped"):
        lines.append(
            f"running sessions with stopped containers (a reconcile starts them again): "
            f"{', '.join(result['stopped'])}"
        )
    if result.get("restarted"):
        lines.append(
            f"started again, their SSH mesh checked (an engine restart or someone had "
            f"stopped containers of them): {', '.join(result['restarted'])}"
        )
    for name, why in sorted((result.get("restart_failed") or {}).items()):
        lines.append(f"session {name} was not started again: {why}")
    for name, signal in sorted((result.get("end_signals") or {}).items()):
        lines.append(f"session {name}: its end signal ({signal}) sent to every member")
    for name, why in sorted((result.get("end_signal_failed") or {}).items()):
        lines.append(f"session {name}: its end signal was not sent: {why}")
    if result.get("unread"):
        lines.append(f"not read (see above): {', '.join(result['unread'])}")
    for over in result.get("fenced") or ():
        lines.append(
            f"batch session {over['name']}: its part on {', '.join(over['agents'])} (which did "
            f"not answer) stopped by itself, as its other members did; destroyed, forced there, "
            f"and its gang starts again"
        )
    fenced = [f["name"] for f in result.get("fenced") or ()]
    ended = [
        n
        for n in result.get("ended") or ()
        if n not in (result.get("lifetime_up") or ()) and n not in fenced
    ]
    if ended:
        lines.append(
            f"batch sessions whose command ended, destroyed (their output is kept): "
            f"{', '.join(ended)}"
        )
    if result.get("lifetime_up"):
        lines.append(
            f"sessions whose lifetime is up, stopped and destroyed: "
            f"{', '.join(result['lifetime_up'])}"
        )
    return (lines or ["the ledger and the agents agree"]) + schedule_lines(
        result.get("schedule"), int(result.get("waiting") or 0)
    )


def schedule_lines(done: Mapping[str, Any] | None, waiting: int = 0) -> list[str]:
    """What a scheduler pass (the CLI's ``Scheduled``, as a dict) did, as lines; without
    one, how many sessions are queued (``waiting``)."""
    if not done:
        return [f"sessions queued (PENDING): {waiting}"] if waiting else []
    lines = [
        f"{', '.join(p.get('victims') or [])}: {p.get('reason')}"
        for p in done.get("preempted") or []
    ]
    if done.get("started"):
        lines.append(f"queued sessions started: {', '.join(done['started'])}")
    for name, why in sorted((done.get("failed") or {}).items()):
        lines.append(f"queued session {name} did not start: {why}")
    queue = done.get("queue") or []
    if queue:
        lines.append(
            f"still queued (PENDING): {len(queue)}, first "
            f"{queue[0]['name']} ({queue[0].get('reason') or 'waiting'})"
        )
    return lines or ["nothing queued to start"]
