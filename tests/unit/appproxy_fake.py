"""bai_appproxy_route run as a module against a host in memory (FakeHost: the routes
folder, haproxy's answers), for its tests and the app tests."""

from __future__ import annotations

import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bai.cluster.plugins.module_utils.network import appproxy_routes
from ansible_collections.bai.cluster.plugins.module_utils.network.appproxy import parse_route
from ansible_collections.bai.cluster.plugins.modules import bai_appproxy_route
from docker_fake import FakeEngine, run_module


class FakeHost:
    """The app proxy host: HAProxy listens on the ports of the route files it last loaded."""

    def __init__(self, routes_dir: str, *, running: bool = True, valid: bool = True) -> None:
        self.routes_dir = routes_dir
        self.running = running
        self.valid = valid
        self.listening: set[int] = set()
        self.commands: list[list[str]] = []

    def load(self) -> None:
        self.listening = set()
        for name in os.listdir(self.routes_dir):
            if name.endswith(".cfg"):
                with open(os.path.join(self.routes_dir, name), encoding="utf-8") as handle:
                    self.listening.add(parse_route(handle.read())["port"])

    def run_command(self, args: list[str], **_kw: Any) -> tuple:
        self.commands.append(list(args))
        if args[:1] == ["service"]:
            action = args[2]
            if action == "status":
                return (0 if self.running else 3), "", ""
            self.running = True
            self.load()
            return 0, "", ""
        if args[1:2] == ["-c"]:
            return (
                (0, "Configuration file is valid", "")
                if self.valid
                else (
                    1,
                    "",
                    "[NOTICE] x\n[ALERT] parsing [routes.d/s1.cfg:5]: bad bind\n",
                )
            )
        if args[:1] == ["ip"]:
            return 0, "2: eth0    inet 10.210.1.5/24 brd 10.210.1.255 scope global eth0\n", ""
        raise AssertionError(f"unexpected command {args}")


def run(host: FakeHost, *, check_mode: bool = False, **args: Any) -> dict[str, Any]:
    params = {"routes_dir": host.routes_dir, "wait_timeout": 0, **args}
    patches = {
        (AnsibleModule, "run_command"): host.run_command,
        (appproxy_routes, "listening"): lambda: set(host.listening),
    }
    return run_module(
        bai_appproxy_route, params, FakeEngine(), check_mode=check_mode, patches=patches
    )


PRESENT = {
    "session": "s1",
    "session_id": "id-1",
    "backend_addresses": ["3: eth1    inet 10.210.3.11/24 scope global eth1"],
    "backend_network": "10.210.3.0/24",
    "backend_port": 30001,
    "public_network": "10.210.1.0/24",
}
