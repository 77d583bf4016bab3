"""The cluster's agents as the ledger knows them: the swarm's node table, what the
inventory declares for each, their identity, what the reservations give out on each, and
an agent taken out of the cluster (bai-cluster agent remove)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_identity import (
    engine_of,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.document import Ledger


class Forgotten(NamedTuple):
    """What :func:`forget_agent` dropped, or why it dropped nothing."""

    holding: list[str]  # sessions with a reservation on the agent: nothing was dropped
    dropped: list[str]  # what went, for a person: "its kept read", "its pause", ...


def forget_agent(ledger: Ledger, name: str, identity: str = "") -> Forgotten:
    """Drop agent ``name`` (identity ``identity``) from the ledger: its kept read and its
    availability record. What a forced destroy left on it stays remembered (``forsaken``),
    so that reconcile removes those leftovers if it is ever added back. Refused
    while a session holds a reservation there (``holding``; the ledger is unchanged):
    its sessions are ended first, never stranded after."""
    holding = sorted(n for n, e in ledger.sessions.items() if name in e.agents)
    if holding:
        return Forgotten(holding, [])
    dropped = []
    if (ledger.agents or {}).pop(name, None) is not None:
        dropped.append("its kept read")
    table = ledger.availability or {}
    mine = [k for k, v in table.items() if (identity and k == identity) or v.name == name]
    for key in mine:
        del table[key]
        if "its availability record" not in dropped:
            dropped.append("its availability record")
    return Forgotten([], dropped)


def known_identity(ledger: Ledger, name: str) -> str:
    """The identity of the ledger's last read of agent ``name`` ('' if never read)."""
    record = (ledger.agents or {}).get(name)
    return record.identity if record else ""


NODE_GONE = ("down", "disconnected")  # swarm node states that a placement passes over


@dataclass(frozen=True)
class SwarmNode:
    """A swarm node as placement sees it (:func:`node_table`)."""

    id: str
    hostname: str
    state: str  # ready, down, disconnected, unknown
    availability: str  # active, pause, drain
    usable: bool  # active, and not down or disconnected
    cpu: float  # what the engine has
    mem: int

    def to_dict(self) -> dict[str, Any]:
        """The row as the modules return it."""
        return asdict(self)


def node_table(nodes: Sequence[Mapping[str, Any]]) -> dict[str, SwarmNode]:
    """The swarm's node list (``GET /nodes``, one call on a manager) by node ID and by
    hostname, each a :class:`SwarmNode`. Usable: active, and not ``down`` or
    ``disconnected``. A new swarm leader marks every node ``unknown`` until it registers
    again (seconds after a manager is lost); such a node is used, and a placement on it
    reads it first anyway."""
    table: dict[str, SwarmNode] = {}
    for node in nodes:
        description = node.get("Description") or {}
        resources = description.get("Resources") or {}
        state = str((node.get("Status") or {}).get("State") or "unknown")
        availability = str((node.get("Spec") or {}).get("Availability") or "active")
        node_id = str(node.get("ID") or "")
        hostname = str(description.get("Hostname") or "")
        row = SwarmNode(
            id=node_id,
            hostname=hostname,
            state=state,
            availability=availability,
            usable=availability == "active" and state not in NODE_GONE,
            cpu=int(resources.get("NanoCPUs") or 0) / 1e9,
            mem=int(resources.get("MemoryBytes") or 0),
        )
        for key in (node_id, hostname):
            if key:
                table.setdefault(key, row)
    return table


def node_of(
    nodes: Mapping[str, SwarmNode] | None, agent: str, identity: str = ""
) -> SwarmNode | None:
    """An agent's row of :func:`node_table`: by the node ID of ``identity``, which its last
    read gave (an agent's identity is its swarm node's), else by its inventory name as the
    node's hostname."""
    if not nodes:
        return None
    node_id = engine_of(identity)
    return nodes.get(node_id) or nodes.get(agent)


@dataclass(frozen=True, slots=True)
class Declared:
    """What the inventory declares for an agent: its name, its resource group, its
    ``bai_agent_resources`` (None: what its engine reports) and its domain at each
    topology level (``bai_topology``: (level, domain) pairs, widest first; () for none)."""

    name: str
    group: str = "default"
    resources: Mapping[str, Any] | None = None
    topology: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> Declared:
        """One of bai_session_ledger's ``agents`` ({name, group, resources, topology});
        KeyError, TypeError or AttributeError when it is not one."""
        topology = tuple((str(k), str(v)) for k, v in (raw.get("topology") or {}).items())
        return cls(
            str(raw["name"]), str(raw.get("group") or "default"), raw.get("resources"), topology
        )

    def record(self) -> dict[str, Any]:
        """The declaration as an agent's kept record keeps it (KeptRead.declared): a
        record taken under another declaration is read again, so a pass never places by a
        read taken under another topology. The topology only when there is one: records
        of agents without it are as they were before topologies."""
        out: dict[str, Any] = {"group": self.group, "resources": self.resources}
        if self.topology:
            out["topology"] = dict(self.topology)
        return out

    @property
    def labels(self) -> dict[str, str]:
        """The agent's topology as placement's labels (Agent.label): level -> domain."""
        return dict(self.topology)


def given_out(ledger: Ledger) -> dict[str, dict[str, Any]]:
    """Per agent, what the reservations give out (CPU, memory, GPU devices)."""
    out: dict[str, dict[str, Any]] = {}
    for entry in ledger.sessions.values():
        for k in entry.kernels:
            row = out.setdefault(k.agent, {"cpu": 0.0, "mem": 0, "gpu_devices": []})
            row["cpu"] += k.cpu
            row["mem"] += k.mem
            row["gpu_devices"] = sorted([*row["gpu_devices"], *k.gpu_devices])
    return out
