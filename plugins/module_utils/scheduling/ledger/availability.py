"""Agent availability (docs/operations.md): whether an agent takes new sessions.

- ``active``: in service.
- ``pause``: no new session is placed or admitted there. Sessions already there keep
  running, and a rerun of one of them still repairs it (its containers are there).
- ``drain``: paused, while the operator waits for its sessions to end (``bai-cluster
  agent drain``); it stays so once they have, until ``activate``.

The words are Swarm's node availability, and in a swarm the agent's node is set to the
same, so ``docker node ls`` shows it. Two records, written in this order by ``pause``
and ``drain`` (``activate`` clears them in the same order):

1. **The agent's own** (:data:`MARKER` in its state folder, per slot of its engine),
   written under the engine's admission lock and read by admission under that lock. So
   a create racing a pause never lands: either its containers were admitted before the
   pause (the drain then waits for them), or it is refused.
2. **The cluster's**: in the session ledger (``Ledger.availability``, by agent
   identity, with its inventory name, who, why and when), which lives in the swarm's
   raft store where there is a swarm, so every controller sees it; and the swarm node's
   availability for an agent that is its whole engine. Placement passes over an agent
   that either calls unavailable, and over one the swarm reports down.

Nothing but ``activate`` makes an agent active again: no role or playbook of site.yml
touches an operator's record. Three kinds are not the operator's (their ``purpose``):
site.yml holds an agent it is adding out of service (:data:`SETUP`) until its engine,
swarm membership and firewall are in place, and clears only that record; ``agent
remove`` leaves :data:`REMOVED` on an agent it took out of the cluster, so that an
inventory that still names it places nothing there, until site.yml adds it again
(:func:`setup_step`); maintenance.yml drains an agent as :data:`MAINTENANCE`, so that
a rerun after a failure knows the drain for its own and puts the agent back in
service. Pure, except :func:`read_marker` and :func:`write_marker` (one small file).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_state import (
    AgentState,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.document import (
    Availability,
    Ledger,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.roster import SwarmNode

ACTIVE = "active"
PAUSE = "pause"
DRAIN = "drain"
AVAILABILITIES = (ACTIVE, PAUSE, DRAIN)
# How list, show and messages say each one.
WORDS = {ACTIVE: "active", PAUSE: "paused", DRAIN: "drained"}

# Whose record it is (its ``purpose``; absent: the operator's).
OPERATOR = "operator"
SETUP = "setup"
REMOVED = "removed"
MAINTENANCE = "maintenance"
PURPOSES = (OPERATOR, SETUP, REMOVED, MAINTENANCE)

# The agent's own record: slot ('' for an agent that is its whole engine) -> record.
MARKER = "availability.json"
DEFAULT_STATE_DIR = "/var/lib/bai-cluster"


def make_record(
    availability: str,
    *,
    name: str,
    identity: str,
    by: str,
    reason: str,
    now: float,
    purpose: str = OPERATOR,
) -> Availability:
    """The record of one pause or drain (``active`` has none)."""
    if availability not in (PAUSE, DRAIN):
        raise ValueError(f"availability: got {availability!r}; allowed: {PAUSE}, {DRAIN}")
    if purpose not in PURPOSES:
        raise ValueError(f"purpose: got {purpose!r}; allowed: {', '.join(PURPOSES)}")
    record = Availability(
        availability=availability,
        name=name,
        id=identity,
        by=by or "unknown",
        reason=reason or "",
        at=float(now),
        purpose=purpose,
    )
    if purpose == OPERATOR:
        record.drop("purpose")  # absent: the operator's
    return record


def of_read(agent: AgentState) -> Availability | None:
    """The agent's own record in a read of it (bai_agent_info's ``agent.availability``)."""
    found = agent.availability
    return Availability.from_dict(found) if found else None


def purpose_of(record: Availability | None) -> str:
    """Whose record it is ('' for none)."""
    return str(record.purpose or OPERATOR) if record else ""


def setup_step(own: Availability | None, *, hold: bool, in_swarm: bool) -> str:
    """What site.yml does to an agent's own record: ``write`` its hold, ``clear`` it, or
    ``keep`` the record as it is.

    ``hold`` (before the agent's swarm membership and firewall are set up): an agent in
    no swarm with no record is new, and one that ``agent remove`` marked is coming back;
    both are held out of service. Any other record (an operator's pause) is kept, and so
    is an agent already in the swarm (a rerun on a cluster in service). Not ``hold`` (at
    the end of site.yml): only site.yml's own hold is cleared."""
    purpose = purpose_of(own)
    if hold:
        if purpose == REMOVED or (not purpose and not in_swarm):
            return "write"
        return "keep"
    return "clear" if purpose == SETUP else "keep"


def describe(record: Availability | None) -> str:
    """'paused by alice at 2026-11-26 09:00:00 UTC: driver upgrade' ('active' for None)."""
    if not record:
        return WORDS[ACTIVE]
    if record.purpose == SETUP:
        return (
            f"being added by site.yml since {clock(record.at)} (in service once its "
            f"engine, swarm membership and firewall are set up)"
        )
    reason = f": {record.reason}" if record.reason else ""
    if record.purpose == REMOVED:
        return f"removed from the cluster by {record.by or 'unknown'} at {clock(record.at)}{reason}"
    word = WORDS.get(str(record.availability), str(record.availability))
    if record.purpose == MAINTENANCE:
        word += " for maintenance"
    return f"{word} by {record.by or 'unknown'} at {clock(record.at)}{reason}"


def describe_json(found: Mapping[str, Any] | None) -> str:
    """:func:`describe` of a record as a module returns it (its JSON object)."""
    return describe(Availability.from_dict(found) if found else None)


def clock(epoch: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(epoch)))
    except (TypeError, ValueError):
        return "?"


# --- the cluster's record (in the session ledger) -------------------------------------
def records(ledger: Ledger) -> dict[str, Availability]:
    """identity -> record of every agent the ledger holds out of service."""
    return dict(ledger.availability or {})


def record_of(
    found: Mapping[str, Availability], name: str, identity: str = ""
) -> Availability | None:
    """An agent's record: by its identity, else by its inventory name (an agent paused
    before it was ever read has no identity in the ledger)."""
    if identity and identity in found:
        return found[identity]
    for key, row in found.items():
        if row.name == name and (not identity or not row.id or key == identity):
            return row
    return None


def set_availability(
    ledger: Ledger, record: Availability | None, *, name: str, identity: str
) -> bool:
    """Write an agent's record into the ledger (None: active, the record goes); whether
    that changed anything. The key is its identity (its name while it has none)."""
    if ledger.availability is None:
        ledger.availability = {}
    table = ledger.availability
    key = identity or name
    # A record written under the name alone, before the agent's identity was known.
    old_key = next((k for k, v in table.items() if v.name == name and k != key), None)
    if old_key and (not identity or not table[old_key].id):
        table.setdefault(key, table[old_key])
        del table[old_key]
    return set_entry(table, key, record)


def set_entry(table: dict[str, Availability], key: str, record: Availability | None) -> bool:
    """Put ``record`` at ``key`` of a table of records, the ledger's or the agent's own
    (None: remove it); whether that changed anything. Pausing a paused agent again (or
    draining a drained one) keeps the first record's who and when, and its reason unless
    a new one is given."""
    old = table.get(key)
    if record is None:
        return table.pop(key, None) is not None
    new = record.to_dict()
    was = old.to_dict() if old is not None else None
    if was and was.get("availability") == new["availability"]:
        # The identity too: an agent's own record outlives its leaving the swarm (a
        # removed agent's identity becomes its engine's).
        new.update(
            by=was.get("by", new["by"]), at=was.get("at", new["at"]), id=was.get("id") or new["id"]
        )
        if not record.reason and was.get("purpose") == new.get("purpose"):
            new["reason"] = was.get("reason", "")
    if was == new:
        return False
    table[key] = Availability.from_dict(new)
    return True


def unavailable(
    name: str,
    identity: str,
    found: Mapping[str, Availability],
    node: SwarmNode | None,
) -> str:
    """Why placement passes over an agent ('' when it may place there): paused or drained
    (the ledger's record, or the swarm node's availability), or down in the swarm."""
    record = record_of(found, name, identity)
    if record is not None:
        return describe(record)
    if node is not None and node.availability != ACTIVE:
        word = WORDS.get(node.availability, node.availability)
        return f"{word} in the swarm (docker node update; not by this toolkit)"
    if node is not None and not node.usable:
        return f"{node.state or 'down'} in the swarm"
    return ""


# --- the agent's own record (admission) -----------------------------------------------
def admits(record: Availability | None, *, session_there: bool) -> str:
    """'' when an agent with its own ``record`` admits a session, else why not. A paused
    or drained agent admits only a session that already has containers there (a rerun
    repairs it); nothing new."""
    if not record or record.availability == ACTIVE or session_there:
        return ""
    if purpose_of(record) in (SETUP, REMOVED):
        return (
            f"it is {describe(record)}; it takes no new sessions until site.yml has "
            f"(re)added it to the cluster"
        )
    return (
        f"it is {describe(record)}; it takes no new sessions until bai-cluster agent "
        f"activate (sessions already there are still repaired)"
    )


def marker_path(state_dir: str) -> str:
    return os.path.join(state_dir or DEFAULT_STATE_DIR, MARKER)


def read_marker(state_dir: str) -> dict[str, Availability]:
    """The agent's own records (slot -> record); {} when there is none. A damaged file
    raises ValueError: an agent that cannot tell whether it is paused admits nothing."""
    path = marker_path(state_dir)
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ValueError(
            f"{path} is damaged (not a JSON mapping of records); remove it and pause or "
            f"activate the agent again"
        )
    return {slot: Availability.from_dict(row) for slot, row in data.items()}


def write_marker(state_dir: str, found: Mapping[str, Availability]) -> None:
    """Replace the agent's own records atomically (0600; the folder 0700)."""
    path = marker_path(state_dir)
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".availability-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(
                {slot: row.to_dict() for slot, row in found.items()},
                handle,
                indent=1,
                sort_keys=True,
            )
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def sessions_held(holdings: Iterable[Any]) -> list[dict[str, Any]]:
    """[{name, session_id, containers, states}] of ``admission.Holding`` rows, by name."""
    out: dict[str, dict[str, Any]] = {}
    for h in holdings:
        row = out.setdefault(
            h.session_id or h.session,
            {"name": h.session, "session_id": h.session_id, "containers": [], "states": []},
        )
        row["containers"].append(h.container)
        if h.state and h.state not in row["states"]:
            row["states"].append(h.state)
    return sorted(out.values(), key=lambda r: (r["name"], r["session_id"]))


# --- the swarm node -------------------------------------------------------------------
def node_spec(node: Mapping[str, Any], availability: str) -> dict[str, Any] | None:
    """The node's new spec for ``availability`` (``docker node inspect``'s Spec with it
    changed), or None when it is so already."""
    spec = dict(node.get("Spec") or {})
    if spec.get("Availability", ACTIVE) == availability:
        return None
    spec["Availability"] = availability
    return spec
