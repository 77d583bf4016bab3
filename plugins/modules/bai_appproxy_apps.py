#!/usr/bin/python
"""Ansible module bai_appproxy_apps: the app routes an app proxy holds, and the count of
app starts it was told of."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bai_appproxy_apps
short_description: Read the app proxy's app routes and app start counts, or count a start
description:
  - Runs on the app proxy host (usually with C(delegate_to); docs/apps.md). Reads the app
    routes of O(routes_dir) (the files C(bai.cluster.bai_appproxy_route) writes, one per
    session and app) from their headers, without their secrets, and the count of app
    starts and failed starts kept beside them in C(.app-starts.json), for
    C(bai-cluster metrics) (playbooks/metrics.yml).
  - With O(links) and O(session), each of that session's routes also carries its link,
    with the route's secret (C(bai_token)) and the path its route file records. A link is
    a credential, so register such a task with C(no_log) (playbooks/session_app.yml lists
    a session's apps with them, for its owner).
  - With O(record_app) and O(record_event), one more start (C(started)) or failed start
    (C(failed)) of that app is counted (playbooks/session_app.yml, after it opened an app),
    under the routes' lock. Nothing else is ever written.
version_added: "1.1.0"
author: bai-cluster developers (@bai-cluster)
options:
  routes_dir:
    description: Folder of the route files (the C(bai.cluster.appproxy) role creates it).
    type: path
    default: /etc/haproxy/routes.d
  session:
    description: Only this session's app routes (all sessions' without it).
    type: str
  links:
    description: With O(session), give each route its link (with its secret) as C(url).
    type: bool
    default: false
  public_network:
    description:
      - The public zone's CIDR; the app proxy's address in it is the links' host, and
        RV(public_address).
    type: str
  record_app:
    description: Count one O(record_event) of this app.
    type: str
  record_event:
    description: What to count for O(record_app) - its start, or a failed start.
    type: str
    choices: [started, failed]
attributes:
  check_mode:
    support: full
    description: Reads as usual; a count that would be recorded is reported, not written.
  diff_mode:
    support: none
    description: Returns no diff.
  idempotent:
    support: partial
    description: Reading changes nothing; each count recorded is one more (changed true).
extends_documentation_fragment:
  - bai.cluster.attributes
requirements:
  - The C(bai.cluster.appproxy) role on the app proxy host
"""

EXAMPLES = r"""
- name: Read the app routes and the app start counts (metrics)
  bai.cluster.bai_appproxy_apps:
  delegate_to: appproxy
  register: proxy_apps

- name: Count a start of jupyter
  bai.cluster.bai_appproxy_apps:
    record_app: jupyter
    record_event: started
  delegate_to: appproxy
"""

RETURN = r"""
routes:
  description:
    - The app routes (of O(session) when given), sorted - C(session), C(session_id),
      C(app), C(port), C(backend_host), C(backend_port); with O(links) also C(url), the
      link with its secret.
  returned: always
  type: list
  elements: dict
  sample: [{session: train, app: jupyter, port: 10206, backend_host: 10.210.3.21,
            backend_port: 30012}]
public_address:
  description: The app proxy's address in O(public_network) (null without it, or when it has none).
  returned: always
  type: str
  sample: 10.210.1.12
counts:
  description: App starts and failed starts counted on this host, by app (after this run).
  returned: always
  type: dict
  sample: {jupyter: {started: 4, failed: 1}}
"""

import os

from ansible.module_utils.basic import AnsibleModule

# First: the payload's other imports compile once (see its docstring).
# pylint: disable-next=unused-import
from ansible_collections.bai.cluster.plugins.module_utils.common import compile_once  # noqa: F401

# isort: split
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.network import appproxy_apps
from ansible_collections.bai.cluster.plugins.module_utils.network.appproxy_routes import (
    Proxy,
    app_url,
    public_address,
    read,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "routes_dir": {"type": "path", "default": "/etc/haproxy/routes.d"},
            "session": {"type": "str"},
            "links": {"type": "bool", "default": False},
            "public_network": {"type": "str"},
            "record_app": {"type": "str"},
            "record_event": {"type": "str", "choices": list(appproxy_apps.EVENTS)},
        },
        required_together=[("record_app", "record_event")],
        supports_check_mode=True,
    )
    p = module.params
    if p["links"] and not p["session"]:
        module.fail_json(msg="links: true needs session (links are given for one session only)")
    proxy = Proxy(module)
    if not os.path.isdir(proxy.dir):
        module.fail_json(
            msg=f"{proxy.dir} does not exist on this host: converge the app proxy first "
            f"(ansible-playbook site.yml --tags appproxy)"
        )
    counts_path = os.path.join(proxy.dir, appproxy_apps.COUNTS_FILE)
    changed = False
    try:
        if p["record_app"]:
            with proxy.locked():
                counts = appproxy_apps.record(
                    appproxy_apps.read_counts(read(counts_path)), p["record_app"], p["record_event"]
                )
                if not module.check_mode:
                    proxy.write(counts_path, appproxy_apps.render_counts(counts))
            changed = True
        else:
            counts = appproxy_apps.read_counts(read(counts_path))
        routes = proxy.routes()
        views = appproxy_apps.route_views(routes, p["session"])
    except (SpecError, OSError) as exc:
        module.fail_json(msg=str(exc))
    host = public_address(module)
    if p["links"]:
        headers = {(h.get("session"), h.get("app")): h for h in routes.values()}
        for view in views:
            header = headers[(view["session"], view["app"])]
            view["url"] = app_url(header, host, str(header.get("url_path") or "/"))
    module.exit_json(changed=changed, routes=views, counts=counts, public_address=host)


if __name__ == "__main__":
    main()
