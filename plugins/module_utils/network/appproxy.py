"""Pure logic of the app proxy (roles/appproxy): one TCP route per session for its
sshd, and one HTTPS route per (session, app) for its apps (docs/apps.md).

A session's SSH route is one HAProxy file, ``<routes_dir>/<session>.cfg``: a user-facing
port on the app proxy -> the agent's compute address : main1's published sshd port. An
app's route is ``<routes_dir>/<session>.<app>.cfg`` (a dot: no session name has one): a
user-facing HTTPS port -> main1's published app port, in HTTP mode, open only to a
request that carries the route's own secret, as the link's ``bai_token`` query parameter
(answered by a redirect that drops it and sets a cookie scoped to the route) or as that
cookie. Each file starts with a machine-readable header line (``# bai-route {json}``), so
the files themselves are the only state: which ports are in use, which session holds
which port, each app route's secret (the files are root's, 0600).

Why a separate file: allocation (stable, lowest free, never a port something else
listens on) and rendering are plain functions, unit-tested without Ansible or HAProxy
(tests/unit/plugins/module_utils/network/test_appproxy.py). network/appproxy_routes.py
does the I/O around them for
the module plugins/modules/bai_appproxy_route.py. No Ansible imports, valid Python 3.9+.

    check_session(name)                     a session name, or RouteError
    route_key(session, app)                 a route's file stem
    parse_route(text)                       the header of a route file (dict), or None
    render_route(route)                     the text of a route file (TCP, or HTTPS for an app)
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
from ansible_collections.bai.cluster.plugins.module_utils.session.apps import check_app_name
from ansible_collections.bai.cluster.plugins.module_utils.session.naming import is_session_name

HEADER = "# bai-route "
# The link's query parameter and the cookie it becomes (one per route: cookies are not
# scoped by port, and a browser may hold several sessions' routes on one proxy).
TOKEN_PARAM = "bai_token"
COOKIE_PREFIX = "bai_route_"
SECRET_RE = re.compile(r"^[A-Za-z0-9_-]{32,128}$")
# What a request without the route's secret gets (nothing reaches the app).
REFUSAL = "bai-cluster app proxy: this link needs its token (bai-cluster session app NAME APP)"
# HAProxy's log line for an app route: the path without its query string (%HP), so a
# link's token never reaches a log.
APP_LOG_FORMAT = (
    '"%ci:%cp [%tr] %ft %b/%s %TR/%Tw/%Tc/%Tr/%Ta %ST %B %tsc %ac/%fc/%bc/%sc/%rc %HM %HP"'
)
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


def route_key(session: str, app: Optional[str] = None) -> str:
    """A route's file stem: the session's name, and ``.<app>`` for an app's route."""
    check_session(session)
    return f"{session}.{check_app_name(app)}" if app else session


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
                if data.get("app") is not None:
                    check_app_name(data["app"])
            except SpecError:  # RouteError too
                return None
            return data
    return None


def render_route(route: Mapping[str, Any]) -> str:
    """The HAProxy configuration of one route (a TCP ``listen`` section, or an HTTPS one
    for an app's route)."""
    session = check_session(route["session"])
    port = parse_port(route["port"], "port")
    backend_port = parse_port(route["backend_port"], "backend port")
    backend_host = str(route["backend_host"])
    bind = str(route.get("bind_address") or "")
    header = {key: route[key] for key in sorted(route)}
    server = f"[{backend_host}]" if ":" in backend_host else backend_host
    bind_host = f"[{bind}]" if ":" in bind else bind
    if route.get("app"):
        return _render_app_route(route, header, f"{bind_host}:{port}", f"{server}:{backend_port}")
    return (
        f"# Managed by bai-cluster (roles/appproxy): the app-proxy route of session {session}.\n"
        f"# Written by playbooks/session_create.yml, removed by session_destroy.yml.\n"
        f"{HEADER}{json.dumps(header, sort_keys=True)}\n"
        f"listen bai-session-{session}\n"
        f"    mode tcp\n"
        f"    bind {bind_host}:{port}\n"
        f"    server {route.get('target_host', 'main1')} {server}:{backend_port}\n"
    )


def _render_app_route(
    route: Mapping[str, Any], header: Mapping[str, Any], bind: str, server: str
) -> str:
    """An app's route: HTTPS on the user's side, HTTP (WebSockets pass) to main1's app;
    a request passes with the route's secret only."""
    session, app = route["session"], check_app_name(route["app"])
    secret, cert = str(route.get("secret") or ""), str(route.get("tls_cert") or "")
    if not SECRET_RE.match(secret):
        raise RouteError(f"session {session}, app {app}: the route has no usable secret")
    if not cert.startswith("/") or any(c.isspace() or c in "\"'#" for c in cert):
        raise RouteError(f"session {session}, app {app}: tls_cert {cert!r} is not a plain path")
    cookie = f"{COOKIE_PREFIX}{route['port']}"
    return (
        f"# Managed by bai-cluster (roles/appproxy): app {app} of session {session}.\n"
        f"# Written by playbooks/session_app.yml, removed by session_destroy.yml.\n"
        f"{HEADER}{json.dumps(header, sort_keys=True)}\n"
        f"listen bai-app-{session}.{app}\n"
        f"    mode http\n"
        f"    bind {bind} ssl crt {cert} alpn http/1.1\n"
        f"    log-format {APP_LOG_FORMAT}\n"
        f"    option forwardfor\n"
        f"    timeout tunnel 1h\n"
        # "--" ends the ACL's flags: a secret may begin with "-" (1 in 64 of them).
        f"    acl bai_token urlp({TOKEN_PARAM}) -m str -- {secret}\n"
        f"    acl bai_cookie req.cook({cookie}) -m str -- {secret}\n"
        # The link: its token becomes the route's cookie, and the address loses it.
        f"    http-request redirect location %[path] code 303 set-cookie"
        f' "{cookie}={secret}; Secure; HttpOnly; SameSite=Lax" if bai_token\n'
        f'    http-request return status 403 content-type text/plain string "{REFUSAL}"'
        f" unless bai_cookie\n"
        # The app gets the request without the route's cookie (its own stay).
        f"    http-request replace-header Cookie '^(.*?;\\s*)?{cookie}=[^;]*(?:;\\s*)?(.*)$'"
        f" '\\1\\2'\n"
        f"    server {route.get('target_host', 'main1')} {server}\n"
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
    app: Optional[str] = None,
    new_secret: Optional[str] = None,
    tls_cert: str = "",
    url_path: str = "/",
) -> dict[str, Any]:
    """The route ``session`` (or its ``app``) should have, given every route file's header
    (``routes``: file stem -> header). Ports that something listens on but no route
    claims are avoided. An app's route keeps its secret while its session id stays (a
    rerun gives the same link); a new session of that name gets ``new_secret``. It
    records ``url_path``, the path its link opens."""
    key = route_key(session, app)
    if not backend_host or not str(backend_host).strip():
        raise RouteError(f"session {session}: no backend address (the agent's compute address)")
    if not HOST_RE.fullmatch(str(backend_host).strip()):
        raise RouteError(
            f"session {session}: backend address {backend_host!r} is not an IP address or a "
            f"host name"
        )
    mine = routes.get(key)
    others = {int(r["port"]) for name, r in routes.items() if name != key}
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
    if app:
        kept = mine and mine.get("session_id") == route.get("session_id") and mine.get("secret")
        path = "/" + str(url_path or "/").lstrip("/")
        route.update(app=app, tls_cert=tls_cert, secret=kept or new_secret, url_path=path)
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
