"""The toolkit's isolation table (roles/session_isolation) on this machine's engine
(``inventories/local``, which ``make setup`` gives the table): two real sessions, one
probing the other as an attacker would while the same engine makes and removes networks,
the churn that opens Docker 20.10's own isolation for milliseconds at a time; and the
create that refuses to start where the table is missing.

No probe leaves this machine: every address tried is a session container's."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from isolation_probe import Engine, churn_script, probe
from test_session_local import create, labelled, session, sweep

pytestmark = pytest.mark.integration

TABLE = ["inet", "bai_isolation"]
RULES = Path("/etc/bai-isolation/bai_isolation.nft")


@pytest.fixture(scope="module")
def iso_a(run_playbook, docker_client):
    with session(run_playbook, docker_client, "it-iso-a", size=2) as run:
        yield run


@pytest.fixture(scope="module")
def iso_b(run_playbook, docker_client):
    with session(run_playbook, docker_client, "it-iso-b", size=2) as run:
        yield run


def drops() -> int:
    """Packets the table dropped between a session network and another network."""
    out = subprocess.run(
        ["nft", "list", "chain", *TABLE, "session_network"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.search(r"counter packets (\d+) .*another network", out)
    assert found, out
    return int(found.group(1))


def test_a_session_bridge_has_the_interface_name_the_table_matches(iso_a, docker_client):
    network = docker_client.networks.get("bai-it-iso-a-net")
    bridge = network.attrs["Options"]["com.docker.network.bridge.name"]
    assert re.fullmatch(r"bais-[0-9a-f]{10}", bridge), bridge
    assert Path("/sys/class/net", bridge, "bridge").is_dir()
    main1 = docker_client.containers.get("bai-it-iso-a-main1")
    assert main1.labels["ai.backend.cluster.session-id"].replace("-", "").startswith(bridge[5:])


def test_sessions_stay_apart_while_the_engine_makes_and_removes_networks(iso_a, iso_b):
    engine = Engine(["docker"])
    before = drops()
    outcome = probe(
        engine,
        ["bash", "-c", churn_script(120, "it-iso-churn-")],
        prober="bai-it-iso-a-main1",
        sibling="bai-it-iso-a-sub1",
        foreign=["bai-it-iso-b-main1", "bai-it-iso-b-sub1"],
    )
    print(f"isolation churn (local engine): {outcome.line()}")
    assert outcome.networks >= 100, outcome.line()
    assert outcome.tries >= 300 and outcome.udp_sent >= 1000, outcome.line()
    assert outcome.leaks == 0, (outcome.line(), outcome.detail)
    # The probe works: the sibling answered every connect, and its sink got datagrams.
    assert outcome.control_tries > 0 and outcome.control_open == outcome.control_tries, (
        outcome.line(),
        outcome.detail,
    )
    assert outcome.control_udp > 0, outcome.detail
    # And the table is what dropped the foreign tries (its counter, not only Docker's).
    assert drops() - before >= outcome.tries


def test_no_session_starts_where_the_table_is_missing_and_nothing_is_made(
    run_playbook, docker_client
):
    sweep(docker_client, "it-iso-c")
    subprocess.run(["nft", "delete", "table", *TABLE], check=True)
    try:
        run = create(run_playbook, "it-iso-c", size=2)
    finally:
        subprocess.run(["nft", "-f", str(RULES)], check=True)
    assert run.rc != 0, run
    text = "\n".join(run.failures)
    assert (
        "the session isolation table (nftables table inet bai_isolation) is not in place on "
        "agent localhost (the table is not loaded)"
    ) in text, run
    assert "nothing was created" in text, run
    containers, networks = labelled(docker_client, "it-iso-c")
    assert containers == [] and networks == []
