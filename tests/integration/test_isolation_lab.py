"""The toolkit's isolation table (roles/session_isolation) on a lab agent converged by
site.yml (host firewall on): a bridge session and a multi-node (overlay) session that
share agent A probe each other, as an attacker would, while A's engine makes and removes
networks and its host firewall is reloaded again and again; then the same probe with the
table removed from A, which must find leaks (the probe can fail). Docker's own chains are
the only other guard there, and they open for milliseconds on every network create.

The overlay session's container on A is tried at its docker_gwbridge address: the only
path from another network to it on that agent. No probe leaves the lab."""

from __future__ import annotations

import json

import pytest
from isolation_probe import Engine, churn_script, probe
from labtools import on_agent, spanning_by_memory, sweep

pytestmark = [pytest.mark.integration, pytest.mark.lab]

OVERLAY, BRIDGE = "it-iso-ov", "it-iso-br"
RULES = "/etc/bai-isolation/bai_isolation.nft"
FIREWALL = "/etc/bai-firewall/bai_firewall.nft"


@pytest.fixture(scope="module")
def placed(lab, run_playbook):
    """Both sessions, and where each container runs: {container: agent}."""
    for name in (OVERLAY, BRIDGE):
        sweep(lab, name)
    where: dict[str, str] = {}
    try:
        for extra in (
            spanning_by_memory(OVERLAY),
            {
                "session_name": BRIDGE,
                "session_size": 2,
                "session_resources": {"cpu": 0.5, "mem": "512m"},
            },
        ):
            run = run_playbook("session_create.yml", extra_vars=extra)
            assert run.rc == 0, run
            summary = run.stats["bai_session"]
            where |= {c["container"]: c["agent"] for c in summary["containers"]}
        yield where
    finally:
        for name in (OVERLAY, BRIDGE):
            run_playbook("session_destroy.yml", extra_vars={"session_name": name})
            sweep(lab, name)


def engine_of(lab, agent: str) -> Engine:
    return Engine(["docker", "exec", lab[agent].name, "docker"])


def gwbridge_address(lab, agent: str, container: str) -> str:
    """The container's address on its agent's docker_gwbridge (its way out)."""
    engine = engine_of(lab, agent)
    cid = engine.run("inspect", "-f", "{{.Id}}", container)
    members = json.loads(
        engine.run("network", "inspect", "docker_gwbridge", "-f", "{{json .Containers}}")
    )
    return members[cid]["IPv4Address"].split("/")[0]


def churn_on(lab, agent: str, count: int, reload_firewall: bool) -> list[str]:
    """Networks made and removed on the agent's engine, the host firewall reloaded (one
    nft transaction each) between them when ``reload_firewall``."""
    script = churn_script(count, "it-iso-churn-")
    if reload_firewall:
        script = script.replace("docker network rm", f"nft -f {FIREWALL} && docker network rm")
    return ["docker", "exec", lab[agent].name, "bash", "-c", script]


def layout(placed):
    """(agent A, the bridge session's main1 and sub1, the overlay's member on A, its
    member elsewhere, that member's agent)."""
    bridge = sorted(c for c in placed if c.startswith(f"bai-{BRIDGE}-"))
    agent = placed[bridge[0]]
    assert placed[bridge[1]] == agent, placed
    overlay = sorted(c for c in placed if c.startswith(f"bai-{OVERLAY}-"))
    here = [c for c in overlay if placed[c] == agent]
    away = [c for c in overlay if placed[c] != agent]
    assert len(here) == 1 and len(away) == 1, placed
    return agent, bridge[0], bridge[1], here[0], away[0], placed[away[0]]


def held(outcome, what: str) -> None:
    """A churn probe that held: 100 networks made meanwhile, 300 tries, no leak, and the
    controls (TCP and UDP to the session's own member) through."""
    print(f"isolation churn ({what}): {outcome.line()}")
    assert outcome.networks >= 100, outcome.line()
    assert outcome.tries >= 300, outcome.line()
    assert outcome.leaks == 0, (outcome.line(), outcome.detail)
    assert outcome.control_open == outcome.control_tries > 0, (outcome.line(), outcome.detail)
    assert outcome.control_udp > 0, outcome.detail


def test_a_bridge_session_cannot_reach_an_overlay_session_on_its_agent(lab, placed):
    """With networks made and the host firewall reloaded on that agent all the while."""
    agent, main1, sub1, overlay_here, _away, _other = layout(placed)
    outcome = probe(
        engine_of(lab, agent),
        churn_on(lab, agent, 100, reload_firewall=True),
        prober=main1,
        sibling=sub1,
        foreign=[overlay_here],
        addresses={overlay_here: gwbridge_address(lab, agent, overlay_here)},
    )
    held(outcome, f"{agent}, bridge -> overlay, firewall reloads")


def test_an_overlay_session_cannot_reach_a_bridge_session_on_its_agent(lab, placed):
    agent, main1, _sub1, overlay_here, away, other = layout(placed)
    outcome = probe(
        engine_of(lab, agent),
        churn_on(lab, agent, 100, reload_firewall=False),
        prober=overlay_here,
        # The positive control across the overlay, on the other agent.
        sibling=away,
        foreign=[main1],
        where={away: engine_of(lab, other)},
    )
    held(outcome, f"{agent}, overlay -> bridge")


def test_without_the_table_the_same_probe_finds_leaks(lab, placed):
    """The probe can fail: with table inet bai_isolation removed from the agent, Docker's
    chains alone let tries through while networks are made. Loaded again afterwards."""
    agent, main1, sub1, overlay_here, _away, _other = layout(placed)
    node = lab[agent]
    code, out = on_agent(node, "nft", "delete", "table", "inet", "bai_isolation")
    assert code == 0, out
    try:
        outcome = probe(
            engine_of(lab, agent),
            churn_on(lab, agent, 60, reload_firewall=False),
            prober=main1,
            sibling=sub1,
            foreign=[overlay_here],
            addresses={overlay_here: gwbridge_address(lab, agent, overlay_here)},
        )
    finally:
        code, out = on_agent(node, "nft", "-f", RULES)
        assert code == 0, out
    print(f"isolation churn ({agent}, no table): {outcome.line()}")
    assert outcome.leaks > 0, (outcome.line(), outcome.detail)
    assert outcome.control_open == outcome.control_tries > 0, (outcome.line(), outcome.detail)
