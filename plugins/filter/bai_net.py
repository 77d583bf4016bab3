"""Network checks for the inventory: CIDR syntax, overlaps, public addresses.

Why a filter of our own: ansible.utils' ipaddr filters need the ``netaddr`` library,
which the controller venv does not carry; Python's ``ipaddress`` does all we need.

Every filter returns a list of problems written for a person (empty = fine) instead of
raising, so a role can ``assert`` that the list is empty and show it verbatim. An
address is read as everywhere in the collection (module_utils/common/addresses.py).

    bai_cidr_errors(cidrs)            invalid entries of a {name: cidr} mapping or a list
    bai_cidr_overlaps(cidrs)          pairs of entries that overlap each other
    bai_cidr_overlaps_with(a, b)      entries of a that overlap an entry of b
    bai_public_ipv4(addresses)        the addresses that are public (ipaddress.is_global)
    bai_address_pool_errors(pools)    invalid Docker address pools ([{base, size}, ...])
    bai_cidr_host(cidr, number)       the address numbered ``number`` in ``cidr``
    bai_zone_ipv4(addresses, cidrs)   the IPv4 addresses inside ``cidrs`` (none given:
                                      every one but loopback and link-local)
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from itertools import combinations
from typing import Any, ClassVar, Union

from ansible_collections.bai.cluster.plugins.module_utils.common.addresses import (
    in_zone,
    parse_ip,
    read_addresses,
)
from ansible_collections.bai.cluster.plugins.plugin_utils.filters import Filters, FilterTable

Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]


def _named(cidrs: Any) -> list[tuple[str, Any]]:
    """(name, value) pairs from a {name: cidr} mapping or a list (named by position)."""
    if isinstance(cidrs, Mapping):
        return [(str(k), v) for k, v in cidrs.items()]
    if isinstance(cidrs, (list, tuple)):
        return [(f"[{i}]", v) for i, v in enumerate(cidrs)]
    raise TypeError(f"expected a mapping or a list of CIDRs, got {type(cidrs).__name__}")


def parse_cidr(value: Any) -> Network:
    """A network in CIDR notation (host bits zero), or ValueError saying what is wrong."""
    if not isinstance(value, str) or "/" not in value:
        raise ValueError("not in CIDR notation (address/prefix, e.g. 10.210.3.0/24)")
    try:
        return ipaddress.ip_network(value.strip(), strict=True)
    except ValueError as exc:
        try:
            fixed = ipaddress.ip_network(value.strip(), strict=False)
        except ValueError:
            raise ValueError(f"not a valid CIDR ({exc})") from None
        raise ValueError(f"has host bits set; the network is {fixed}") from None


def cidr_errors(cidrs: Any) -> list[str]:
    """One line per entry that is not a valid CIDR: ``name: 'value' <reason>``."""
    try:
        named = _named(cidrs)
    except TypeError as exc:
        return [str(exc)]
    problems = []
    for name, value in named:
        try:
            parse_cidr(value)
        except ValueError as exc:
            problems.append(f"{name}: {value!r} {exc}")
    return problems


def _valid(named: Iterable[tuple[str, Any]]) -> list[tuple[str, Network]]:
    """The entries that parse; invalid ones are cidr_errors' business, not ours."""
    good = []
    for name, value in named:
        try:
            good.append((name, parse_cidr(value)))
        except ValueError:
            continue
    return good


def cidr_overlaps(cidrs: Any) -> list[str]:
    """One line per pair of entries that share addresses: ``a (x) overlaps b (y)``."""
    try:
        nets = _valid(_named(cidrs))
    except TypeError as exc:
        return [str(exc)]
    return [
        f"{a} ({na}) overlaps {b} ({nb})"
        for (a, na), (b, nb) in combinations(nets, 2)
        if na.version == nb.version and na.overlaps(nb)
    ]


def cidr_overlaps_with(cidrs: Any, others: Any) -> list[str]:
    """One line per entry of ``cidrs`` that overlaps an entry of ``others``."""
    try:
        mine, theirs = _valid(_named(cidrs)), _valid(_named(others))
    except TypeError as exc:
        return [str(exc)]
    return [
        f"{a} ({na}) overlaps {b} ({nb})"
        for a, na in mine
        for b, nb in theirs
        if na.version == nb.version and na.overlaps(nb)
    ]


def public_ipv4(addresses: Any) -> list[str]:
    """The IPv4 addresses that are publicly routable (not private, loopback, link-local,
    CGNAT 100.64/10, documentation, reserved...): Python's ``is_global``."""
    if isinstance(addresses, str):
        addresses = [addresses]
    public = []
    for text in addresses or []:
        address = parse_ip(text)
        if address is not None and address.version == 4 and address.is_global:
            public.append(str(address))
    return public


def address_pool_errors(pools: Any) -> list[str]:
    """One line per unusable Docker address pool ``{"base": CIDR, "size": prefix}``:
    the base must be a valid CIDR and the size a prefix length from the base's own
    up to the longest that still leaves room for a gateway and a host (/30, /126)."""
    if not isinstance(pools, (list, tuple)):
        return [f"expected a list of pools, got {type(pools).__name__}"]
    problems = []
    for i, pool in enumerate(pools):
        if not isinstance(pool, Mapping) or set(pool) != {"base", "size"}:
            problems.append(f"[{i}]: {pool!r} must be a mapping with exactly base and size")
            continue
        try:
            base = parse_cidr(pool["base"])
        except ValueError as exc:
            problems.append(f"[{i}]: base {pool['base']!r} {exc}")
            continue
        size = pool["size"]
        longest = base.max_prefixlen - 2
        if isinstance(size, bool) or not isinstance(size, int):
            problems.append(f"[{i}]: size {size!r} is not an integer prefix length")
        elif not base.prefixlen <= size <= longest:
            problems.append(
                f"[{i}]: size {size} must lie between the base's prefix length "
                f"{base.prefixlen} and {longest}"
            )
    return problems


def cidr_host(cidr: Any, number: Any) -> str:
    """The address with host number `number` in `cidr` (10.0.0.0/24, 5 -> 10.0.0.5)."""
    network = parse_cidr(cidr)
    index = int(number)
    if not 0 < index < network.num_addresses - 1:
        raise ValueError(f"host number {index} lies outside {network}")
    return str(network[index])


def zone_ipv4(addresses: Any, cidrs: Any = None) -> list[str]:
    """The IPv4 addresses of ``addresses`` (addresses, ``ADDRESS/PREFIX`` or lines of
    ``ip -o -4 addr show``) that lie in one of ``cidrs`` (a CIDR or a list), in the order
    given, each once; with no ``cidrs``, every one that is not loopback or link-local
    (what a certificate names, roles/cluster_ca). A CIDR that is not one raises."""
    found = read_addresses(addresses if isinstance(addresses, str) else list(addresses or []))
    if cidrs:
        return in_zone(found, cidrs, version=4)
    own: list[str] = []
    for text in found:
        address = parse_ip(text)
        if address is None or address.version != 4:
            continue
        if address.is_loopback or address.is_link_local or str(address) in own:
            continue
        own.append(str(address))
    return own


class FilterModule(FilterTable):
    """Ansible entry point."""

    FILTERS: ClassVar[Filters] = {
        "bai_cidr_errors": cidr_errors,
        "bai_cidr_overlaps": cidr_overlaps,
        "bai_cidr_overlaps_with": cidr_overlaps_with,
        "bai_public_ipv4": public_ipv4,
        "bai_address_pool_errors": address_pool_errors,
        "bai_cidr_host": cidr_host,
        "bai_zone_ipv4": zone_ipv4,
    }
