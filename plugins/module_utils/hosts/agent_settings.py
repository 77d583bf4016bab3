"""An agent's session settings: the inventory variables that shape the containers made
on it, declared once.

``SETTINGS`` names each one three ways: the inventory variable an operator sets on the
agent (host or group vars), the key of bai_session_containers' ``settings`` option, and
its argument spec (type, choices, default) - the module validates the whole mapping with
it, so a wrong value fails before anything is made and a new setting is one line here
(plus its documentation). The session playbooks pass ``hostvars[agent] |
bai.cluster.bai_agent_settings(groups)``, the variables set on the agent.

    argument_spec()              the module's ``settings`` sub-options
    from_hostvars(host, groups)  one agent's settings from its host variables
    declared_data_roots(host)    one agent's data roots (also for roles/nfs_client)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.ports import (
    DEFAULT_CONTAINER_PORT_RANGE,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.mounts import DEFAULT_DATA_ROOT
from ansible_collections.bai.cluster.plugins.module_utils.session.security import (
    DEFAULT_CAPABILITIES,
    DEFAULT_NOFILE,
    DEFAULT_PIDS_LIMIT,
)

# (inventory variable, settings key, argument spec)
SETTINGS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("bai_agent_id", "agent_id", {"type": "str"}),
    ("bai_agent_resources", "resources", {"type": "dict"}),
    ("bai_data_roots", "data_roots", {"type": "list", "elements": "str"}),
    (
        "bai_container_port_range",
        "port_range",
        {"type": "str", "default": DEFAULT_CONTAINER_PORT_RANGE},
    ),
    ("bai_session_publish_address", "publish_address", {"type": "str"}),
    ("bai_zone_cidrs.compute", "publish_network", {"type": "str"}),
    (
        "bai_session_capabilities",
        "capabilities",
        {"type": "list", "elements": "str", "default": list(DEFAULT_CAPABILITIES)},
    ),
    ("bai_session_no_new_privileges", "no_new_privileges", {"type": "bool", "default": True}),
    ("bai_session_pids_limit", "pids_limit", {"type": "int", "default": DEFAULT_PIDS_LIMIT}),
    ("bai_session_memlock", "memlock", {"type": "int", "default": -1}),
    ("bai_session_nofile", "nofile", {"type": "int", "default": DEFAULT_NOFILE}),
    ("bai_session_rdma", "rdma", {"type": "bool", "default": True}),
    (
        "bai_session_restart_policy",
        "restart_policy",
        {"type": "str", "choices": ["no", "unless-stopped", "always"], "default": "unless-stopped"},
    ),
    (
        "bai_gpu_method",
        "gpu_method",
        {"type": "str", "choices": ["device_request", "cdi"], "default": "device_request"},
    ),
)
# Where main1's sshd is published on an agent with no compute zone when the inventory has
# no app proxy either (inventories/local): the loopback only.
LOOPBACK = "127.0.0.1"


def argument_spec() -> dict[str, dict[str, Any]]:
    """bai_session_containers' ``settings`` sub-options (fresh copies)."""
    spec = {key: {**option} for _variable, key, option in SETTINGS}
    spec["data_roots"]["default"] = [DEFAULT_DATA_ROOT]
    return spec


def from_hostvars(host: Mapping[str, Any], groups: Mapping[str, Any] | None = None) -> dict:
    """The settings of one agent from its host variables (``hostvars[agent]``): each
    variable of ``SETTINGS`` that is set, and the derived ones - the data roots
    (``bai_data_roots``, else ``[bai_data_root]``), the compute zone as the network to
    publish main1's sshd on, and the loopback when there is neither a compute zone nor
    an app proxy (``groups``: the inventory's groups)."""
    settings: dict[str, Any] = {}
    for variable, key, _option in SETTINGS:
        value = _lookup(host, variable)
        if value is not None:
            settings[key] = value
    settings["data_roots"] = declared_data_roots(host)
    unpublished = "publish_address" not in settings and "publish_network" not in settings
    if unpublished and not (groups or {}).get("appproxy"):
        settings["publish_address"] = LOOPBACK
    return settings


def declared_data_roots(host: Mapping[str, Any]) -> list[Any]:
    """One agent's data roots as its inventory declares them (docs/mounts.md):
    ``bai_data_roots``, else ``[bai_data_root]``, else ``["/srv/bai-data"]``. Not checked
    here: the session modules refuse a bad one with its name."""
    roots = host.get("bai_data_roots")
    if roots is None or roots == []:
        roots = [host.get("bai_data_root") or DEFAULT_DATA_ROOT]
    return [roots] if isinstance(roots, str) else list(roots)


def _lookup(host: Mapping[str, Any], variable: str) -> Any:
    """``host[a][b]`` for "a.b"; None when a part is missing."""
    value: Any = host
    for part in variable.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value
