"""Pure logic of the app proxy (roles/appproxy): one TCP route per session.

A session's route is one HAProxy file, ``<routes_dir>/<session>.cfg``: a user-facing port
on the app proxy -> the agent's compute address : main1's published sshd port. The file
starts with a machine-readable header line (``# bai-route {json}``), so the files
themselves are the only state: which ports are in use, which session holds which port.

Why a separate file: allocation (stable, lowest free, never a port something else
listens on) and rendering are plain functions, unit-tested without Ansible or HAProxy
(tests/unit/test_appproxy.py). network/appproxy_routes.py does the I/O around them for
the module plugins/modules/bai_appproxy_route.py. No Ansible imports, valid Python 3.9+.

    check_session(name)                     a session name, or RouteError
    parse_route(text)                       the header of a route file (dict), or None
    render_route(route)                     the text of a route file
    allocate_port(port_range, ...)          the session's port: kept, else the lowest free
    plan_route(routes, ...)                 the route a session should have
    listening_ports(proc_net_tcp_text)      TCP ports in LISTEN state (/proc/net/tcp, tcp6)
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Optional

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import RouteError, SpecError
from ansible_collections.bai.cluster.plugins.module_utils.common.ports import parse_port
from ansible_collections.bai.cluster.plugins.module_utils.session.naming import is_session_name

HEADER = "# bai-route "
ROUTE_SUFFIX = ".cfg"
TCP_LISTEN = "0A"
# A backend: an IPv4/IPv6 address or a DNS name (nothing HAProxy would read as a keyword).
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOST_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*")


def check_session(name: Any) -> str:
    if not is_session_name(name):  # session names are also safe as file names
        raise RouteError(
            f"session {name!r} is not a session name (1-32 of a-z, 0-9 and '-', starting and "
            f"ending with a letter or digit)"
        )
    return name


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
                data["port"] = parse_port(data.get("port"), "port")
                check_session(data.get("session"))
            except SpecError:  # RouteError too
                return None
            return data
    return None


def render_route(route: Mapping[str, Any]) -> str:
    """The HAProxy configuration of one route (a TCP ``listen`` section)."""
    session = check_session(route["session"])
    port = parse_port(route["port"], "port")
    backend_port = parse_port(route["backend_port"], "backend port")
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
        "backend_port": parse_port(backend_port, "backend port"),
        "target_host": target_host,
        "target_port": parse_port(target_port, "target port"),
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
