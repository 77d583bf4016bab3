"""A session's interactive apps (docs/apps.md): what main1 serves through the app proxy.

An image declares its apps in Backend.AI's label ``ai.backend.service-ports``
(``name:protocol:port`` entries, comma-separated, e.g. ``jupyter:http:8090``) and says how
to start each in a Backend.AI service definition, ``/etc/backend.ai/service-defs/NAME.json``
(``{"command": [...]}``, where ``{ports[0]}`` stands for the app's port). A session may
declare ports of its own (``session_apps``: ``NAME=http:PORT`` or ``NAME:http:PORT``), for
a server the user starts (TensorBoard, a model server): the proxy routes to them, the
toolkit starts nothing. main1 publishes every app's port at create, toward the app proxy
only, as it does its sshd.

Pure logic (no Ansible imports, Python 3.9+):

    App                                  one app: name, protocol, port, declared
    parse_service_ports(label)           an image label's apps
    parse_declared(value)                a session's own apps (session_apps), validated
    merged(image_apps, declared)         the session's apps, the image's first
    render_label(apps)                   the label form (what main1's label records)
    service_command(definition, app)     a service definition's argv for ``app``
    url_path(definition)                 the path that opens the app (default /)
    where(read, name)                    the filter bai_app_where: main1's agent, or why not
    check_app_name(name)                 an app name, or SpecError
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError

# Backend.AI's image label, and the label main1 carries for the session's own apps.
SERVICE_PORTS_LABEL = "ai.backend.service-ports"
SERVICE_DEFS_DIR = "/etc/backend.ai/service-defs"
# Protocols the app proxy routes: HTTP (WebSockets included), over HTTPS to the user.
PROTOCOLS = ("http",)
# Backend.AI images also list protocols the proxy here does not carry (tcp, pty,
# preopen); such entries are skipped, not refused, so those images still run.
_KNOWN_PROTOCOLS = ("http", "tcp", "pty", "preopen", "vnc", "rdp")
# A session's own apps: enough for a notebook, a board and a server or two.
MAX_DECLARED = 8
# Ports an app may not take in main1: its sshd, and the privileged range (apps run as
# the user, who cannot bind below 1024).
_RESERVED = {2200}
_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,22}[a-z0-9]$|^[a-z]$")
_ENTRY_RE = re.compile(r"^([^:=\s]+)[:=]([a-z]+):([0-9]{1,5})$")


@dataclass(frozen=True)
class App:
    """One app of a session: its name, protocol and port in main1; ``declared`` when
    the session declared it (the toolkit starts nothing for it)."""

    name: str
    protocol: str
    port: int
    declared: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "protocol": self.protocol,
            "port": self.port,
            "declared": self.declared,
        }


def check_app_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise SpecError(
            f"app name {name!r}: 1-24 of a-z, 0-9 and '-', starting with a letter and "
            f"ending with a letter or digit"
        )
    return name


def _port(value: Any, where: str) -> int:
    try:
        port = int(str(value))
    except ValueError:
        raise SpecError(f"{where}: port {value!r} is not a whole number") from None
    if not 1024 <= port <= 65535 or port in _RESERVED:
        raise SpecError(
            f"{where}: port {port} is not usable for an app (1024-65535, not main1's sshd "
            f"port 2200)"
        )
    return port


def _entry(item: Any, where: str, declared: bool) -> App:
    if isinstance(item, Mapping):
        extra = set(item) - {"name", "protocol", "port"}
        if extra:
            raise SpecError(f"{where}: unknown key(s) {', '.join(sorted(extra))}")
        name, protocol, port = item.get("name"), item.get("protocol", "http"), item.get("port")
    elif isinstance(item, str):
        match = _ENTRY_RE.match(item.strip())
        if not match:
            raise SpecError(f"{where}: {item!r} is not NAME=PROTOCOL:PORT (e.g. tb=http:6006)")
        name, protocol, port = match.groups()
    else:
        raise SpecError(f"{where}: expected NAME=PROTOCOL:PORT or a mapping, got {item!r}")
    check_app_name(name)
    if protocol not in PROTOCOLS:
        raise SpecError(
            f"{where}: protocol {protocol!r} of app {name}: the app proxy routes "
            f"{', '.join(PROTOCOLS)} only"
        )
    return App(str(name), str(protocol), _port(port, f"{where} (app {name})"), declared)


def parse_service_ports(label: Any) -> tuple[App, ...]:
    """An image's apps from its ``ai.backend.service-ports`` label. Entries of a protocol
    the proxy does not route are skipped; a malformed entry is an error (the image is
    wrong, and an operator should hear of it)."""
    if not label:
        return ()
    apps = []
    for raw in str(label).split(","):
        entry = raw.strip()
        if not entry:
            continue
        match = _ENTRY_RE.match(entry)
        if not match or match.group(2) not in _KNOWN_PROTOCOLS:
            raise SpecError(
                f"image label {SERVICE_PORTS_LABEL}: {entry!r} is not name:protocol:port"
            )
        if match.group(2) not in PROTOCOLS:
            continue
        apps.append(_entry(entry, f"image label {SERVICE_PORTS_LABEL}", False))
    return _unique(apps, f"image label {SERVICE_PORTS_LABEL}")


def parse_declared(value: Any) -> tuple[App, ...]:
    """A session's own apps (``session_apps``): a list of ``NAME=http:PORT`` strings (or
    ``NAME:http:PORT``, or mappings with name, protocol and port), or one such string."""
    if value is None or value == "" or value == []:
        return ()
    items = [value] if isinstance(value, (str, Mapping)) else value
    if not isinstance(items, Sequence):
        raise SpecError(f"apps: expected a list of NAME=http:PORT, got {value!r}")
    if len(items) > MAX_DECLARED:
        raise SpecError(f"apps: {len(items)} apps; at most {MAX_DECLARED} per session")
    apps = [_entry(item, f"apps[{i}]", True) for i, item in enumerate(items)]
    return _unique(apps, "apps")


def _unique(apps: Iterable[App], where: str) -> tuple[App, ...]:
    names: set[str] = set()
    ports: set[int] = set()
    for app in apps:
        if app.name in names or app.port in ports:
            raise SpecError(f"{where}: app {app.name} (port {app.port}) is declared twice")
        names.add(app.name)
        ports.add(app.port)
    return tuple(apps)


def merged(image_apps: Iterable[App], declared: Iterable[App]) -> tuple[App, ...]:
    """The session's apps: the image's, then the session's own. A declared app may not
    take an image app's name or port."""
    image_apps, declared = tuple(image_apps), tuple(declared)
    for app in declared:
        for other in image_apps:
            if app.name == other.name or app.port == other.port:
                raise SpecError(
                    f"apps: {app.name} (port {app.port}) collides with the image's app "
                    f"{other.name} (port {other.port}); choose another name and port"
                )
    return image_apps + declared


def render_label(apps: Iterable[App]) -> str:
    """The label form, ``name:protocol:port`` entries joined by commas."""
    return ",".join(f"{a.name}:{a.protocol}:{a.port}" for a in apps)


def canonical(apps: Iterable[App]) -> list[str]:
    """The spec's form of a session's own apps (what the ledger keeps; parse_declared
    reads it back)."""
    return [f"{a.name}:{a.protocol}:{a.port}" for a in apps]


def service_command(definition: Any, app: App) -> list[str]:
    """The argv that starts ``app``, from its service definition's JSON text (Backend.AI's
    ``{"command": [...]}``); ``{ports[0]}`` becomes the app's port. Nothing in it is run
    by a shell."""
    try:
        data = json.loads(definition) if isinstance(definition, (str, bytes)) else definition
    except ValueError as exc:
        raise SpecError(f"service definition of app {app.name}: not JSON ({exc})") from None
    command = data.get("command") if isinstance(data, Mapping) else None
    if (
        not isinstance(command, list)
        or not command
        or not all(isinstance(part, str) for part in command)
    ):
        raise SpecError(
            f"service definition of app {app.name}: 'command' must be a non-empty list of strings"
        )
    port = str(app.port)
    return [part.replace("{ports[0]}", port).replace("{port}", port) for part in command]


def url_path(definition: Any) -> str:
    """The path that opens an app: its service definition's ``url_path`` (an absolute
    path), else /."""
    try:
        data = json.loads(definition) if isinstance(definition, (str, bytes)) else definition
    except ValueError:
        return "/"
    path = data.get("url_path") if isinstance(data, Mapping) else None
    ok = isinstance(path, str) and path.startswith("/") and not any(c in path for c in "?# ")
    return str(path) if ok else "/"


def where(read: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The filter bai_app_where: from bai_session_ledger's read of session ``name``, the
    agent that runs its main1 and its id - or ``why`` its apps cannot open (no such
    session, queued, a batch session)."""
    entry = read.get("reservation") or {}
    found = {"agent": "", "session_id": str(entry.get("session_id") or ""), "why": ""}
    if not entry:
        queued = bool(read.get("queued"))
        found["why"] = (
            f"session {name} is queued: its apps open once it runs"
            if queued
            else f"no such session {name}"
        )
    elif entry.get("type") == "batch":
        found["why"] = f"session {name} is a batch session: apps are for interactive sessions"
    else:
        main = [k for k in entry.get("kernels") or () if k.get("host") == "main1"]
        found["agent"] = str(main[0].get("agent") or "") if main else ""
        if not found["agent"]:
            found["why"] = f"session {name} has no main1 in the session ledger"
    return found


def with_links(
    apps: Sequence[Mapping[str, Any]], routes: Sequence[Mapping[str, Any]], session_id: str
) -> list[dict[str, Any]]:
    """The filter bai_app_links: bai_session_app's list of a session's apps, each with its
    app route's ``url`` (the link, a credential) and ``proxy_port`` when it has a route
    (bai_appproxy_apps with links) of this session id - a route left by an earlier
    session of the name leads nowhere and is not given - else both None."""
    mine = {
        str(r.get("app")): r
        for r in routes
        if r.get("url") and (not session_id or str(r.get("session_id") or "") == session_id)
    }
    out = []
    for app in apps:
        route = mine.get(str(app.get("name")))
        out.append(
            {
                **app,
                "url": route["url"] if route else None,
                "proxy_port": route.get("port") if route else None,
            }
        )
    return out
