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
