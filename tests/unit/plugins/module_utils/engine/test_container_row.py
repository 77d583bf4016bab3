"""ContainerRow: one session container as the engine lists it and an agent's read returns it."""

from __future__ import annotations

from ansible_collections.bai.cluster.plugins.module_utils.engine.container_row import (
    ContainerRow,
    Port,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_read import (
    AgentRead,
)


def test_a_json_row_becomes_a_row_with_its_ports_and_labels():
    row = ContainerRow.of(
        {
            "id": "abc",
            "name": "bai-s1-main1",
            "agent": "a1",
            "state": "running",
            "status": "Up 3 minutes",
            "image": "bai/session:latest",
            "labels": {"ai.backend.cluster.session": "s1", "n": 2},
            "ports": [{"ip": "", "container_port": 2200, "host_port": "30007", "proto": "tcp"}],
        }
    )
    assert (row.name, row.agent, row.state, row.status, row.id) == (
        "bai-s1-main1",
        "a1",
        "running",
        "Up 3 minutes",
        "abc",
    )
    assert row.label("ai.backend.cluster.session") == "s1" and row.label("n") == "2"
    assert row.label("missing") is None
    assert row.ports == (Port(2200, 30007),)


def test_a_row_without_agent_ports_or_labels_still_reads():
    row = ContainerRow.of({"name": "x"})
    assert (row.agent, row.labels, row.ports, row.state) == (None, {}, (), "")


def test_an_agent_read_makes_its_rows_once():
    read = AgentRead.of(
        {"agent": {"name": "a1"}, "containers": [{"name": "bai-s1-main1", "state": "exited"}]}
    )
    (row,) = read.containers
    assert isinstance(row, ContainerRow) and row.state == "exited"


def test_an_engine_list_entry_becomes_the_row_a_read_returns_and_reads_back():
    """The agent makes the row of the engine's list entry; the module returns its JSON; the
    controller reads the same row back (only the agent that listed it is added)."""
    entry = {
        "Id": "0123456789abcdef",
        "Names": ["/bai-s1-main1"],
        "State": "running",
        "Status": "Up 3 minutes",
        "Image": "bai/session:latest",
        "Labels": {"ai.backend.cluster.session": "s1"},
        "Ports": [
            {"IP": "0.0.0.0", "PrivatePort": 2200, "PublicPort": 30007, "Type": "tcp"},
            {"PrivatePort": 8888, "Type": "tcp"},  # not published: not a port of the row
        ],
    }
    row = ContainerRow.of_engine(entry)
    assert (row.name, row.id, row.agent) == ("bai-s1-main1", "0123456789ab", None)
    assert row.ports == (Port(2200, 30007, "0.0.0.0", "tcp"),)
    sent = row.at("a1").to_dict()
    assert sent["agent"] == "a1" and sent["ports"] == [
        {"ip": "0.0.0.0", "container_port": 2200, "host_port": 30007, "proto": "tcp"}
    ]
    assert ContainerRow.of(sent) == row.at("a1")
    assert ContainerRow.of_engine({"Id": "ffffffffffffff"}).name == "ffffffffffff"
