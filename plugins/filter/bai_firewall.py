"""The host firewall's pure logic: from openings and inventory addresses to nft rules.

roles/host_firewall renders the rules this file builds into one nftables file (its own
table, ``inet bai_firewall``). Nothing here talks to a host: the role hands over plain
data (the openings other roles export, the hosts' addresses, the groups) and gets back
the rule lines plus a list of problems written for a person (empty = fine), so the role
can ``assert`` before anything changes. Ports and ranges are read by
module_utils/common/ports.py, as everywhere in the collection.

An *opening* (the shape docker_swarm and image_distribution export) is a mapping:

    port        int, "low-high", or a list of those; null for port-less protocols (esp)
    proto       tcp | udp | sctp | esp | gre | icmp ...
    purpose     free text, becomes the rule's comment
    on_groups   inventory groups whose hosts open it
    from_groups inventory groups whose hosts may connect (their zone addresses)
    from_zones  zone names of bai_zone_cidrs whose whole range may connect
    from_cidrs  CIDRs that may connect ("0.0.0.0/0" and "::/0" = anywhere)

    bai_firewall_collect(hostvars, hosts, names)  every opening exported on any host
    bai_firewall_addresses(hostvars, hosts, zones) {host: [its zone addresses]}, problems
    bai_firewall_plan(openings, ...)              the rule lines for one host, problems
    bai_firewall_covers(cidrs, address)           whether an address lies in one of cidrs
    bai_named_cidrs({name: [cidr]})               {"name[i]": cidr} (agent_network's checks)
    bai_sysctl_state(lines, wanted)               agent_network: which sysctls differ
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any, ClassVar, Union

from ansible_collections.bai.cluster.plugins.module_utils.common.addresses import covers, parse_ip
from ansible_collections.bai.cluster.plugins.module_utils.common.ports import (
    DEFAULT_CONTAINER_PORT_RANGE,
    parse_port_ranges,
    range_text,
)
from ansible_collections.bai.cluster.plugins.plugin_utils.filters import Filters, FilterTable

Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]

PORT_PROTOS = ("tcp", "udp", "sctp", "udplite", "dccp")
PORTLESS_PROTOS = ("esp", "ah", "gre", "icmp", "ipv6-icmp", "vrrp", "ipip")
ANYWHERE = ("0.0.0.0/0", "::/0")
_COMMENT_MAX = 120  # nft comments are at most 128 bytes


# --- small helpers ----------------------------------------------------------------------
def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (list, tuple, set)):
        return list(value)
    return [value]


def _comment(text: str) -> str:
    """A comment nft accepts: printable ASCII without double quotes, at most 120 bytes."""
    clean = re.sub(r"[^ -~]", "?", str(text)).replace('"', "'").replace("\\", "/")
    clean = re.sub(r"\s+", " ", clean).strip()
    return clean if len(clean) <= _COMMENT_MAX else clean[: _COMMENT_MAX - 3] + "..."


def _port_text(value: Any, field_name: str) -> str:
    """nftables' form of one port or range, or a list of those (SpecError, a ValueError)."""
    parts = [range_text(r) for r in parse_port_ranges(value, field_name)]
    return parts[0] if len(parts) == 1 else "{ " + ", ".join(parts) + " }"


def _networks(values: Any) -> list[Network]:
    """Addresses or CIDRs as networks (an address is its own /32 or /128)."""
    nets = []
    for value in _as_list(values):
        nets.append(ipaddress.ip_network(str(value).strip(), strict=False))
    return nets


def _collapse(nets: list[Network]) -> tuple[list[str], list[str]]:
    """(IPv4, IPv6) as sorted, merged CIDR strings (hosts without /32, /128)."""
    out: dict[int, list[str]] = {4: [], 6: []}
    for version in (4, 6):
        same = [n for n in nets if n.version == version]
        for net in ipaddress.collapse_addresses(same):  # type: ignore[type-var]
            whole = net.prefixlen == net.max_prefixlen
            out[version].append(str(net.network_address) if whole else str(net))
    return out[4], out[6]


def _set_text(elements: list[str]) -> str:
    return "{ " + ", ".join(elements) + " }"


# --- collect and address ----------------------------------------------------------------
def collect(hostvars: Any, hosts: Any, names: Any) -> list[dict[str, Any]]:
    """Every opening any of ``hosts`` exports under one of ``names``, duplicates removed
    (each role exports the same list on every host it runs on)."""
    seen: list[dict[str, Any]] = []
    for host in _as_list(hosts):
        try:
            variables = hostvars[host]
        except KeyError:
            continue
        for name in _as_list(names):
            try:
                exported = variables.get(name)
            except Exception:  # an undefined variable of another host: nothing exported
                exported = None
            for entry in _as_list(exported):
                plain = dict(entry) if isinstance(entry, Mapping) else entry
                if plain not in seen:
                    seen.append(plain)
    return seen


def addresses(hostvars: Any, hosts: Any, zone_cidrs: Any = None) -> dict[str, Any]:
    """{"addresses": {host: [address, ...]}, "problems": [...]}.

    A host's addresses are ``host_firewall_addresses`` when the inventory sets it, else
    the addresses Ansible gathered (``ansible_facts.all_ipv4_addresses`` and
    ``all_ipv6_addresses``) that lie inside one of the zones. Addresses outside the zones
    (Docker bridges, loopback) are never used as sources: they are not how peers reach
    each other. Without zones, every gathered address except loopback and link-local.
    """
    zones = _zone_networks(zone_cidrs)
    found: dict[str, list[str]] = {}
    problems: list[str] = []
    for host in _as_list(hosts):
        try:
            variables = hostvars[host]
        except KeyError:
            problems.append(f"{host}: not in the inventory")
            continue
        override = variables.get("host_firewall_addresses") if hasattr(variables, "get") else None
        if override:
            try:
                found[host] = [str(a) for a in _as_list(override) if _networks(a)]
            except ValueError as exc:
                problems.append(f"{host}: host_firewall_addresses {override!r}: {exc}")
            continue
        facts = variables.get("ansible_facts", {}) if hasattr(variables, "get") else {}
        gathered = _as_list(facts.get("all_ipv4_addresses")) + _as_list(
            facts.get("all_ipv6_addresses")
        )
        if not gathered:
            problems.append(
                f"{host}: no addresses known (facts not gathered); set host_firewall_addresses"
            )
            continue
        mine = []
        for text in gathered:
            address = parse_ip(text)
            if address is None or address.is_loopback or address.is_link_local:
                continue
            if zones and not any(address in net for net in zones if net.version == address.version):
                continue
            mine.append(str(address))
        if not mine:
            problems.append(
                f"{host}: none of its addresses ({', '.join(map(str, gathered))}) lies in a "
                "zone of bai_zone_cidrs; set host_firewall_addresses for it"
            )
            continue
        found[host] = sorted(set(mine), key=lambda a: (":" in a, a))
    return {"addresses": found, "problems": problems}


def _zone_networks(zone_cidrs: Any) -> list[Network]:
    if not zone_cidrs:
        return []
    values = zone_cidrs.values() if isinstance(zone_cidrs, Mapping) else zone_cidrs
    nets = []
    for value in values:
        try:
            nets.append(ipaddress.ip_network(str(value), strict=True))
        except ValueError:
            continue  # preflight names invalid zones
    return nets


# --- the plan ---------------------------------------------------------------------------
def _sources(
    entry: Mapping[str, Any],
    groups: Mapping[str, Any],
    host_addresses: Mapping[str, Any],
    zone_cidrs: Mapping[str, Any],
) -> tuple[list[Network], list[str], list[str]]:
    """(networks, named sources for the comment, problems) of one opening."""
    nets: list[Network] = []
    names: list[str] = []
    problems: list[str] = []
    for group in _as_list(entry.get("from_groups")):
        members = _as_list(groups.get(group)) if group in groups else None
        if members is None:
            problems.append(f"from_groups names {group!r}, which is not an inventory group")
            continue
        names.append(group)
        for member in members:
            try:
                nets += _networks(host_addresses.get(member, []))
            except ValueError as exc:
                problems.append(f"address of {member}: {exc}")
    for zone in _as_list(entry.get("from_zones")):
        if zone not in zone_cidrs:
            problems.append(f"from_zones names {zone!r}, which bai_zone_cidrs does not define")
            continue
        names.append(f"zone {zone}")
        try:
            nets += _networks(zone_cidrs[zone])
        except ValueError as exc:
            problems.append(f"zone {zone}: {exc}")
    for cidr in _as_list(entry.get("from_cidrs")):
        try:
            nets += _networks(cidr)
            names.append("anywhere" if str(cidr) in ANYWHERE else str(cidr))
        except ValueError as exc:
            problems.append(f"from_cidrs {cidr!r}: {exc}")
    return nets, sorted(set(names), key=names.index), problems


def _match(proto: str, port: Any) -> str:
    """The protocol/port part of a rule, or ValueError."""
    if proto in PORT_PROTOS:
        return f"{proto} dport {_port_text(port, 'port')}"
    if proto in PORTLESS_PROTOS:
        if port not in (None, "", []):
            raise ValueError(f"proto {proto} has no ports, but port is {port!r}")
        return f"meta l4proto {proto}"
    raise ValueError(f"proto {proto!r} is not one of {', '.join(PORT_PROTOS + PORTLESS_PROTOS)}")


def plan(
    openings: Any,
    host: str,
    host_groups: Any,
    groups: Mapping[str, Any],
    host_addresses: Mapping[str, Any],
    zone_cidrs: Any = None,
    admin_cidrs: Any = None,
    ssh_port: Any = 22,
    container_ports: Any = DEFAULT_CONTAINER_PORT_RANGE,
    container_from_groups: Any = ("appproxy",),
) -> dict[str, Any]:
    """What the firewall of ``host`` (member of ``host_groups``) lets in.

    Returns ``{"input": [{"rule", "comment"}], "admin_v4", "admin_v6", "container_ports",
    "container_from_v4", "container_from_v6", "open": [text, ...], "problems": [...]}``.
    ``input`` holds one accept rule per protocol, port and address family; openings that
    share protocol and port are merged (their sources and purposes joined). An opening
    whose on_groups do not include the host is left out. ``problems`` lists every bad
    opening (the role refuses to load anything then).
    """
    zones = dict(zone_cidrs or {})
    mine = set(_as_list(host_groups))
    problems: list[str] = []

    admin_v4, admin_v6 = _admin_networks(admin_cidrs, problems)

    try:
        ssh = _port_text(ssh_port, "SSH port")
    except ValueError as exc:
        problems.append(str(exc))
        ssh = "22"

    merged = _merge_openings(openings, mine, groups, host_addresses, zones, problems)
    rules, opened = _rules(merged)

    try:
        container = _port_text(container_ports, "container port range")
    except ValueError as exc:
        problems.append(str(exc))
        container = DEFAULT_CONTAINER_PORT_RANGE
    proxy_v4, proxy_v6 = _container_sources(container_from_groups, groups, host_addresses, problems)

    return {
        "host": host,
        "ssh_port": ssh,
        "admin_v4": admin_v4,
        "admin_v6": admin_v6,
        "input": rules,
        "open": opened,
        "container_ports": container,
        "container_from_v4": proxy_v4,
        "container_from_v6": proxy_v6,
        "problems": problems,
    }


def _admin_networks(admin_cidrs: Any, problems: list[str]) -> tuple[list[str], list[str]]:
    """The administrators' networks (v4, v6); a bad entry is a problem."""
    admins: list[Network] = []
    for cidr in _as_list(admin_cidrs):
        try:
            admins += _networks(cidr)
        except ValueError as exc:
            problems.append(f"bai_admin_cidrs entry {cidr!r}: {exc}")
    return _collapse(admins)


def _merge_openings(
    openings: Any,
    mine: set[str],
    groups: Mapping[str, Any],
    host_addresses: Mapping[str, Any],
    zones: dict[str, Any],
    problems: list[str],
) -> dict[tuple[str, str], dict[str, Any]]:
    """The host's openings (its groups ``mine`` are among their on_groups) by protocol and
    port, their sources and purposes joined; every bad opening is a problem."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for index, raw in enumerate(_as_list(openings)):
        where = f"opening [{index}]"
        if not isinstance(raw, Mapping):
            problems.append(f"{where}: {raw!r} is not a mapping")
            continue
        purpose = str(raw.get("purpose") or "").strip()
        where = f"opening [{index}] ({purpose or 'no purpose'})"
        on_groups = _as_list(raw.get("on_groups"))
        if not on_groups:
            problems.append(f"{where}: on_groups is empty (which hosts open it?)")
            continue
        if not any(k in raw for k in ("from_groups", "from_zones", "from_cidrs")):
            problems.append(
                f"{where}: says nothing about who may connect (from_groups/zones/cidrs)"
            )
            continue
        proto = str(raw.get("proto") or "tcp").lower()
        try:
            match = _match(proto, raw.get("port"))
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
            continue
        nets, names, bad = _sources(raw, groups, host_addresses, zones)
        problems += [f"{where}: {p}" for p in bad]
        if bad or not mine.intersection(on_groups):
            continue
        slot = merged.setdefault((proto, match), {"nets": [], "purposes": [], "names": []})
        slot["nets"] += nets
        slot["purposes"] += [purpose] if purpose and purpose not in slot["purposes"] else []
        slot["names"] += [n for n in names if n not in slot["names"]]
    return merged


def _rules(merged: dict[tuple[str, str], dict[str, Any]]) -> tuple[list[dict[str, str]], list[str]]:
    """The accept rules of the merged openings, and each one in words."""
    rules: list[dict[str, str]] = []
    opened: list[str] = []
    for (_proto, match), slot in sorted(merged.items(), key=lambda kv: _sort_key(kv[0])):
        v4, v6 = _collapse(slot["nets"])
        comment = _comment(
            f"{'; '.join(slot['purposes']) or match} from {', '.join(slot['names'])}"
        )
        for family, elements in (("ip", v4), ("ip6", v6)):
            if elements:
                rules.append(
                    {
                        "rule": f"{match} {family} saddr {_set_text(elements)} accept",
                        "comment": comment,
                    }
                )
        who = ", ".join(v4 + v6) or "nobody (no source address known)"
        opened.append(f"{match} from {who} ({comment})")
    return rules, opened


def _container_sources(
    container_from_groups: Any,
    groups: Mapping[str, Any],
    host_addresses: Mapping[str, Any],
    problems: list[str],
) -> tuple[list[str], list[str]]:
    """The networks (v4, v6) of the groups that may reach the container ports."""
    proxy_nets: list[Network] = []
    for group in _as_list(container_from_groups):
        if group not in groups:
            problems.append(f"container port sources: {group!r} is not an inventory group")
            continue
        for member in _as_list(groups.get(group)):
            try:
                proxy_nets += _networks(host_addresses.get(member, []))
            except ValueError as exc:
                problems.append(f"address of {member}: {exc}")
    return _collapse(proxy_nets)


def named_cidrs(groups: Any) -> dict[str, str]:
    """{"engine": [a, b], "swarm": [c]} -> {"engine[0]": a, "engine[1]": b, "swarm[0]": c},
    so overlap messages (bai_cidr_overlaps_with) name the pool an entry came from."""
    out: dict[str, str] = {}
    for name, values in dict(groups or {}).items():
        for index, value in enumerate(_as_list(values)):
            out[f"{name}[{index}]"] = str(value)
    return out


def sysctl_state(lines: Any, wanted: Any) -> list[dict[str, Any]]:
    """agent_network: lines "<key> <value|MISSING> <rw|ro>" and {key: wanted value} ->
    [{key, want, have, differs, writable}] in the order of ``wanted``. Values compare as
    whitespace-separated words ("4096 87380" == "4096\t87380")."""
    seen: dict[str, tuple[str, bool]] = {}
    for line in _as_list(lines):
        parts = str(line).split()
        if len(parts) >= 3:
            seen[parts[0]] = (" ".join(parts[1:-1]), parts[-1] == "rw")
    rows = []
    for key, want in dict(wanted or {}).items():
        have, writable = seen.get(str(key), ("MISSING", False))
        want_text = " ".join(str(want).split())
        rows.append(
            {
                "key": str(key),
                "want": want_text,
                "have": have,
                "differs": have != want_text,
                "writable": writable and have != "MISSING",
            }
        )
    return rows


def _sort_key(key: tuple[str, str]) -> tuple[int, int, str]:
    proto, match = key
    number = re.search(r"\d+", match.split("dport", 1)[-1])
    return (0 if proto in PORT_PROTOS else 1, int(number.group()) if number else 0, match)


class FilterModule(FilterTable):
    """Ansible entry point."""

    FILTERS: ClassVar[Filters] = {
        "bai_firewall_collect": collect,
        "bai_firewall_addresses": addresses,
        "bai_firewall_plan": plan,
        "bai_firewall_covers": covers,
        "bai_named_cidrs": named_cidrs,
        "bai_sysctl_state": sysctl_state,
    }
