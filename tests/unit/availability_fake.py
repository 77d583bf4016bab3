"""What the availability tests and those of a paused or down agent share: an agent's read,
the inventory's agents, bai_session_ledger's arguments over a file ledger, a pause
recorded in it, and one recorded on the agent itself."""

from __future__ import annotations

from ansible_collections.bai.cluster.plugins.modules import (
    bai_agent_availability,
)
from docker_fake import GI, FakeEngine, run_module


# --- placement through the ledger module ----------------------------------------------
def read(name, cpu=4, own=None):
    """A registered bai_agent_info result of an empty agent."""
    return {
        "agent": {
            "name": name,
            "id": f"id-{name}",
            "group": "default",
            "cpu": cpu,
            "mem": 8 * GI,
            "gpu": 0,
            "used_cpu": 0.0,
            "used_mem": 0,
            "used_gpu": 0,
            "gpu_devices": [],
            "gpu_in_use": [],
            "availability": own,
        },
        "containers": [],
        "images": {},
        "paths": {},
        "sessions": {},
        "read_at": 1000.0,
        "read_after": 999.0,
    }


AGENTS = [{"name": a, "group": "default", "resources": None} for a in ("a1", "a2")]


def ledger_args(path, name, size=1, mode="single-node", reads=None):
    return {
        "state": "reserved",
        "path": str(path),
        "spec": {"name": name, "size": size, "mode": mode, "resources": {"cpu": 2}},
        "agents": AGENTS,
        "agent_info": reads if reads is not None else [read("a1"), read("a2")],
    }


def pause_in_ledger(path, agent, availability="pause"):
    return run_module(
        bai_agent_availability,
        {
            "agent": agent,
            "identity": f"id-{agent}",
            "availability": availability,
            "reason": "upgrade",
            "by": "alice",
            "scope": "cluster",
            "path": str(path),
        },
        FakeEngine(),
    )


def on_the_agent(engine, tmp_path, availability, *, check_mode=False, **args):
    """bai_agent_availability run on agent1 itself (playbooks/agent_availability.yml,
    site.yml's hold): its record under ``tmp_path``, in the state and lock folders that
    containers_fake's bai_session_containers arguments name."""
    params = {
        "agent": "agent1",
        "availability": availability,
        "state_dir": str(tmp_path / "state"),
        "lock_dir": str(tmp_path / "locks"),
        **args,
    }
    return run_module(bai_agent_availability, params, engine, check_mode=check_mode)
