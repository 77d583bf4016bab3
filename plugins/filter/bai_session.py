"""Filters of the session playbooks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ansible_collections.bai.cluster.plugins.module_utils.containers import destroy
from ansible_collections.bai.cluster.plugins.module_utils.hosts.agent_settings import (
    declared_data_roots,
    from_hostvars,
)
from ansible_collections.bai.cluster.plugins.module_utils.jobs import attempts, ends, job
from ansible_collections.bai.cluster.plugins.module_utils.session import apps
from ansible_collections.bai.cluster.plugins.plugin_utils.filters import Filters, FilterTable
from ansible_collections.bai.cluster.plugins.plugin_utils.ledger_text import reconcile_lines
from ansible_collections.bai.cluster.plugins.plugin_utils.repair_outcome import (
    outcome,
    signal_outcome,
)


def agents(names: Sequence[str], hostvars: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What the inventory declares for each agent, for bai_session_ledger's ``agents``:
    [{name, group, resources, topology}] (``bai_resource_group``, default ``default``;
    ``bai_agent_resources``, default null; ``bai_topology``, its domain at each level of
    ``bai_topology_levels``, only when set). Read on the controller: no agent is reached."""
    out = []
    for name in names:
        host = hostvars[name]
        declared = {
            "name": name,
            "group": host.get("bai_resource_group") or "default",
            "resources": host.get("bai_agent_resources"),
        }
        if host.get("bai_topology"):
            declared["topology"] = _widest_first(host["bai_topology"], host)
        out.append(declared)
    return out


def _widest_first(topology: Any, host: Mapping[str, Any]) -> Any:
    """An agent's ``bai_topology`` in the order of ``bai_topology_levels`` (widest first:
    the order the ledger widens a preferred request in), its other keys after them."""
    if not isinstance(topology, Mapping):
        return topology
    levels = [lvl for lvl in host.get("bai_topology_levels") or () if lvl in topology]
    return {**{lvl: topology[lvl] for lvl in levels}, **topology}


def host_results(hosts: Sequence[str], hostvars: Mapping[str, Any], var: str) -> dict[str, Any]:
    """Host -> its variable ``var`` (a registered result), None where it has none: also a
    host that left the run before the play that registers it (it failed or did not
    answer in an earlier play: reconcile's read of an agent whose engine is down)."""
    out: dict[str, Any] = {}
    for host in hosts:
        try:
            out[host] = hostvars[host].get(var)
        except (KeyError, AttributeError):
            out[host] = None
    return out


def end_warnings(*args: Any) -> dict[str, Any]:
    """scheduling/steps/end_signals.py's warnings, imported when a drain needs it."""
    from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps import end_signals

    return end_signals.read_warnings(*args)


def rerun_plan(*args: Any) -> Any:
    """scheduling/steps/rerun.py's plan, imported when a create rereads its agents."""
    from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps import rerun

    return rerun.rerun_plan(*args)


class FilterModule(FilterTable):
    """Ansible entry point."""

    FILTERS: ClassVar[Filters] = {
        "bai_session_agents": agents,
        "bai_data_roots": declared_data_roots,
        "bai_agent_settings": from_hostvars,
        "bai_reconcile_text": reconcile_lines,
        "bai_destroy_targets": destroy.targets,
        "bai_destroy_outcome": destroy.outcome,
        "bai_host_results": host_results,
        "bai_destroy_text": destroy.text,
        "bai_destroy_failures": destroy.failures,
        "bai_repair_outcome": outcome,
        "bai_signal_outcome": signal_outcome,
        "bai_job_result": job.job_result,
        "bai_job_end": ends.toolkit_end,
        "bai_end_warnings": end_warnings,
        "bai_rerun_plan": rerun_plan,
        "bai_batch_ended": job.ended_sessions,
        "bai_logs_where": attempts.logs_where,
        "bai_app_where": apps.where,
        "bai_app_links": apps.with_links,
    }
