"""A host's addresses and the zones they lie in: one reading of each.

    parse_ip(text)                       an address from "10.1.2.3", "10.1.2.3/24" or
                                         "fe80::1%eth0"; None when it is not one
    read_addresses(lines)                the addresses of ``ip -o addr show`` lines, or of
                                         lines that are addresses
    in_zone(addresses, cidrs, version)   those of ``addresses`` inside any of ``cidrs``
    first_in_zone(addresses, cidr)       the first IPv4 one inside ``cidr``, or None
    covers(cidrs, address)               whether ``address`` lies in one of ``cidrs``
    own_ipv4_lines(run_command)          this host's ``ip -o -4 addr show`` lines
    with_host_addresses(result, ...)     a module's result with them (host_addresses)

Addresses come as Ansible gathers them (``all_ipv4_addresses``), as ``ADDRESS/PREFIX``
or as lines of ``ip -o addr show``; the order given is kept (the first address found in
a zone is the one a host advertises).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable
from typing import Any, Optional, Union

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]

# "2: eth0    inet 10.210.1.12/24 brd ..." / "inet6 fd00::1/64 scope global"
_IP_ADDR_RE = re.compile(r"\binet6? ([0-9A-Fa-f:.]+)(?:/\d+)?")


def parse_ip(text: Any) -> Optional[IPAddress]:
    """The address in ``text`` (a prefix length and an IPv6 zone are dropped)."""
    bare = str(text).strip().split("/", maxsplit=1)[0].split("%", maxsplit=1)[0]
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        return None


def read_addresses(lines: Union[str, Iterable[Any]]) -> list[str]:
    """The addresses of ``ip -o addr show`` output (text or lines), in order; a line
    that is not such a line is taken as it is (a plain address, ``ADDRESS/PREFIX``)."""
    found: list[str] = []
    for line in lines.splitlines() if isinstance(lines, str) else lines or []:
        matches = _IP_ADDR_RE.findall(str(line))
        found.extend(matches or [str(line).strip()])
    return found


def networks(cidrs: Any) -> list[Network]:
    """One CIDR or a list of them as networks; ValueError names one that is not a CIDR."""
    items = [cidrs] if isinstance(cidrs, str) else list(cidrs or [])
    found = []
    for cidr in items:
        try:
            found.append(ipaddress.ip_network(str(cidr).strip(), strict=False))
        except ValueError:
            raise ValueError(f"{cidr!r} is not a CIDR") from None
    return found


def in_zone(addresses: Iterable[Any], cidrs: Any, version: Optional[int] = None) -> list[str]:
    """The addresses (of IP ``version`` when given) that lie in one of ``cidrs``, in the
    order given, each once. Entries that are not addresses are skipped; a CIDR that is
    not one raises ValueError."""
    zones = networks(cidrs)
    found: list[str] = []
    for text in addresses or []:
        address = parse_ip(text)
        if address is None or (version and address.version != version):
            continue
        inside = any(address in zone for zone in zones if zone.version == address.version)
        if inside and str(address) not in found:
            found.append(str(address))
    return found


def first_in_zone(addresses: Iterable[Any], cidr: Optional[str]) -> Optional[str]:
    """The first IPv4 address inside ``cidr``; None when there is none or no ``cidr``."""
    if not cidr:
        return None
    return next(iter(in_zone(addresses, cidr, version=4)), None)


def covers(cidrs: Any, address: Any) -> bool:
    """True when ``address`` lies in one of ``cidrs`` (entries that are not CIDRs match
    nothing)."""
    ip = parse_ip(address)
    if ip is None:
        return False
    items = [cidrs] if isinstance(cidrs, str) else list(cidrs or [])
    for cidr in items:
        try:
            if ip in ipaddress.ip_network(str(cidr).strip(), strict=False):
                return True
        except (TypeError, ValueError):
            continue
    return False


def own_ipv4_lines(run_command: Callable[..., tuple[int, str, str]]) -> Optional[list[str]]:
    """This host's ``ip -o -4 addr show`` lines (``run_command`` is AnsibleModule's), as
    the app proxy's route reads them; None when ``ip`` fails or is missing."""
    try:
        rc, out, _err = run_command(["ip", "-o", "-4", "addr", "show"])
    except OSError:
        return None
    return out.splitlines() if rc == 0 else None


def with_host_addresses(
    result: dict[str, Any], run_command: Callable[..., tuple[int, str, str]], wanted: bool
) -> dict[str, Any]:
    """A module's ``result`` with ``host_addresses`` (own_ipv4_lines) when ``wanted`` and
    ``ip`` answered: what the app proxy's route to main1 needs of main1's agent."""
    lines = own_ipv4_lines(run_command) if wanted else None
    return result if lines is None else {**result, "host_addresses": lines}
