"""The app proxy host's side of a session's route (plugins/modules/bai_appproxy_route.py):
the route files in ``routes_dir``, HAProxy's check (``haproxy -c``), its reload through
the service, and the wait until it listens on (or has closed) the route's port.

The decisions (which port, what the file says) are network/appproxy.py's pure functions;
this does the I/O around them. ``Proxy`` takes the AnsibleModule (its ``params``,
``run_command``, ``check_mode`` and ``_diff``); no Ansible imports, valid Python 3.9+.

    Proxy(module).present()       write the session's (or its app's) route, reload, wait
                                  for its port
    Proxy(module).absent()        remove it (without an app: every route of the session),
                                  reload, wait until the ports are closed
    public_address(module)        the app proxy's address in public_network, or None
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from collections.abc import Iterator
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.addresses import (
    first_in_zone,
    read_addresses,
)
from ansible_collections.bai.cluster.plugins.module_utils.common.deadline import poll_until
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Failure
from ansible_collections.bai.cluster.plugins.module_utils.common.ports import parse_port_range
from ansible_collections.bai.cluster.plugins.module_utils.network.appproxy import (
    ROUTE_SUFFIX,
    TOKEN_PARAM,
    check_session,
    listening_ports,
    parse_route,
    plan_route,
    render_route,
    route_key,
)

PROC_NET = ("/proc/net/tcp", "/proc/net/tcp6")


def read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def listening() -> set[int]:
    ports: set[int] = set()
    for path in PROC_NET:
        ports |= listening_ports(read(path) or "")
    return ports


class Proxy:
    """The route files, HAProxy's validation and its service."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.p = module.params
        self.dir = self.p["routes_dir"]

    def path(self, key: str) -> str:
        return os.path.join(self.dir, key + ROUTE_SUFFIX)

    def routes(self) -> dict[str, dict]:
        """Every route file's header, by file stem (files of others are skipped)."""
        found = {}
        for name in sorted(os.listdir(self.dir)):
            if name.startswith(".") or not name.endswith(ROUTE_SUFFIX):
                continue
            header = parse_route(read(os.path.join(self.dir, name)) or "")
            if header is not None:
                found[name[: -len(ROUTE_SUFFIX)]] = header
        return found

    def write(self, path: str, text: str) -> None:
        """Replace ``path`` at once; an app's route (it holds a secret) is root's only."""
        tmp = os.path.join(self.dir, f".{os.path.basename(path)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o600 if TOKEN_PARAM in text else 0o644)
        os.replace(tmp, path)

    def validate(self) -> str | None:
        """None when HAProxy accepts the whole configuration, else its complaint."""
        rc, out, err = self.module.run_command(
            [self.p["haproxy"], "-c", "-f", self.p["config"], "-f", self.dir]
        )
        if rc == 0:
            return None
        lines = (err or out).strip().splitlines()
        alerts = [line for line in lines if "[ALERT]" in line]
        return " | ".join(alerts or lines)

    def reload(self) -> None:
        service = self.p["service"]
        rc = self.module.run_command(["service", service, "status"])[0]
        action = "reload" if rc == 0 else "start"
        rc, out, err = self.module.run_command(["service", service, action])
        if rc != 0:
            raise Failure(
                f"service {service} {action} failed (rc {rc}): {(err or out).strip()}; "
                f"check the proxy with: haproxy -c -f {self.p['config']} -f {self.dir}"
            )

    def wait(self, port: int, open_: bool) -> None:
        poll_until(
            lambda: (port in listening()) == open_,
            self.p["wait_timeout"],
            lambda: Failure(
                f"HAProxy did not {'open' if open_ else 'close'} port {port} within "
                f"{self.p['wait_timeout']}s after the reload; check the proxy's log and "
                f"who else listens there (ss -ltnp)"
            ),
        )

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the routes' lock (not in check mode, which writes nothing)."""
        if self.module.check_mode:
            yield
            return
        with open(os.path.join(self.dir, ".lock"), "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    # --- states -----------------------------------------------------------------------
    def present(self) -> dict:
        p = self.p
        session = check_session(p["session"])
        port_range = parse_port_range(p["port_range"], "port_range")
        backend = p["backend_host"] or first_in_zone(
            read_addresses(p["backend_addresses"]), p["backend_network"]
        )
        if not backend:
            raise Failure(
                f"session {session}: no backend address: none of the agent's addresses "
                f"({len(p['backend_addresses'])} given) lies in backend_network "
                f"{p['backend_network']}; set backend_host, or check bai_zone_cidrs.compute"
            )
        if p["backend_port"] is None:
            raise Failure(f"session {session}: backend_port (main1's published port) is required")
        with self.locked():
            return self._present(session, port_range, backend)

    def _present(self, session: str, port_range: tuple[int, int], backend: str) -> dict:
        p = self.p
        path = self.path(route_key(session, p["app"]))
        route = plan_route(
            self.routes(),
            session=session,
            session_id=p["session_id"],
            backend_host=backend,
            backend_port=p["backend_port"],
            port_range=port_range,
            listening=listening(),
            bind_address=p["bind_address"],
            target_host=p["target_host"],
            target_port=p["target_port"],
            app=p["app"],
            new_secret=secrets.token_urlsafe(32),
            tls_cert=p["tls_cert"],
            url_path=p["url_path"],
        )
        before = read(path)
        after = render_route(route)
        result = {
            "port": route["port"],
            "route": route,
            "path": path,
            "reloaded": False,
            "changed": before != after,
        }
        if self.module._diff and not p["app"]:  # an app's file holds its secret
            result["diff"] = {
                "before": before or "",
                "after": after,
                "before_header": path,
                "after_header": path,
            }
        up = route["port"] in listening()
        if self.module.check_mode:
            result["changed"] = result["changed"] or not up
            return result
        if before != after:
            self.write(path, after)
            problem = self.validate()
            if problem:
                if before is None:
                    os.unlink(path)
                else:
                    self.write(path, before)
                raise Failure(
                    f"HAProxy refuses the route of session {session} ({problem}); the "
                    f"previous configuration was kept"
                )
        if before != after or not up:
            self.reload()
            self.wait(route["port"], True)
            result.update(reloaded=True, changed=True)
        return result

    def absent(self) -> dict:
        session = check_session(self.p["session"])
        with self.locked():
            return self._absent(session)

    def _absent(self, session: str) -> dict:
        """Remove the session's route (with O(app), that app's; without, every route of
        the session: its sshd's and its apps')."""
        app = self.p["app"]
        path = self.path(route_key(session, app))
        keys = [route_key(session, app)]
        if not app:
            keys += [
                key
                for key, header in self.routes().items()
                if key.startswith(session + ".") and header.get("session") == session
            ]
        texts = {key: read(self.path(key)) for key in keys}
        found = {key: text for key, text in texts.items() if text is not None}
        headers = {key: parse_route(text) for key, text in found.items()}
        own = headers.get(keys[0])
        result = {
            "port": own["port"] if own else None,
            "path": path,
            "removed": sorted(self.path(key) for key in found),
            "reloaded": False,
            "changed": bool(found),
        }
        before = found.get(keys[0])
        if self.module._diff and before is not None and not app:
            result["diff"] = {"before": before, "after": "", "before_header": path}
        if not found or self.module.check_mode:
            return result
        for key in found:
            os.unlink(self.path(key))
        rc = self.module.run_command(["service", self.p["service"], "status"])[0]
        if rc == 0:
            self.reload()
            result["reloaded"] = True
            for header in headers.values():
                if header:
                    self.wait(header["port"], False)
        return result


def public_address(module: Any) -> str | None:
    if not module.params["public_network"]:
        return None
    rc, out, _err = module.run_command(["ip", "-o", "-4", "addr", "show"])
    return first_in_zone(read_addresses(out), module.params["public_network"]) if rc == 0 else None


def app_url(route: dict, host: str | None, path: str) -> str:
    """The link that opens an app: its route's port on ``host`` (the proxy's public
    address), ``path``, and the route's secret as the one query parameter."""
    where = host or "APPPROXY"
    path = "/" + path.lstrip("/")
    return f"https://{where}:{route['port']}{path}?{TOKEN_PARAM}={route['secret']}"
