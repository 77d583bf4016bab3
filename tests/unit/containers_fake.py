"""What the tests of bai_session_containers share
(plugins/modules/test_module_session_containers.py and the tests that make a session's
containers first): the agent, its keys and settings, a plan of the real planner, the
module's arguments, and the module run against tests/unit/docker_fake.py's engine."""

from __future__ import annotations

from ansible_collections.bai.cluster.plugins.module_utils.containers import session_containers
from ansible_collections.bai.cluster.plugins.module_utils.gpu.common import VENDOR_NONE
from ansible_collections.bai.cluster.plugins.module_utils.gpu.facts import gpu_facts
from ansible_collections.bai.cluster.plugins.module_utils.hosts import agent_settings
from ansible_collections.bai.cluster.plugins.module_utils.network import isolation
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import Agent
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.plan import plan_session
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    normalize_spec,
)
from ansible_collections.bai.cluster.plugins.modules import (
    bai_session_containers,
)
from docker_fake import GI, run_module

AGENT = "agent1"


# Any four strings: the module copies them, it does not read them.
KEYPAIR = {
    "private_key": "user private key\n",
    "public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIUser bai-session",
    "host_private_key": "host private key\n",
    "host_public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHost bai-session",
}


# What gpu_facts.detect returns on a host without GPUs (its own constructor, same shape).
NO_GPU = gpu_facts(VENDOR_NONE, extra={"device_nodes": [], "pci_devices": [], "tool": None})


HOST = {
    # The isolation table is in place (test_isolation.py covers the refusal without it).
    (isolation, "table_state"): lambda host: {"loaded": True, "marker": None, "problem": None},
    (session_containers, "detect"): lambda probe: NO_GPU,
    (session_containers, "rdma_devices"): lambda: [],
    (session_containers, "limits_ceiling"): lambda: None,
}


def plan_for(name="s1", size=2, cpu=2, mem="2g", agents=None, **raw):
    """What bai_session_plan gives the playbook for ``name`` on an empty agent1 (8 CPUs,
    16 GiB), or on ``agents``: the plan, with its ``spec`` as the module reports it."""
    spec = normalize_spec(
        {"name": name, "size": size, "resources": {"cpu": cpu, "mem": mem}, **raw}
    )
    plan = plan_session(spec, agents or [Agent(AGENT, "default", 8, 16 * GI, 0)])
    return plan.answering(spec, read=None, kept=[], unavailable=[]).to_dict()


def args_for(plan, tmp_path, data_root, **override):
    """The module's arguments as session_make.yml passes them for a single-agent session
    (settings: the agent's host variables through bai_agent_settings)."""
    hostvars = {"bai_data_roots": [str(data_root)]}
    args = {
        "session": plan["summary"]["name"],
        "session_id": plan["session_id"],
        "agent": AGENT,
        "settings": agent_settings.from_hostvars(hostvars, {"all": [AGENT]}),
        "ledger_ids": [],
        "kernels": plan["kernels"],
        "mode": plan["mode"],
        "network": plan["network"]["name"],
        "env": plan["spec"]["env"],
        "mounts": plan["spec"]["mounts"],
        "keypair": KEYPAIR,
        "authorized_keys": [],
        "ssh_timeout": 5,
        "network_spec": {"driver": "bridge", "labels": plan["network"]["labels"]},
        "mesh_check": True,
        "lock_dir": str(tmp_path / "locks"),
        "state_dir": str(tmp_path / "state"),
    }
    return {**args, **override}


def run(args, engine, **kwargs):
    return run_module(bai_session_containers, args, engine, patches=HOST, **kwargs)


def container_names(engine, session="s1"):
    return [c.name for c in engine.session_containers(session)]
