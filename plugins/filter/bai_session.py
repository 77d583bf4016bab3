"""Filters of the session playbooks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.ledger import reconcile_lines
from ansible_collections.bai.cluster.plugins.module_utils.mounts import DEFAULT_DATA_ROOT


def agents(names: Sequence[str], hostvars: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What the inventory declares for each agent, for bai_session_ledger's ``agents``:
    [{name, group, resources}] (``bai_resource_group``, default ``default``;
    ``bai_agent_resources``, default null). Read on the controller: no agent is reached."""
    out = []
    for name in names:
        host = hostvars[name]
        out.append(
            {
                "name": name,
                "group": host.get("bai_resource_group") or "default",
                "resources": host.get("bai_agent_resources"),
            }
        )
    return out


def data_roots(host: Mapping[str, Any]) -> Any:
    """One agent's data roots as its inventory declares them (docs/mounts.md):
    ``bai_data_roots``, else ``[bai_data_root]``, else ``["/srv/bai-data"]``. Not checked
    here: the session modules refuse a bad one with its name."""
    roots = host.get("bai_data_roots")
    if roots is None or roots == []:
        roots = [host.get("bai_data_root") or DEFAULT_DATA_ROOT]
    return [roots] if isinstance(roots, str) else list(roots)


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {
            "bai_session_agents": agents,
            "bai_data_roots": data_roots,
            "bai_reconcile_text": reconcile_lines,
        }
