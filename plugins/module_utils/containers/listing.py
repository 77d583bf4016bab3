"""Listing sessions: containers' labels folded into one summary row per session."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_BATCH,
    LABEL_HOST,
    LABEL_KERNEL_ID,
    LABEL_MODE,
    LABEL_OWNER,
    LABEL_RESOURCE_GROUP,
    LABEL_SESSION,
    LABEL_SESSION_ID,
    LABEL_SIZE,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.capacity import (
    label_float,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    Reservation,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.reservations import (
    time_left,
)


def summarize_sessions(
    containers: Iterable[Mapping[str, Any]],
    reservations: Mapping[str, Mapping[str, Any]] | None = None,
    unreached: Iterable[str] = (),
    now: float | None = None,
) -> list[dict[str, Any]]:
    """Group session containers (dicts with agent, name, state and labels, from every
    agent) into one row per session: name, session_id, size, mode, owner ("" before
    owners existed), agents, state, the running/found counts and the hosts. The state is
    the session's health: "running" (every container runs), "degraded" (every container
    is there, some do not run: a rerun of the create starts them), "stopped" (none runs)
    or "incomplete" (containers are missing: destroy and create again).

    ``unreached``: agents that were not read (they did not answer). A session whose
    reservation (``reservations``, the session ledger's, by name) places containers on
    one of them is "unreachable", and ``unreachable`` names those agents: what runs there
    cannot be seen. A session only there is listed from its reservation."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for container in containers:
        labels = container.get("labels") or {}
        if LABEL_SESSION not in labels:
            continue
        key = (str(labels[LABEL_SESSION]), str(labels.get(LABEL_SESSION_ID, "")))
        groups.setdefault(key, []).append(container)
    rows = []
    for (name, sid), members in sorted(groups.items()):
        sizes = [int(label_float(str(c["labels"].get(LABEL_SIZE)))) for c in members]
        size = max(sizes) if any(sizes) else len(members)
        running = sum(1 for c in members if c.get("state") == "running")
        if len(members) < size:
            state = "incomplete"
        elif running == size:
            state = "running"
        elif running == 0:
            state = "stopped"
        else:
            state = "degraded"
        master = next(
            (c for c in members if c["labels"].get(LABEL_KERNEL_ID) == sid),
            members[0],
        )
        batch = _batch(members, master, size)
        if batch:
            state = batch.pop("state")
        rows.append(
            {
                "name": name,
                "session_id": sid,
                "size": size,
                "found": len(members),
                "running": running,
                "mode": str(master["labels"].get(LABEL_MODE, "?")),
                "resource_group": str(master["labels"].get(LABEL_RESOURCE_GROUP, "?")),
                "owner": str(master["labels"].get(LABEL_OWNER, "")),
                "agents": sorted({str(c.get("agent")) for c in members}),
                "hosts": sorted(str(c["labels"].get(LABEL_HOST)) for c in members),
                "state": state,
                **batch,
            }
        )
    away = set(unreached)
    if away and reservations:
        _mark_unreached(rows, reservations, away)
    if reservations:
        _lifetimes(rows, reservations, now)
    return sorted(rows, key=lambda r: (r["name"], r["session_id"]))


def _batch(
    members: Sequence[Mapping[str, Any]], master: Mapping[str, Any], size: int
) -> dict[str, Any]:
    """A batch session's row fields (``type``, ``exit_code``) and its state as the list
    tells it from the engines' rows: running (main1 runs its command), ending (main1 has
    stopped, members are still stopping), ended (nothing runs: session reconcile removes
    it) - ``session show`` tells how it ended. {} for an interactive session."""
    if not master["labels"].get(LABEL_BATCH):
        return {}
    code = None
    status = str(master.get("status") or "")
    if status.startswith("Exited (") and ")" in status:
        try:
            code = int(status[len("Exited (") : status.index(")")])
        except ValueError:
            code = None
    if master.get("state") in ("running", "created", "restarting", "paused"):
        state = "running"
    elif len(members) == size and all(c.get("state") in ("exited", "dead") for c in members):
        state = "ended"
    else:
        state = "ending"
    return {"type": "batch", "exit_code": code, "state": state}


def _lifetimes(
    rows: list[dict[str, Any]], reservations: Mapping[str, Mapping[str, Any]], now: float | None
) -> None:
    """A session with a lifetime: ``lifetime_s`` and, at the ledger's time ``now``,
    ``time_left`` (seconds; None before it runs or without ``now``)."""
    for row in rows:
        entry = Reservation.from_dict(reservations.get(row["name"]) or {})
        if entry.session_id != row["session_id"] or not entry.lifetime_s:
            continue
        row["lifetime_s"] = int(entry.lifetime_s)
        row["time_left"] = None if now is None else time_left(entry, now)


def _mark_unreached(
    rows: list[dict[str, Any]], reservations: Mapping[str, Mapping[str, Any]], away: set[str]
) -> None:
    by_id = {row["session_id"]: row for row in rows}
    for name, entry in sorted(reservations.items()):
        kernels = entry.get("kernels") or []
        there = sorted({str(k.get("agent")) for k in kernels} & away)
        if not there:
            continue
        row = by_id.get(str(entry.get("session_id")))
        if row is None:
            row = {
                "name": name,
                "session_id": str(entry.get("session_id")),
                "size": len(kernels),
                "found": 0,
                "running": 0,
                "mode": "?",
                "resource_group": "?",
                "owner": str(entry.get("owner") or ""),
                "agents": [],
                "hosts": [],
            }
            rows.append(row)
        row["agents"] = sorted(set(row["agents"]) | {str(k.get("agent")) for k in kernels})
        row["hosts"] = sorted(set(row["hosts"]) | {str(k.get("host")) for k in kernels})
        row["state"] = "unreachable"
        row["unreachable"] = there


def queued_rows(queue: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows for the sessions PENDING in the session ledger's queue (bai_session_ledger's
    ``queue``, in queue order): nothing of them runs yet; ``position`` is the place in
    their resource group's queue and ``reason`` why they wait."""
    return [
        {
            "name": str(q["name"]),
            "session_id": "",
            "size": int(q.get("size") or 0),
            "found": 0,
            "running": 0,
            "mode": str(q.get("mode") or "?"),
            "resource_group": str(q.get("resource_group") or "default"),
            "owner": str(q.get("owner") or ""),
            "agents": [],
            "hosts": [],
            "state": "PENDING",
            "type": str(q.get("type") or "interactive"),
            "position": int(q.get("position") or 0),
            "reason": str(q.get("reason") or ""),
            "submitted_at": q.get("submitted_at"),
        }
        for q in queue
    ]


def format_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Fixed-width lines for people: NAME SESSION-ID SIZE MODE OWNER AGENTS STATE."""
    header = ("NAME", "SESSION-ID", "SIZE", "MODE", "OWNER", "AGENTS", "STATE")
    body = [
        (
            str(r["name"]),
            str(r["session_id"] or "-"),
            str(r["size"]),
            str(r["mode"]),
            str(r.get("owner") or "-"),
            ",".join(r["agents"]),
            _state_text(r),
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
        for line in [header, *body]
    ]


def _state_text(row: Mapping[str, Any]) -> str:
    if row["state"] == "PENDING":
        return (
            f"PENDING (#{row.get('position')} in {row.get('resource_group')}: {row.get('reason')})"
        )
    if row.get("type") == "batch" and row["state"] in ("running", "ending", "ended"):
        code = row.get("exit_code")
        return f"batch {row['state']}" + (f" (exit {code})" if code is not None else "")
    if row["state"] == "running":
        left = row.get("time_left")
        return "running" if left is None else f"running ({format_duration(left)} left)"
    if row["state"] == "unreachable":
        return (
            f"unreachable ({', '.join(row['unreachable'])} does not answer; "
            f"{row['running']}/{row['size']} seen up)"
        )
    return f"{row['state']} ({row['running']}/{row['size']} up)"


def format_duration(seconds: float) -> str:
    """``45s``, ``12m``, ``3h05m``, ``2d04h``: a time left, as list shows it."""
    whole = int(seconds)
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 120:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 48:
        return f"{hours}h{minutes % 60:02d}m"
    return f"{hours // 24}d{hours % 24:02d}h"
