"""The lab role's teardown (playbooks/lab.yml, lab_state=absent) on this machine's engine:
a second, tiny lab under its own prefix, so it runs in the local lane, beside the lab."""

from __future__ import annotations

import json

import pytest
from conftest import ansible
from labtools import LAB_LABEL as LABEL

pytestmark = [pytest.mark.integration]


def test_teardown_removes_exactly_what_the_lab_made(docker_client):
    """A second, tiny lab under another prefix; a decoy without the label survives."""
    client = docker_client
    prefix = "bai-labt"
    extra = json.dumps(
        {
            "lab_prefix": prefix,
            "lab_images": [],
            "lab_networks": {"compute": "10.218.3.0/24"},
            "lab_nodes": [{"name": "n1", "networks": ["compute"], "dockerd": True}],
        }
    )
    decoy_vol = client.volumes.create(f"{prefix}-decoy")
    decoy_net = client.networks.create(f"{prefix}-decoy", driver="bridge")
    # A node of a third lab (another prefix, the lab's label): the teardown of this prefix
    # must leave it, whether or not the main lab is up.
    other = client.containers.create(
        "bai/session:latest", "true", name="bai-labu-n1", labels={LABEL: "bai-labu"}
    )
    try:
        up = ansible(
            "ansible-playbook", "playbooks/lab.yml", "-e", "lab_state=present", "-e", extra
        )
        assert up.returncode == 0, up.stdout[-3000:]
        labelled = {"label": f"{LABEL}={prefix}"}
        # Something to remove: the node, its network, its engine's volume and the shared one.
        assert len(client.containers.list(filters=labelled)) == 1
        assert {n.name for n in client.networks.list(filters=labelled)} == {f"{prefix}-compute"}
        assert {v.name for v in client.volumes.list(filters=labelled)} == {
            f"{prefix}-n1-docker",
            f"{prefix}-shared",
        }
        down = ansible(
            "ansible-playbook", "playbooks/lab.yml", "-e", "lab_state=absent", "-e", extra
        )
        assert down.returncode == 0, down.stdout[-3000:]
        assert client.containers.list(all=True, filters=labelled) == []
        assert client.networks.list(filters=labelled) == []
        assert client.volumes.list(filters=labelled) == []
        client.volumes.get(decoy_vol.name)  # untouched
        client.networks.get(decoy_net.id)
        client.containers.get(other.id)  # another lab's node: untouched
        # The main lab too, when it is up (the lab lane runs beside this one).
        main = client.containers.list(all=True, filters={"name": "^bai-lab-agent1$"})
        assert all(c.status == "running" for c in main), main
    finally:
        other.remove(force=True)
        decoy_vol.remove(force=True)
        decoy_net.remove()
