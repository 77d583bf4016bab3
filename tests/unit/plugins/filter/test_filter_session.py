"""plugins/filter/bai_session.py: what the session playbooks tell the ledger about agents."""

from ansible_collections.bai.cluster.plugins.filter import bai_session


def test_agents_carry_their_declaration_and_default_to_the_default_group():
    hostvars = {
        "a1": {"bai_resource_group": "gpu", "bai_agent_resources": {"cpu": 8, "gpu": 2}},
        "a2": {"ansible_host": "10.0.0.2"},
    }
    assert bai_session.agents(["a2", "a1"], hostvars) == [
        {"name": "a2", "group": "default", "resources": None},
        {"name": "a1", "group": "gpu", "resources": {"cpu": 8, "gpu": 2}},
    ]
    assert "bai_session_agents" in bai_session.FilterModule().filters()


def test_an_agent_s_topology_goes_to_the_ledger_only_when_it_has_one():
    hostvars = {"a1": {"bai_topology": {"block": "b1", "rack": "r1"}}, "a2": {}}
    got = bai_session.agents(["a1", "a2"], hostvars)
    assert got[0]["topology"] == {"block": "b1", "rack": "r1"}
    assert "topology" not in got[1]
