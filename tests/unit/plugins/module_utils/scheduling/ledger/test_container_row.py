"""ContainerRow: one session container as an agent's read lists it."""

from __future__ import annotations

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_read import (
    AgentRead,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.container_row import (
    ContainerRow,
    Port,
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
