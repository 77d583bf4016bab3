"""Property tests: invariants that must hold for every size, env and agent layout."""

import json

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Pending
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import (
    Agent,
    PlacementRequest,
    place,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.env import cluster_env
from ansible_collections.bai.cluster.plugins.module_utils.session.model import Resources
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    expand_kernels,
    normalize_spec,
    spec_hash,
)
from hypothesis import given, settings
from hypothesis import strategies as st

GI = 1024**3
FAST = settings(max_examples=60, deadline=None)


def env_of_all(size):
    kernels = expand_kernels(normalize_spec({"name": "p", "size": size}))
    return [
        cluster_env(
            kernels,
            k,
            session_name="p",
            session_id="sid",
            kernel_id=f"k{k.rank}",
            mode="single-node",
            user_env={},
            image_env={},
        )
        for k in kernels
    ]


@FAST
@given(st.integers(min_value=1, max_value=64))
def test_hosts_and_ranks_are_consistent(size):
    envs = env_of_all(size)
    hosts = envs[0]["BACKENDAI_CLUSTER_HOSTS"].split(",")
    assert len(hosts) == size == len(set(hosts))
    assert hosts[0] == "main1"
    assert all(e["BACKENDAI_CLUSTER_HOSTS"] == ",".join(hosts) for e in envs)
    ranks = sorted(int(e["BACKENDAI_CLUSTER_LOCAL_RANK"]) for e in envs)
    assert ranks == list(range(size))
    for env in envs:
        rank = int(env["BACKENDAI_CLUSTER_LOCAL_RANK"])
        assert hosts[rank] == env["BACKENDAI_CLUSTER_HOST"]
        assert env["BACKENDAI_CLUSTER_SIZE"] == str(size)
        assert ("MASTER_ADDR" in env) == (size > 1)
        if size > 1:
            tf = json.loads(env["TF_CONFIG"])
            assert tf["task"]["index"] == rank
            assert tf["cluster"]["worker"][rank] == f"{hosts[rank]}:{29500 + rank}"


env_keys = st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True).filter(
    lambda k: not k.startswith("BACKENDAI_")
)
env_values = st.text(
    alphabet=st.characters(blacklist_characters="\0\n\r", codec="utf-8"), max_size=10
)


@FAST
@given(st.dictionaries(env_keys, env_values, max_size=8), st.randoms())
def test_spec_hash_ignores_env_key_order(env, rnd):
    items = list(env.items())
    rnd.shuffle(items)
    a = normalize_spec({"name": "p", "size": 2, "env": env})
    b = normalize_spec({"name": "p", "size": 2, "env": dict(items)})
    assert spec_hash(a) == spec_hash(b)


cpus = st.sampled_from([0.25, 0.5, 1, 1.5, 2, 4])
agent_st = st.builds(
    lambda cpu, used_frac, mem_g, gpu: (cpu, round(cpu * used_frac, 2), mem_g, gpu),
    st.sampled_from([1, 2, 4, 8, 16]),
    st.sampled_from([0, 0.25, 0.5, 1]),
    st.integers(min_value=1, max_value=32),
    st.integers(min_value=0, max_value=4),
)


def how_many_fit(request: Resources, agent: Agent, limit: int) -> int:
    """How many containers of ``request`` the agent's free capacity takes (up to limit),
    counted one by one with the same arithmetic placement uses."""
    count, load = 0, Resources(0.0, 0, 0)
    while count < limit and (load + request).fits_in(agent.free):
        load, count = load + request, count + 1
    return count


@FAST
@given(
    size=st.integers(min_value=1, max_value=16),
    cpu=cpus,
    mem_g=st.integers(min_value=1, max_value=8),
    gpu=st.integers(min_value=0, max_value=2),
    raw_agents=st.lists(agent_st, min_size=1, max_size=5),
    mode=st.sampled_from(["single-node", "multi-node"]),
)
def test_placement_respects_free_capacity(size, cpu, mem_g, gpu, raw_agents, mode):
    spec = normalize_spec(
        {
            "name": "p",
            "size": size,
            "resources": {"cpu": cpu, "mem": mem_g * GI, "gpu": gpu},
        }
    )
    kernels = expand_kernels(spec)
    agents = [
        Agent(f"agent{i}", "default", c, m * GI, g, used_cpu=u)
        for i, (c, u, m, g) in enumerate(raw_agents)
    ]
    try:
        got = place(PlacementRequest(kernels, mode, "default"), agents)
    except Pending as err:
        assert str(err).startswith("PENDING: ")
        # Only when nothing fits: the kernels are identical, so a placement exists exactly
        # when one agent takes all of them (single-node) or the agents' counts add up.
        counts = [how_many_fit(kernels[0].resources, agent, size) for agent in agents]
        if mode == "single-node":
            assert max(counts) < size, (counts, str(err))
        else:
            assert sum(counts) < size, (counts, str(err))
        return
    assert list(got.assignment) == [k.hostname for k in kernels]
    by_name = {a.name: a for a in agents}
    for name in set(got.assignment.values()):
        load = Resources(0.0, 0, 0)
        for kernel in kernels:
            if got.assignment[kernel.hostname] == name:
                load = load + kernel.resources
        assert load.fits_in(by_name[name].free)
    assert got.mode == ("multi-node" if len(got.agents) > 1 else "single-node")
    if mode == "single-node":
        assert len(got.agents) == 1
