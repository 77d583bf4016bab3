"""roles/cluster_defaults holds the address ranges the roles share; the session modules
keep the session pool in Python (plugins/module_utils/network/subnets.py). The two must agree,
and no role may carry its own copy of a pool."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import yaml
from ansible_collections.bai.cluster.plugins.module_utils.network.subnets import DEFAULT_SUBNET_POOL

ROOT = Path(__file__).resolve().parents[5]
DEFAULTS = yaml.safe_load((ROOT / "roles/cluster_defaults/defaults/main.yml").read_text())


def test_session_pool_matches_the_modules_default():
    assert DEFAULTS["bai_session_subnet_pool"] == DEFAULT_SUBNET_POOL


def test_pools_do_not_overlap():
    pools = [
        ipaddress.ip_network(DEFAULTS["bai_session_subnet_pool"]),
        *(ipaddress.ip_network(p["base"]) for p in DEFAULTS["docker_engine_address_pools"]),
        *(ipaddress.ip_network(p) for p in DEFAULTS["docker_swarm_default_addr_pool"]),
    ]
    for i, one in enumerate(pools):
        for other in pools[i + 1 :]:
            assert not one.overlaps(other), (one, other)


def test_no_role_repeats_a_pool():
    pools = {
        DEFAULTS["bai_session_subnet_pool"],
        *(p["base"] for p in DEFAULTS["docker_engine_address_pools"]),
        *DEFAULTS["docker_swarm_default_addr_pool"],
    }
    copies = [
        f"{path.relative_to(ROOT)}: {pool}"
        for path in sorted(ROOT.glob("roles/*/*/*.yml"))
        if path.parts[-3] != "cluster_defaults"
        and path.parent.name in ("defaults", "vars", "tasks")
        for pool in pools
        if pool in path.read_text()
    ]
    assert copies == []


def test_roles_using_the_pools_depend_on_cluster_defaults():
    for role in ("docker_engine", "docker_swarm", "agent_network"):
        meta = yaml.safe_load((ROOT / "roles" / role / "meta/main.yml").read_text())
        assert {"role": "bai.cluster.cluster_defaults"} in meta["dependencies"], role
