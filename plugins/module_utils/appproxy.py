"""Pure logic of the app proxy (roles/appproxy): one TCP route per session.

A session's route is one HAProxy file, ``<routes_dir>/<session>.cfg``: a user-facing port
on the app proxy -> the agent's compute address : main1's published sshd port. The file
starts with a machine-readable header line (``# bai-route {json}``), so the files
themselves are the only state: which ports are in use, which session holds which port.

Why a separate file: allocation (stable, lowest free, never a port something else
listens on) and rendering are plain functions, unit-tested without Ansible or HAProxy
(tests/unit/test_appproxy.py). The module plugins/modules/bai_appproxy_route.py
does the I/O around them. Standard library only, valid Python 3.9+.

    check_session(name)                     a session name, or RouteError
    parse_port_range("10205-10300")         (10205, 10300), or RouteError
    parse_route(text)                       the header of a route file (dict), or None
    render_route(route)                     the text of a route file
    allocate_port(port_range, ...)          the session's port: kept, else the lowest free
    plan_route(routes, ...)                 the route a session should have
    listening_ports(proc_net_tcp_text)      TCP ports in LISTEN state (/proc/net/tcp, tcp6)
    public_key_errors(keys)                 what is wrong with a list of SSH public keys
    authorized_keys_tar(keys)               people's keys as a tar for put_archive into ~work/.ssh
    pick_address(lines, cidr)               the first IPv4 address inside a CIDR
"""

from __future__ import annotations

import io
import ipaddress
import json
import re
import tarfile
import time
from collections.abc import Iterable, Mapping
from typing import Any, Optional

from ansible_collections.bai.cluster.plugins.module_utils.naming import is_session_name

HEADER = "# bai-route "
ROUTE_SUFFIX = ".cfg"
# An OpenSSH public key line: type, base64 blob, optional comment. No options prefix
# (command=..., from=...) and no line breaks: one key per entry.
PUBLIC_KEY_RE = re.compile(
    r"^(ssh-(ed25519|rsa|dss)|ecdsa-sha2-nistp(256|384|521)|sk-(ssh-ed25519|ecdsa-sha2-nistp256)@openssh\.com)"
    r" [A-Za-z0-9+/]+={0,2}( [^\r\n]*)?$"
)
TCP_LISTEN = "0A"
# A backend: an IPv4/IPv6 address or a DNS name (nothing HAProxy would read as a keyword).
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOST_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*")
# Where people's keys go in a session container: sshd reads ~/.ssh/authorized_keys and
# ~/.ssh/authorized_keys2 by default (AuthorizedKeysFile), and the session image's
# entrypoint rewrites authorized_keys (the session key) when it installs the keys.
PEOPLE_KEYS_FILE = "authorized_keys2"


class RouteError(ValueError):
    """A request that cannot be routed; the message says why and what to change."""


def check_session(name: Any) -> str:
    if not is_session_name(name):  # session names are also safe as file names
        raise RouteError(
            f"session {name!r} is not a session name (1-32 of a-z, 0-9 and '-', starting and "
            f"ending with a letter or digit)"
        )
    return name


def parse_port_range(text: Any) -> tuple[int, int]:
    """(first, last) of "FIRST-LAST" (or one port "N"), both within 1-65535, first <= last."""
    match = re.match(r"^\s*(\d{1,5})\s*(?:-\s*(\d{1,5})\s*)?$", str(text))
    if not match:
        raise RouteError(f"port range {text!r} is not FIRST-LAST (e.g. 10205-10300)")
    first = int(match.group(1))
    last = int(match.group(2) or first)
    if not 1 <= first <= last <= 65535:
        raise RouteError(
            f"port range {text!r}: ports must be within 1-65535 and the first <= the last"
        )
    return first, last


def _port(value: Any, what: str) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise RouteError(f"{what} {value!r} is not a port number") from None
    if not 1 <= port <= 65535 or isinstance(value, bool):
        raise RouteError(f"{what} {value!r} is not a port number (1-65535)")
    return port


def parse_route(text: str) -> Optional[dict[str, Any]]:
    """The header of a route file written by render_route; None for any other file
    (an operator's own .cfg in the folder, a damaged file)."""
    for line in text.splitlines():
        if line.startswith(HEADER):
            try:
                data = json.loads(line[len(HEADER) :])
            except ValueError:
                return None
            if not isinstance(data, dict):
                return None
            try:
                data["port"] = _port(data.get("port"), "port")
                check_session(data.get("session"))
            except RouteError:
                return None
            return data
    return None


def render_route(route: Mapping[str, Any]) -> str:
    """The HAProxy configuration of one route (a TCP ``listen`` section)."""
    session = check_session(route["session"])
    port = _port(route["port"], "port")
    backend_port = _port(route["backend_port"], "backend port")
    backend_host = str(route["backend_host"])
    bind = str(route.get("bind_address") or "")
    header = {key: route[key] for key in sorted(route)}
    server = f"[{backend_host}]" if ":" in backend_host else backend_host
    bind_host = f"[{bind}]" if ":" in bind else bind
    return (
        f"# Managed by bai-cluster (roles/appproxy): the app-proxy route of session {session}.\n"
        f"# Written by playbooks/session_create.yml, removed by session_destroy.yml.\n"
        f"{HEADER}{json.dumps(header, sort_keys=True)}\n"
        f"listen bai-session-{session}\n"
        f"    mode tcp\n"
        f"    bind {bind_host}:{port}\n"
        f"    server {route.get('target_host', 'main1')} {server}:{backend_port}\n"
    )


def allocate_port(
    port_range: tuple[int, int],
    taken: Iterable[int],
    current: Optional[int] = None,
    busy: Iterable[int] = (),
) -> int:
    """The session's user-facing port.

    ``current`` (the port its route file already has) is kept while it lies in the range
    and no other route claims it: a route is stable for its session. Otherwise the lowest
    port of the range that no other route claims (``taken``) and nothing else listens on
    (``busy``: listening ports not claimed by any route, e.g. another program).
    """
    first, last = port_range
    taken = set(taken)
    if current is not None and first <= current <= last and current not in taken:
        return current
    unusable = taken | set(busy)
    for port in range(first, last + 1):
        if port not in unusable:
            return port
    raise RouteError(
        f"no free port left in {first}-{last}: {len(taken)} route(s) use it and "
        f"{len(set(busy) - taken)} other listener(s) sit in it; destroy sessions you no "
        f"longer need or widen appproxy_port_range"
    )


def plan_route(
    routes: Mapping[str, Mapping[str, Any]],
    *,
    session: str,
    session_id: Optional[str],
    backend_host: str,
    backend_port: Any,
    port_range: tuple[int, int],
    listening: Iterable[int] = (),
    bind_address: str = "",
    target_host: str = "main1",
    target_port: int = 2200,
) -> dict[str, Any]:
    """The route ``session`` should have, given every route file's header (``routes``:
    file stem -> header). Ports that something listens on but no route claims are avoided."""
    check_session(session)
    if not backend_host or not str(backend_host).strip():
        raise RouteError(f"session {session}: no backend address (the agent's compute address)")
    if not HOST_RE.fullmatch(str(backend_host).strip()):
        raise RouteError(
            f"session {session}: backend address {backend_host!r} is not an IP address or a "
            f"host name"
        )
    mine = routes.get(session)
    others = {int(r["port"]) for name, r in routes.items() if name != session}
    claimed = others | ({int(mine["port"])} if mine else set())
    busy = set(listening) - claimed
    port = allocate_port(port_range, others, int(mine["port"]) if mine else None, busy)
    route: dict[str, Any] = {
        "session": session,
        "port": port,
        "backend_host": str(backend_host).strip(),
        "backend_port": _port(backend_port, "backend port"),
        "target_host": target_host,
        "target_port": _port(target_port, "target port"),
    }
    if session_id:
        route["session_id"] = str(session_id)
    if bind_address:
        route["bind_address"] = str(bind_address)
    return route


def listening_ports(text: str) -> set[int]:
    """Local ports of TCP sockets in LISTEN state, from /proc/net/tcp or /proc/net/tcp6."""
    ports = set()
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != TCP_LISTEN or ":" not in fields[1]:
            continue
        try:
            ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        except ValueError:
            continue
    return ports


def public_key_errors(keys: Any) -> list[str]:
    """One line per entry of ``keys`` that is not a single OpenSSH public key (empty = fine).
    Never echoes a whole entry: a private key pasted by mistake must not reach a log."""
    if not isinstance(keys, (list, tuple)):
        return [f"expected a list of public keys, got {type(keys).__name__}"]
    problems = []
    for i, key in enumerate(keys):
        if not isinstance(key, str):
            problems.append(f"[{i}]: expected a string, got {type(key).__name__}")
        elif "PRIVATE KEY" in key:
            problems.append(f"[{i}]: is a private key; pass the public key (the .pub file)")
        elif not PUBLIC_KEY_RE.match(key.strip()):
            problems.append(
                f"[{i}]: not one OpenSSH public key line (TYPE BASE64 [COMMENT], e.g. "
                f"'ssh-ed25519 AAAA... user@host'; starts with {key.strip()[:12]!r})"
            )
    return problems


def authorized_keys_tar(keys: Iterable[str], name: str = PEOPLE_KEYS_FILE) -> bytes:
    """An in-memory tar of one file ``name`` holding ``keys`` (one per line), for
    ``put_archive`` into ``/home/work/.ssh``: root-owned, 0644 (sshd reads it as the user;
    StrictModes accepts a root-owned file that only root can write)."""
    data = "".join(f"{key.strip()}\n" for key in keys).encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = 0o644
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def pick_address(lines: Iterable[Any], cidr: Optional[str]) -> Optional[str]:
    """The first IPv4 address inside ``cidr`` among ``lines``: plain addresses
    (Ansible's ``all_ipv4_addresses``), ``ADDRESS/PREFIX``, or ``ip -o -4 addr show`` lines
    (``2: eth0    inet 10.210.1.12/24 brd ...``). None when there is none (or no cidr)."""
    if not cidr:
        return None
    network = ipaddress.ip_network(str(cidr), strict=False)
    for line in lines:
        match = re.search(r"(?:^|\binet )(\d{1,3}(?:\.\d{1,3}){3})(?:/\d+)?\b", str(line).strip())
        if not match:
            continue
        try:
            address = ipaddress.ip_address(match.group(1))
        except ValueError:
            continue
        if address in network:
            return str(address)
    return None
