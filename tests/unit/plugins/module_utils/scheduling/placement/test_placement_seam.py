"""The placement seam (module_utils/scheduling/placement/): a request built once, an
agent's read made an Agent in one place, and rules that narrow where a request goes. A
rule added the way docs/development.md says (a class, registered in rules.RULES) is
followed by every placement."""

from __future__ import annotations

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Pending, SpecError
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import (
    PlacementRequest,
    agent_from_read,
    place,
    rules,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.domain import (
    Domain,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.plan import plan_session
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    expand_kernels,
    normalize_spec,
)


def planned(*args, **kwargs):
    """The plan as the module gives it (SessionPlan.to_dict)."""
    return plan_session(*args, **kwargs).to_dict()


GI = 1024**3


def spec(size=2, mode="multi-node", cpu=2):
    return normalize_spec(
        {"name": "job", "size": size, "mode": mode, "resources": {"cpu": cpu, "mem": "1g"}}
    )


def read(name, rack, cpu=4):
    return {"name": name, "cpu": cpu, "mem": 8 * GI, "labels": {"rack": rack}}


class SameRack:
    """A rule as a new file would hold it: every member in one rack, the rack with the
    fewest agents first (the tightest that may fit)."""

    name = "same_rack"

    def narrow(self, request, domain):
        racks = {}
        for agent in domain.agents:
            racks.setdefault(agent.label("rack"), []).append(agent)
        ordered = sorted(racks.items(), key=lambda item: (len(item[1]), str(item[0])))
        return [Domain(str(rack), tuple(agents), domain.away) for rack, agents in ordered]


def test_a_request_is_checked_once_when_it_is_made():
    kernels = expand_kernels(spec())
    request = PlacementRequest.of(spec(), kernels)
    assert (request.mode, request.resource_group, len(request.kernels)) == (
        "multi-node",
        "default",
        2,
    )
    assert request.constraint("topology") is None
    with pytest.raises(SpecError, match="mode: got 'spread'"):
        PlacementRequest(tuple(kernels), "spread", "default")
    with pytest.raises(ValueError, match="at least one kernel"):
        PlacementRequest((), "single-node", "default")


def test_an_agent_read_becomes_an_agent_with_its_labels():
    agent = agent_from_read(
        {"name": "a1", "cpu": 8, "mem": GI, "gpu_devices": [1, 0], "labels": {"rack": "r1"}},
        "agents[0]",
    )
    assert (agent.group, agent.gpu, agent.devices, agent.label("rack")) == (
        "default",
        2,
        (0, 1),
        "r1",
    )
    assert agent.label("block") is None
    with pytest.raises(SpecError, match=r"agents\[3\] \(a2\): cpu, mem"):
        agent_from_read({"name": "a2", "cpu": "many"}, "agents[3]")
    with pytest.raises(SpecError, match=r"agents\[4\] \(a3\).*labels a mapping"):
        agent_from_read({"name": "a3", "labels": ["rack"]}, "agents[4]")
    with pytest.raises(SpecError, match=r"agents\[5\]: 'name' is required"):
        agent_from_read({"cpu": 1}, "agents[5]")


def test_the_resource_group_and_topology_rules_are_registered_in_that_order():
    assert [rule.name for rule in rules.RULES] == ["resource_group", "topology"]


def test_a_registered_rule_is_followed_by_every_placement(monkeypatch):
    agents = [agent_from_read(read(n, r), n) for n, r in (("a", "r1"), ("b", "r2"), ("c", "r2"))]
    request = PlacementRequest(tuple(expand_kernels(spec(size=3))), "multi-node", "default")
    # Without the rule the three members spread over all three agents.
    assert sorted(place(request, agents).agents) == ["a", "b", "c"]
    monkeypatch.setattr(rules, "RULES", (*rules.RULES, SameRack()))
    # r1 (one agent of 4 CPUs) cannot hold 3 x 2 CPUs; r2 (two agents) can.
    got = place(request, agents)
    assert sorted(got.agents) == ["b", "c"]
    # The plan a create makes follows it too.
    plan = planned(spec(size=3), agents)
    assert sorted(plan["agents"]) == ["b", "c"]
    # When no rack holds it, the PENDING says what each rack lacks.
    big = PlacementRequest(tuple(expand_kernels(spec(size=5))), "multi-node", "default")
    with pytest.raises(Pending, match="do not fit across the agents"):
        place(big, agents)
