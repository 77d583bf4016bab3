#!/usr/bin/python
"""Ansible module bai_appproxy_route: a session's routes on the app proxy (HAProxy): a TCP
route to main1's sshd, and an HTTPS route per app."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bai_appproxy_route
short_description: Add or remove a session's routes on the app proxy (HAProxy)
description:
  - Runs on the app proxy host (usually with C(delegate_to)). One route per session, from
    a user-facing port on the app proxy to main1's published sshd port at the agent's
    compute address. Each route is one file, C(<routes_dir>/<session>.cfg) (a TCP
    C(listen) section), loaded by HAProxy with C(-f <routes_dir>). The files are the only
    state; a header line in each records the session (O(session), also the file's name,
    and O(session_id)), its port and its backend.
  - O(state=present) keeps the session's port while it lies in O(port_range) (a route is
    stable for its session, even when its backend changes); a new route gets the lowest
    port of the range that no other route uses and nothing else listens on. The whole
    configuration is validated (C(haproxy -c)) before HAProxy reloads; an invalid result
    puts the previous file back and fails. Then it waits until HAProxy listens on the port.
  - With O(app), the route is that app's (one per session and app, file
    C(<routes_dir>/<session>.<app>.cfg), mode 0600) - HTTPS with O(tls_cert) on the user's
    side, HTTP to main1's published app port (WebSockets pass). Only a request with the
    route's own secret passes - as the link's C(bai_token) query parameter, which HAProxy
    answers with a redirect to the same path without it and a cookie
    C(bai_route_<port>) (Secure, HttpOnly, SameSite=Lax) scoped to the route, or with that
    cookie; anything else gets 403 and reaches nothing. The secret is made on the app
    proxy host, kept while the session id stays (a rerun gives the same link) and new for
    a new session of the same name. HAProxy logs the path only, never the token.
  - O(state=absent) removes the session's route file (without O(app), every route of the
    session - its sshd's and its apps'; with O(app), that app's), reloads HAProxy and waits
    until the ports are closed.
  - Allocation, write, validation and reload hold a lock (C(<routes_dir>/.lock)), so
    sessions created at the same time never get the same port.
  - HAProxy is reloaded through its init script or unit (C(service NAME reload), or
    C(start) when it is not running), so a route also brings a stopped proxy back.
version_added: "0.1.0"
author: bai-cluster developers (@bai-cluster)
options:
  backend_host:
    description:
      - Address HAProxy connects to (the agent that runs main1, on the compute network).
      - With O(state=present), either this or O(backend_addresses) with O(backend_network).
    type: str
  backend_addresses:
    description:
      - The agent's addresses (C(ip -o -4 addr show) lines or plain addresses); the first
        one inside O(backend_network) becomes the backend. Ignored when O(backend_host) is set.
    type: list
    elements: str
    default: []
  backend_network:
    description: The compute network's CIDR, to pick the backend from O(backend_addresses).
    type: str
  backend_port:
    description:
      - The agent's host port that main1's sshd (2200/tcp) is published on.
      - Required with O(state=present).
    type: int
  app:
    description:
      - An app's route (docs/apps.md) instead of the sshd's; its name (a-z, 0-9, '-').
      - O(backend_port) is then main1's published port of the app.
    type: str
  tls_cert:
    description:
      - HAProxy's certificate file (key, certificate and chain in one PEM) for an app's
        route (the C(bai.cluster.cluster_ca) role issues it).
    type: path
    default: /etc/haproxy/certs/appproxy.pem
  url_path:
    description: The app's path, for RV(url) (JupyterLab's is C(/lab)).
    type: str
    default: /
  target_host:
    description: The container the route leads to (HAProxy's server name).
    type: str
    default: main1
  target_port:
    description: The port inside the container (recorded in the route file).
    type: int
    default: 2200
  port_range:
    description: User-facing ports the routes are allocated from (FIRST-LAST).
    type: str
    default: 10205-10300
  bind_address:
    description: Address the user-facing port binds to; empty binds every IPv4 address.
    type: str
    default: ""
  public_network:
    description:
      - The public zone's CIDR; the app proxy's address in it is returned as RV(public_address)
        (what users connect to).
    type: str
  routes_dir:
    description:
      - Folder of the route files (must exist; the C(bai.cluster.appproxy) role creates it).
    type: path
    default: /etc/haproxy/routes.d
  config:
    description: HAProxy's main configuration file, validated together with O(routes_dir).
    type: path
    default: /etc/haproxy/haproxy.cfg
  haproxy:
    description: The HAProxy binary (for C(haproxy -c)).
    type: path
    default: /usr/sbin/haproxy
  service:
    description: HAProxy's service name (C(service NAME status|reload|start)).
    type: str
    default: haproxy
  wait_timeout:
    description: Seconds to wait for HAProxy to open (or close) the port after a reload.
    type: int
    default: 10
attributes:
  check_mode:
    support: full
    description: Reports the port the route would get and whether anything would change.
  diff_mode:
    support: full
    description: Shows the route file before and after.
  idempotent:
    support: full
    description:
      - A route whose file is unchanged and whose port HAProxy already listens on is left
        alone, so a second run reports no change.
extends_documentation_fragment:
  - bai.cluster.attributes
  - bai.cluster.session
requirements:
  - HAProxy on the app proxy host (the C(bai.cluster.appproxy) role installs it)
"""

EXAMPLES = r"""
- name: Route a user-facing port to main1's published sshd
  bai.cluster.bai_appproxy_route:
    session: train
    session_id: "{{ plan.session_id }}"
    backend_addresses: "{{ agent_ips.stdout_lines }}"
    backend_network: 10.210.3.0/24
    backend_port: 30001
    public_network: 10.210.1.0/24
  delegate_to: appproxy
  register: route

- name: Remove the route
  bai.cluster.bai_appproxy_route:
    session: train
    state: absent
  delegate_to: appproxy
"""

RETURN = r"""
port:
  description:
    - The session's user-facing port (with O(state=absent) the removed one; null when there
      was none).
  returned: always
  type: int
  sample: 10205
route:
  description:
    - The route as recorded in its file - C(session), C(session_id) (when O(session_id) is
      set), C(port), C(backend_host), C(backend_port), C(target_host), C(target_port) (and
      C(bind_address) when set).
  returned: state=present
  type: dict
  sample: {session: train, session_id: 3f6c1c9e-5b0a-4d6e-9a51-2f1e7c0d8b44, port: 10205,
           backend_host: 10.210.3.11, backend_port: 30001, target_host: main1,
           target_port: 2200}
path:
  description: The route file.
  returned: always
  type: str
  sample: /etc/haproxy/routes.d/train.cfg
public_address:
  description: The app proxy's address in O(public_network) (null without it, or when it has none).
  returned: always
  type: str
  sample: 10.210.1.5
url:
  description:
    - With O(app) and O(state=present), the link that opens the app - its route's secret
      in the C(bai_token) query parameter. A secret - register the task with C(no_log).
  returned: state=present with app
  type: str
  sample: https://10.210.1.12:10206/lab?bai_token=mJ1...
removed:
  description: With O(state=absent), the route files removed.
  returned: state=absent
  type: list
  elements: str
reloaded:
  description: Whether HAProxy was reloaded (or started).
  returned: always
  type: bool
diff:
  description:
    - The route file before and after, with C(--diff); with O(state=absent) only when
      there was a route to remove.
  returned: in diff mode
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

# First: the payload's other imports compile once (see its docstring).
# pylint: disable-next=unused-import
from ansible_collections.bai.cluster.plugins.module_utils.common import compile_once  # noqa: F401

# isort: split
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Failure, SpecError
from ansible_collections.bai.cluster.plugins.module_utils.common.ports import (
    DEFAULT_APPPROXY_PORT_RANGE,
)
from ansible_collections.bai.cluster.plugins.module_utils.network.appproxy_routes import (
    Proxy,
    app_url,
    public_address,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.naming import (
    SESSION_ARGUMENT_SPEC,
)

ARGUMENT_SPEC = {
    **SESSION_ARGUMENT_SPEC,
    "backend_host": {"type": "str"},
    "backend_addresses": {"type": "list", "elements": "str", "default": []},
    "backend_network": {"type": "str"},
    "backend_port": {"type": "int"},
    "app": {"type": "str"},
    "tls_cert": {"type": "path", "default": "/etc/haproxy/certs/appproxy.pem"},
    "url_path": {"type": "str", "default": "/"},
    "target_host": {"type": "str", "default": "main1"},
    "target_port": {"type": "int", "default": 2200},
    "port_range": {"type": "str", "default": DEFAULT_APPPROXY_PORT_RANGE},
    "bind_address": {"type": "str", "default": ""},
    "public_network": {"type": "str"},
    "routes_dir": {"type": "path", "default": "/etc/haproxy/routes.d"},
    "config": {"type": "path", "default": "/etc/haproxy/haproxy.cfg"},
    "haproxy": {"type": "path", "default": "/usr/sbin/haproxy"},
    "service": {"type": "str", "default": "haproxy"},
    "wait_timeout": {"type": "int", "default": 10},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    proxy = Proxy(module)
    try:
        if not os.path.isdir(proxy.dir):
            raise Failure(
                f"{proxy.dir} does not exist on this host: converge the app proxy first "
                f"(ansible-playbook site.yml --tags appproxy)"
            )
        result = proxy.present() if module.params["state"] == "present" else proxy.absent()
        result["public_address"] = public_address(module)
        route = result.get("route") or {}
        if route.get("app"):
            result["url"] = app_url(route, result["public_address"], module.params["url_path"])
            result["route"] = {k: v for k, v in route.items() if k != "secret"}
    except (Failure, SpecError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
