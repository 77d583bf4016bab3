"""plugins/filter/bai_agents.py: the preflight check of the agents' topology, and
plugins/filter/bai_swarm.py's node labels of it."""

from ansible_collections.bai.cluster.plugins.filter import bai_agents, bai_swarm


def test_a_complete_nested_topology_passes_and_a_wrong_one_names_the_agent():
    hostvars = {
        "a1": {"bai_topology": {"block": "b1", "rack": "r1"}},
        "a2": {"bai_topology": {"block": "b1", "rack": "r2"}},
        "a3": {"bai_topology": {"block": "b2", "rack": "r1"}},
    }
    levels = ["block", "rack"]
    assert bai_agents.topology_error(levels, ["a1", "a2"], hostvars) == ""
    # Rack r1 in two blocks: the second agent to say so is named.
    error = bai_agents.topology_error(levels, ["a1", "a2", "a3"], hostvars)
    assert error.startswith("a3: rack r1 is in block b2 here but in block b1"), error
    # An agent without its domain at every level.
    hostvars["a2"] = {"bai_topology": {"block": "b1"}}
    assert bai_agents.topology_error(levels, ["a2"], hostvars).startswith(
        "a2: bai_topology has no rack"
    )
    # No levels and no agent that declares one: no topology, nothing wrong.
    assert bai_agents.topology_error([], ["x"], {"x": {}}) == ""
    assert "bai_topology_error" in bai_agents.FilterModule().filters()


def test_each_level_becomes_a_swarm_node_label():
    labels = bai_swarm.FilterModule().filters()["bai_swarm_topology_labels"]
    assert labels({"block": "b1", "rack": "r3"}) == {
        "ai.backend.topology.block": "b1",
        "ai.backend.topology.rack": "r3",
    }
    assert labels(None) == {}
