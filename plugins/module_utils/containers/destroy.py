"""What a destroy of one or more sessions reaches, and what it achieved
(playbooks/session_destroy.yml; a drain that ends the sessions left on an agent destroys
them all in one run). Pure.

A session the ledger knows is removed from the agents that may hold it (its reservation
and the agents' kept reads) and from the manager when it spans agents (its overlay); one
it does not know, from every agent and the manager. Its reservation is released only
once every place it may be was reached: an agent that did not answer, or one the ledger
names and this inventory lacks, keeps it (and the destroy fails, naming them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.jobs import job


def targets(
    entries: Sequence[Mapping[str, Any]], agents: Sequence[str], manager: str
) -> dict[str, Any]:
    """The plan of a destroy from the ledger's reads (``bai_session_ledger`` state=read
    results, one per name, each with ``item``: the name): per session its agents, whether
    the manager is needed, the agents the inventory lacks; and the union of the agents."""
    sessions: list[dict[str, Any]] = []
    for entry in entries:
        name = str(entry.get("item") or entry.get("name"))
        reservation = entry.get("reservation")
        holders = [str(a) for a in entry.get("holders") or []]
        queued = bool(entry.get("queued")) and not reservation
        if queued:  # PENDING in the queue: nothing of it runs anywhere
            on, unlisted, overlay = [], [], False
        elif reservation:
            on = [a for a in agents if a in holders]
            unlisted = [a for a in holders if a not in agents]
            overlay = len(holders) > 1
        else:
            on, unlisted, overlay = list(agents), [], True
        sessions.append(
            {
                "name": name,
                "session_id": (reservation or {}).get("session_id"),
                "agents": on,
                "manager": [manager] if manager and overlay else [],
                "unlisted": unlisted,
                "queued": queued,
            }
        )
    every = [a for a in agents if any(a in s["agents"] for s in sessions)]
    managers = sorted({m for s in sessions for m in s["manager"]})
    return {"sessions": sessions, "agents": every, "managers": managers}


def _results(registered: Any) -> list[Mapping[str, Any]] | None:
    """A host's registered looped result as a list of item results; None when the host
    did not run the task (unreachable, or failed before it)."""
    if not isinstance(registered, Mapping) or registered.get("unreachable"):
        return None
    if "results" in registered:
        return list(registered["results"])
    return None


def outcome(
    plan: Mapping[str, Any],
    containers: Mapping[str, Any],
    overlays: Mapping[str, Any],
    force: bool = False,
    fenced: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Per session: what was removed (``containers``, ``networks``), the hosts whose part
    did not finish (``missed``), the agents the inventory lacks (``unlisted``) and whether
    its reservation may go (``release``). ``containers``/``overlays``: host -> its
    registered result of the looped removal (agents / managers).

    ``force`` (an agent is down for long): the reservation goes all the same, and
    ``left_on`` names the agents whose part was left (the ledger remembers the session,
    so that reconcile removes those leftovers when the agents answer again). ``fenced``:
    the batch sessions reconcile found over while an agent did not answer (their part
    there stopped by itself: scheduling/steps/fencing.py), forced as well."""
    out = []
    for session in plan["sessions"]:
        name = session["name"]
        forced = force or name in fenced
        removed: list[str] = []
        networks: list[str] = []
        missed: list[str] = []
        reports: list[Mapping[str, Any]] = []
        for result in _collect(session["agents"], containers, name, missed):
            removed.extend(result.get("removed") or [])
            networks.extend(result.get("networks_removed") or [])
            if result.get("job"):
                reports.append(result["job"])
        for result in _collect(session["manager"], overlays, name, missed):
            networks.extend(result.get("removed") or [])
        left = [h for h in [*missed, *session["unlisted"]] if h not in session["manager"]]
        whole = not missed and not session["unlisted"]
        out.append(
            {
                "name": name,
                "session_id": session["session_id"],
                "containers": sorted(set(removed)),
                "networks": sorted(set(networks)),
                "missed": missed,
                "unlisted": list(session["unlisted"]),
                # A queued session is cancelled: it leaves the queue (the ledger's step).
                "release": bool(session["session_id"] or session.get("queued"))
                and (whole or forced),
                "cancelled": bool(session.get("queued")),
                "forced": bool(forced and not whole),
                "left_on": left if forced else [],
                # A batch session: what its command came to (module_utils/jobs/job.py).
                "job": job.combine(reports, missed) if reports else None,
            }
        )
    return out


def _collect(
    hosts: Sequence[str], registered: Mapping[str, Any], name: str, missed: list[str]
) -> list[Mapping[str, Any]]:
    """The item results of ``hosts`` for session ``name``, in order; each host whose part
    did not finish (:func:`_mine`) is added to ``missed``."""
    results: list[Mapping[str, Any]] = []
    for host in hosts:
        mine = _mine(registered.get(host), name)
        if mine is None:
            missed.append(host)
        results.extend(mine or [])
    return results


def _mine(registered: Any, name: str) -> list[Mapping[str, Any]] | None:
    """A host's item results for session ``name``; None when its part did not finish
    (the host did not run the task, had no item for the session, or the item failed)."""
    found = _results(registered)
    mine = [r for r in found or [] if _item_name(r) == name]
    if found is None or not mine or any(r.get("failed") or r.get("unreachable") for r in mine):
        return None
    return mine


def _item_name(result: Mapping[str, Any]) -> str:
    item = result.get("item")
    return str(item.get("name") if isinstance(item, Mapping) else item)


def text(done: Mapping[str, Any]) -> str:
    """One line for a person: what a destroy removed, or that there was nothing."""
    name = done["name"]
    left = ""
    where = ", ".join(done.get("left_on") or [])
    if where:
        left = (
            f"; its part on {where} (which did not answer or this inventory lacks) is left "
            f"and its reservation released: session reconcile removes it once they answer"
        )
    ended = ""
    if done.get("job"):
        ended = f"; batch session {done['job']['state']}: {done['job']['reason']} (output kept)"
    if done.get("cancelled"):
        return f"session {name}: cancelled (it was PENDING in the queue; nothing of it ran)"
    if done["containers"] or done["networks"]:
        return (
            f"session {name}: removed {len(done['containers'])} container(s) "
            f"({', '.join(done['containers'])}) and {len(done['networks'])} network(s){left}"
            f"{ended}"
        )
    if left:
        return f"session {name}: removed nothing{left}"
    return f"session {name}: nothing to remove (no such session)"


def failures(outcomes: Sequence[Mapping[str, Any]]) -> list[str]:
    """Why a destroy fails: per session, the hosts not reached and the agents the
    inventory lacks (each keeps the session's reservation). A forced destroy fails for
    none of them: it says what it left where (:func:`text`)."""
    lines = []
    for done in outcomes:
        if done.get("forced"):
            continue
        elsewhere = (
            f"removed elsewhere: {len(done['containers'])} container(s), "
            f"{len(done['networks'])} network(s)"
        )
        if done["missed"]:
            lines.append(
                f"session {done['name']}: not removed from {', '.join(done['missed'])} "
                f"(unreachable or failed, see above); {elsewhere}. Run the destroy again once "
                f"they answer; the session's reservation is kept until then."
            )
        if done["unlisted"]:
            lines.append(
                f"session {done['name']}: the session ledger says agent(s) "
                f"{', '.join(done['unlisted'])} hold it, and this inventory has no such agent; "
                f"{elsewhere}. Destroy it through the inventory that made it; the session's "
                f"reservation is kept until then."
            )
    return lines
