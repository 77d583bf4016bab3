"""Agents as an operator sees them (``bai-cluster agent list`` and ``show``).

One row per inventory agent from three sources, each for what it knows best: the agent's
own read (``bai_agent_info``: identity, offer, what its engine runs - the truth of what
is given out), the cluster's availability records (``bai_agent_availability``
scope=cluster: who paused it, when and why) and, in a swarm, its node (health as the
cluster sees it). An agent that does not answer is shown with what the session ledger's
reservations say it holds, and says so. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.gpu.alloc import format_device_label
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import availability
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_identity import (
    engine_of,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_state import (
    AgentState,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    Availability,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import (
    format_cpu,
    format_mem,
)

# Health words.
READY = "ready"  # the engine answers (and its swarm node is ready, in a swarm)
UNREACHABLE = "unreachable"  # the engine (or the host) does not answer


def rows(
    declared: Sequence[Mapping[str, Any]],
    reads: Mapping[str, Mapping[str, Any]],
    cluster: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """One row per declared agent ({name, group, resources}, the inventory's), in name
    order. ``reads``: agent name -> its bai_agent_info result (failed or unreachable ones
    too); ``cluster``: the bai_agent_availability scope=cluster read (``records``,
    ``nodes``, ``given_out``, ``agents`` - the ledger's last reads)."""
    records = {
        key: Availability.from_dict(row) for key, row in (cluster.get("records") or {}).items()
    }
    nodes = cluster.get("nodes") or {}
    given_out = cluster.get("given_out") or {}
    kept = cluster.get("agents") or {}
    out = []
    for item in sorted(declared, key=lambda a: str(a["name"])):
        name = str(item["name"])
        read = reads.get(name) or {}
        answered = "agent" in read and not read.get("failed") and not read.get("unreachable")
        agent = dict(read["agent"]) if answered else dict((kept.get(name) or {}).get("agent") or {})
        identity = str(agent.get("id") or "")
        node = _node(nodes, name, identity)
        record = availability.record_of(records, name, identity) or availability.of_read(
            AgentState.from_dict(agent)
        )
        if record is None and node and node.get("availability", "active") != "active":
            record = Availability.from_dict(
                {"availability": node["availability"], "by": "docker node update"}
            )
        devices = [int(d) for d in agent.get("gpu_devices") or []]
        used: dict[str, Any]
        if answered:
            used = {
                "cpu": float(agent.get("used_cpu") or 0),
                "mem": int(agent.get("used_mem") or 0),
                "gpu_devices": sorted(int(d) for d in agent.get("gpu_in_use") or []),
            }
            sessions = sorted({str(s.get("name")) for s in (read.get("sessions") or {}).values()})
        else:
            ledger = given_out.get(name) or {}
            used = {
                "cpu": float(ledger.get("cpu") or 0),
                "mem": int(ledger.get("mem") or 0),
                "gpu_devices": sorted(int(d) for d in ledger.get("gpu_devices") or []),
            }
            sessions = sorted(ledger.get("sessions") or [])
        health = _health(answered, read, node)
        row = {
            "name": name,
            "id": identity,
            "group": str(item.get("group") or agent.get("group") or "default"),
            "availability": record.availability if record else availability.ACTIVE,
            "availability_text": availability.describe(record),
            "by": record.by if record else "",
            "reason": record.reason if record else "",
            "since": record.at if record else None,
            "health": health,
            "node_state": (node or {}).get("state"),
            "offer": {
                "cpu": float(agent.get("cpu") or 0),
                "mem": int(agent.get("mem") or 0),
                "gpu_devices": devices,
            },
            "given_out": used,
            "gpu_free": [d for d in devices if d not in used["gpu_devices"]],
            "sessions": sessions,
            # Where use and sessions come from: the engine, or (it does not answer) the ledger.
            "source": "engine" if answered else "ledger",
            # Why table inet bai_isolation is not in place (None: it is, or unknown).
            "isolation_problem": (agent.get("isolation") or {}).get("problem")
            if answered
            else None,
        }
        row["in_service"] = row["availability"] == availability.ACTIVE and health == READY
        out.append(row)
    return out


def _node(nodes: Mapping[str, Any], name: str, identity: str) -> Mapping[str, Any] | None:
    if not nodes:
        return None
    node_id = engine_of(identity)
    if node_id and node_id in nodes:
        return nodes[node_id]
    return next((n for n in nodes.values() if n.get("hostname") == name), None)


def _health(answered: bool, read: Mapping[str, Any], node: Mapping[str, Any] | None) -> str:
    """ready; or what is wrong: the engine does not answer, the swarm node is down."""
    if not answered:
        why = str(read.get("msg") or "no answer").splitlines()[0][:120]
        return f"{UNREACHABLE} ({why})"
    state = str((node or {}).get("state") or "ready")
    if state not in ("ready", "unknown"):
        return f"swarm node {state}"
    return READY


def totals(found: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the agents offer in all, what is given out, and what is free: free counts
    only agents in service (active and ready), never a paused or down one's room."""
    offered = {"cpu": 0.0, "mem": 0, "gpu": 0}
    given = {"cpu": 0.0, "mem": 0, "gpu": 0}
    free = {"cpu": 0.0, "mem": 0, "gpu": 0}
    for row in found:
        offer, used = row["offer"], row["given_out"]
        offered["cpu"] += offer["cpu"]
        offered["mem"] += offer["mem"]
        offered["gpu"] += len(offer["gpu_devices"])
        given["cpu"] += used["cpu"]
        given["mem"] += used["mem"]
        given["gpu"] += len(used["gpu_devices"])
        if row["in_service"]:
            free["cpu"] += max(offer["cpu"] - used["cpu"], 0.0)
            free["mem"] += max(offer["mem"] - used["mem"], 0)
            free["gpu"] += len(row["gpu_free"])
    return {
        "agents": len(found),
        "in_service": sum(1 for row in found if row["in_service"]),
        "offered": offered,
        "given_out": given,
        "free": free,
    }


def _amounts(cpu: float, mem: int, gpu: Any) -> str:
    return f"cpu {format_cpu(cpu)}, mem {format_mem(mem)}, gpu {gpu}"


def table(found: Sequence[Mapping[str, Any]]) -> list[str]:
    """The lines of ``bai-cluster agent list``: one per agent, then the totals."""
    head = (
        "AGENT",
        "ID",
        "GROUP",
        "AVAILABILITY",
        "HEALTH",
        "OFFERS",
        "GIVEN OUT",
        "GPU FREE",
        "SESSIONS",
    )
    lines = [head]
    for row in found:
        offer, used = row["offer"], row["given_out"]
        lines.append(
            (
                row["name"],
                row["id"][:12] or "?",
                row["group"],
                availability.WORDS.get(row["availability"], row["availability"]),
                row["health"],
                _amounts(offer["cpu"], offer["mem"], len(offer["gpu_devices"])),
                _amounts(used["cpu"], used["mem"], len(used["gpu_devices"]))
                + (" (ledger)" if row["source"] == "ledger" else ""),
                format_device_label(row["gpu_free"]) or "-",
                ", ".join(row["sessions"]) or "-",
            )
        )
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    text = ["  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines]
    sums = totals(found)
    text.append(
        f"{sums['agents']} agent(s), {sums['in_service']} in service; offered "
        f"{_amounts(**sums['offered'])}; given out {_amounts(**sums['given_out'])}; free in "
        f"service {_amounts(**sums['free'])}"
    )
    for row in found:
        if row["availability"] != availability.ACTIVE:
            text.append(f"{row['name']}: {row['availability_text']}")
    return text


def details(row: Mapping[str, Any]) -> list[str]:
    """The lines of ``bai-cluster agent show NAME``."""
    offer, used = row["offer"], row["given_out"]
    return [
        f"agent:        {row['name']} ({row['id'] or 'identity unknown'})",
        f"group:        {row['group']}",
        f"availability: {row['availability_text']}",
        f"health:       {row['health']}"
        + (f" (swarm node {row['node_state']})" if row.get("node_state") else ""),
        f"offers:       cpu {format_cpu(offer['cpu'])}, mem {format_mem(offer['mem'])}, "
        f"GPU devices {format_device_label(offer['gpu_devices']) or 'none'}",
        f"given out:    cpu {format_cpu(used['cpu'])}, mem {format_mem(used['mem'])}, GPU "
        f"devices {format_device_label(used['gpu_devices']) or 'none'}"
        + (
            " (the ledger's reservations: the agent does not answer)"
            if row["source"] == "ledger"
            else ""
        ),
        f"GPU free:     {format_device_label(row['gpu_free']) or 'none'}",
        f"sessions:     {', '.join(row['sessions']) or 'none'}",
    ] + (
        [
            f"isolation:    MISSING: {row['isolation_problem']} (no session starts here; "
            f"load it with playbooks/session_isolation.yml)"
        ]
        if row.get("isolation_problem")
        else []
    )
