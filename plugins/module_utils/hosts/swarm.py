"""Pure logic for the Docker Swarm and image distribution roles.

Why a separate file: the decisions that matter (which address a node advertises, whether
a node already belongs to *this* cluster's swarm, which nodes are stale) are plain
functions of ``docker info`` / ``docker node ls`` data, so the unit tests check them
without Docker or Ansible. The roles reach them through small filter plugins
(plugins/filter/bai_swarm.py) that loads
this file. Standard library only, valid Python 3.9+.

    advertise_address(addresses, cidr, default)  the node's IPv4 address on the compute network
    manager_membership(swarm, ...)           the first manager: init / ok / rejoin / conflict
    member_membership(swarm, ...)            any other node: join / ok / rejoin / conflict
    stale_nodes(nodes, current)              node entries left behind by a node that rejoined
    ready_nodes(nodes)                       the node IDs the manager sees Ready
    label_changes(nodes, wanted)             nodes whose labels must be set
    pool_differences(swarm, pools, size)     the swarm's address pool against the configured one
    registry_is_insecure(config, registry)   whether an engine treats a registry as insecure
    taken_ports(ss_lines, needed)            which needed ports another program listens on
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from ansible_collections.bai.cluster.plugins.module_utils.common.addresses import (
    covers,
    in_zone,
    parse_ip,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_identity import (
    SLOT_SEPARATOR,
)

# docker info .Swarm.LocalNodeState values.
STATE_INACTIVE = "inactive"
STATE_ACTIVE = "active"
STATE_LOCKED = "locked"

ACTION_INIT = "init"
ACTION_JOIN = "join"
ACTION_OK = "ok"
ACTION_REJOIN = "rejoin"
ACTION_CONFLICT = "conflict"

FORCE_HINT = "docker_swarm_force_rejoin: true"


def advertise_address(
    addresses: Iterable[Any], cidr: Optional[str] = None, default: Any = None
) -> str:
    """The address a node advertises to the swarm (and serves the registry on).

    With ``cidr`` (the compute zone), the node's first IPv4 address inside it, in the
    order given (Ansible's ``all_ipv4_addresses``); a node with no address there is a
    mistake in the inventory or the network, so ValueError says so. Without ``cidr``,
    ``default`` (Ansible's default IPv4 address), which must be an IPv4 address.
    """
    if cidr:
        try:
            found = in_zone(addresses, cidr, version=4)
        except ValueError:
            raise ValueError(f"compute zone {cidr!r} is not a valid CIDR") from None
        if not found:
            shown = ", ".join(str(a) for a in addresses or []) or "none"
            zone = ipaddress.ip_network(str(cidr), strict=False)
            raise ValueError(f"no IPv4 address in the compute zone {zone} (the host has: {shown})")
        return found[0]
    address = parse_ip(default) if default else None
    if address is None or address.version != 4:
        raise ValueError(
            "no compute zone (bai_zone_cidrs.compute) is set and the host has no "
            "default IPv4 address"
        )
    return str(address)


def _state(swarm: Optional[Mapping[str, Any]]) -> str:
    return str((swarm or {}).get("LocalNodeState") or STATE_INACTIVE)


def _managers(swarm: Mapping[str, Any]) -> str:
    addrs = [str(m.get("Addr")) for m in swarm.get("RemoteManagers") or [] if m.get("Addr")]
    return ", ".join(addrs) or "unknown"


def _decision(action: str, reason: str) -> dict[str, str]:
    return {"action": action, "reason": reason}


def _stuck(swarm: Mapping[str, Any], state: str) -> str:
    """What a node is in a swarm state other than inactive or active (the words after its
    name): in a locked swarm, or stuck (pending, error) with the engine's error or the
    managers it knows."""
    if state == STATE_LOCKED:
        return "belongs to a locked swarm (unlock it with docker swarm unlock, or leave it)"
    detail = swarm.get("Error") or f"managers: {_managers(swarm)}"
    return f"is in swarm state {state!r} ({detail})"


def _leave_or_force(host: str, what: str, force: bool) -> dict[str, str]:
    """A node in the wrong swarm state: leave and rejoin when forced, else refuse."""
    if force:
        return _decision(ACTION_REJOIN, f"{host} {what}; it leaves and joins again ({FORCE_HINT})")
    return _decision(
        ACTION_CONFLICT,
        f"{host} {what}. The toolkit will not pull a node out of a swarm on its own: make it "
        f"leave (docker swarm leave --force on {host}) or set {FORCE_HINT} for this host "
        f"(inventory host_vars or -e), then run site.yml again",
    )


def manager_membership(
    swarm: Optional[Mapping[str, Any]], host: str = "the manager", force: bool = False
) -> dict[str, str]:
    """What the first host of the manager group must do, from its ``docker info .Swarm``.

    Not in a swarm: init. A manager already: ok (it *is* the cluster's swarm). A worker
    of some swarm, or stuck joining/locked/in error: conflict, or rejoin when forced.
    """
    swarm = swarm or {}
    state = _state(swarm)
    if state == STATE_INACTIVE:
        return _decision(ACTION_INIT, f"{host} is in no swarm")
    if state == STATE_ACTIVE and swarm.get("ControlAvailable"):
        cluster = (swarm.get("Cluster") or {}).get("ID", "unknown")
        return _decision(ACTION_OK, f"{host} manages swarm {cluster}")
    if state == STATE_ACTIVE:
        what = f"is a worker of another swarm (its managers: {_managers(swarm)})"
    else:
        what = _stuck(swarm, state)
    return _leave_or_force(host, what, force)


def member_membership(
    swarm: Optional[Mapping[str, Any]],
    cluster_node_ids: Iterable[str],
    host: str = "the node",
    manager: str = "the manager",
    force: bool = False,
    cluster_manager_ids: Iterable[str] = (),
) -> dict[str, str]:
    """What a node that should join the cluster's swarm must do.

    ``swarm`` is the node's own ``docker info .Swarm``; ``cluster_node_ids`` the node IDs
    the cluster's manager lists (``docker node ls``). A node is a member only if it is
    active *and* the manager knows its node ID: a node active in some other swarm looks
    just the same from the inside, which is why "joined" alone is never enough.
    """
    swarm = swarm or {}
    state = _state(swarm)
    if state == STATE_INACTIVE:
        return _decision(ACTION_JOIN, f"{host} is in no swarm")
    node_id = str(swarm.get("NodeID") or "")
    known = set(cluster_node_ids or [])
    if state == STATE_ACTIVE and node_id and node_id in known:
        return _decision(ACTION_OK, f"{host} is node {node_id} of the swarm {manager} manages")
    ours = {str(m.get("NodeID")) for m in swarm.get("RemoteManagers") or []} & set(
        cluster_manager_ids or []
    )
    if ours and state in (STATE_ACTIVE, "pending", "error"):
        # Its managers are the cluster's own, and they no longer know it: its node was
        # removed (agent remove --dead while it was off). Nothing is lost by leaving.
        return _decision(
            ACTION_REJOIN,
            f"{host} was removed from the swarm {manager} manages (its node ID "
            f"{node_id or '?'} is gone); it leaves and joins again",
        )
    if state == STATE_ACTIVE:
        what = (
            f"is in a different swarm: its node ID {node_id or '?'} is unknown to {manager}, "
            f"which manages the cluster's swarm (its managers: {_managers(swarm)})"
        )
    else:
        what = _stuck(swarm, state)
    return _leave_or_force(host, what, force)


def _node_view(node: Mapping[str, Any]) -> tuple[str, str, str]:
    """(ID, hostname, state) of a node as ``docker node ls --format json`` (ID, Hostname,
    Status "Ready") or ``docker node inspect`` (Description.Hostname, Status.State) has it."""
    status = node.get("Status")
    state = status.get("State", "") if isinstance(status, Mapping) else status
    hostname = node.get("Hostname") or (node.get("Description") or {}).get("Hostname")
    return str(node.get("ID", "")), str(hostname or ""), str(state or "").lower()


def stale_nodes(nodes: Iterable[Mapping[str, Any]], current: Mapping[str, str]) -> list[str]:
    """IDs of node entries a rejoin left behind.

    ``nodes`` as ``docker node ls`` or ``docker node inspect`` lists them; ``current``
    maps each inventory member's engine hostname to its node ID now. An entry is stale
    when its hostname belongs to a member, its ID is not that member's current one, and
    it is down: removing it never touches a node that works or one the toolkit does not
    know.
    """
    stale = []
    for node in nodes or []:
        node_id, hostname, state = _node_view(node)
        if hostname in current and node_id != current[hostname] and state == "down":
            stale.append(node_id)
    return stale


def ready_nodes(nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """IDs of the nodes whose state is ready (either listing format)."""
    return [
        node_id for node_id, _hostname, state in map(_node_view, nodes or []) if state == "ready"
    ]


def label_changes(
    nodes: Iterable[Mapping[str, Any]], wanted: Mapping[str, Mapping[str, str]]
) -> list[dict[str, Any]]:
    """The nodes whose labels lack a wanted key or value: [{id, labels}], labels = all
    wanted ones for that node. ``nodes`` from ``docker node inspect`` (Spec.Labels);
    ``wanted`` maps node ID -> labels. Other labels on a node are left alone (merge)."""
    have = {str(n.get("ID")): (n.get("Spec") or {}).get("Labels") or {} for n in nodes or []}
    changes = []
    for node_id, labels in (wanted or {}).items():
        if not labels or node_id not in have:
            continue
        current = have[node_id]
        if any(current.get(k) != str(v) for k, v in labels.items()):
            changes.append({"id": node_id, "labels": {k: str(v) for k, v in labels.items()}})
    return changes


# A topology label of a swarm node: this prefix and the level (docs/placement.md).
TOPOLOGY_LABEL = "ai.backend.topology."


def topology_labels(topology: Mapping[str, Any] | None) -> dict[str, str]:
    """A node's labels of its ``bai_topology`` ({level: domain}):
    {"ai.backend.topology.LEVEL": domain}."""
    return {f"{TOPOLOGY_LABEL}{level}": str(domain) for level, domain in (topology or {}).items()}


def pool_differences(
    swarm: Optional[Mapping[str, Any]], pools: Sequence[str], subnet_size: int
) -> list[str]:
    """How an existing swarm's address pool differs from the configured one.

    ``swarm`` is ``docker swarm inspect`` (DefaultAddrPool, SubnetSize). The pool is
    fixed when the swarm is created, so a difference cannot be converged: the role
    reports it. A swarm made before pools were configurable lacks the keys: no report.
    """
    swarm = swarm or {}
    problems = []
    found = swarm.get("DefaultAddrPool")
    if found is not None and sorted(map(str, found)) != sorted(map(str, pools)):
        problems.append(f"address pool {', '.join(found)} (configured: {', '.join(pools)})")
    size = swarm.get("SubnetSize")
    if size is not None and int(size) != int(subnet_size):
        problems.append(f"subnet size /{size} (configured: /{subnet_size})")
    return problems


def registry_is_insecure(registry_config: Optional[Mapping[str, Any]], registry: str) -> bool:
    """Whether an engine treats ``registry`` ("host:port") as insecure: it would skip
    the registry's certificate, or fall back to plain HTTP (image_distribution refuses
    such an engine: its registry serves TLS from the cluster's CA).

    ``registry_config`` is ``docker info .RegistryConfig``: a registry is insecure when
    IndexConfigs lists it with Secure false, or its host is an IP inside one of the
    InsecureRegistryCIDRs (127.0.0.0/8 always is).
    """
    config = registry_config or {}
    index = (config.get("IndexConfigs") or {}).get(registry)
    if index is not None and not index.get("Secure", True):
        return True
    host = registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry
    address = parse_ip(host)
    return (
        address is not None
        and address.version == 4
        and covers(config.get("InsecureRegistryCIDRs") or [], address)
    )


def taken_ports(ss_lines: Iterable[str], needed: Iterable[str]) -> list[str]:
    """The listeners (``ss -H -l -n -t -u -p`` lines) on a needed "port/proto".

    Columns: Netid State Recv-Q Send-Q Local:Port Peer [Process]; IPv6 locals look like
    ``[::]:7946`` or ``*:7946``, so the port is what follows the last colon.
    """
    wanted = {str(n).lower() for n in needed or []}
    taken = []
    for line in ss_lines or []:
        fields = str(line).split()
        if len(fields) < 5:
            continue
        port = fields[4].rsplit(":", 1)[-1]
        if f"{port}/{fields[0].lower()}" in wanted:
            taken.append(" ".join(fields))
    return taken


def node_of_agent(
    nodes: Iterable[Mapping[str, Any]], name: str, identity: str = ""
) -> tuple[Optional[Mapping[str, Any]], str]:
    """(the swarm node of agent ``name``, why not one) - for taking it out of the swarm.

    By its identity (the node ID the agent's reads gave), else by its inventory name as
    the node's hostname when exactly one node has it. None without a problem: the swarm
    has no such node (removed already). An identity with a slot (a virtual agent) has no
    node of its own; a manager is never taken out this way (it is demoted first)."""
    if SLOT_SEPARATOR in identity:
        return None, ""
    listed = list(nodes or [])
    found = [n for n in listed if identity and n.get("ID") == identity]
    if not found and not identity:
        found = [n for n in listed if _node_view(n)[1] == name]
    if len(found) > 1:
        ids = ", ".join(str(n.get("ID")) for n in found)
        return None, f"several swarm nodes are named {name} ({ids}); remove the right one by ID"
    if not found:
        return None, ""
    node = found[0]
    if (node.get("Spec") or {}).get("Role") == "manager":
        return None, (
            f"{name} is a swarm manager (node {node.get('ID')}): demote it first "
            f"(docs/operations.md, managers)"
        )
    return node, ""


MANAGER_ANSWERS = ("Leader", "Reachable")


def manager_removal(nodes: Iterable[Mapping[str, Any]], name: str) -> dict[str, Any]:
    """Whether the swarm keeps its quorum without manager ``name``: ``nodes`` as ``docker
    node ls --format json`` lists them (ID, Hostname, ManagerStatus). Returns ``id`` (the
    manager's node ID; '' when the swarm has no node of that name: removed already),
    ``managers`` and ``answering`` (counts now), ``manager`` (whether it is one still: a
    rerun after the demotion finds a worker, which may go), and ``problem`` (why not; ''
    when it may go). Raft needs a majority of the managers that remain to answer: a
    removal that would leave fewer - or no manager at all - is refused, naming the
    counts."""
    listed = list(nodes or [])
    managers = [n for n in listed if n.get("ManagerStatus")]
    answering = [n for n in managers if n.get("ManagerStatus") in MANAGER_ANSWERS]
    found = [n for n in listed if _node_view(n)[1] == name]
    out: dict[str, Any] = {
        "id": "",
        "managers": len(managers),
        "answering": len(answering),
        "manager": False,
        "problem": "",
    }
    if not found:
        return out
    if len(found) > 1:
        ids = ", ".join(str(n.get("ID")) for n in found)
        out["problem"] = f"several swarm nodes are named {name} ({ids}); remove the right one by ID"
        return out
    node = found[0]
    out["id"] = str(node.get("ID") or "")
    if not node.get("ManagerStatus"):
        return out  # demoted already (a removal that stopped part-way): nothing to judge
    out["manager"] = True
    left = len(managers) - 1
    still = len([n for n in answering if n is not node])
    need = left // 2 + 1
    if left == 0:
        out["problem"] = (
            f"{name} is the swarm's last manager: without it the swarm, and the session "
            f"ledger kept in it, would be gone"
        )
    elif still < need:
        out["problem"] = (
            f"{len(answering)} of the swarm's {len(managers)} managers answer; without "
            f"{name}, {still} of {left} would, and the swarm needs {need} of {left} (a "
            f"majority) to keep its quorum. Bring the managers that do not answer back first"
        )
    return out
