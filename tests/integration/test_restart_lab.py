"""Sessions after their agents' engines restart, on the embedded lab (make lab-up).

A real restart of the inner Docker engine of both agents (``service docker restart``, as
the lab nodes have no systemd). Session containers carry the restart policy
``unless-stopped`` (docs/sessions.md#after-a-restart): they come back whole - running,
with the same environment, and the SSH mesh working across agents over the overlay - and
list reports the session running. What Docker brings back is asserted: a session on one
agent's bridge must be running again by Docker alone. A container attached to the
overlay may be left stopped only in the two ways docs/sessions.md documents (attaching
to the network failed, or the engine's one try did not happen), counted and printed;
then list must report the session degraded. Either way a reconcile (the housekeeping
pass) follows, which must start exactly what Docker left stopped and check the mesh, and
the checks go on from there. A container someone stopped is not started by a restart;
list and show report the session degraded, and the next reconcile repairs it.
"""

from __future__ import annotations

import contextlib
import itertools

import pytest
from labtools import (
    AGENTS,
    docker_did_not_restore,
    in_session,
    inspect,
    on_agent,
    restart_engine,
    spanning_session,
    sweep,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NAME = "it-rst"
BRIDGE = "it-rstb"  # on one agent, its bridge: Docker alone must bring it back
HOSTS = ["main1", "sub1", "sub2"]
EXTRA = spanning_session(NAME)


@pytest.fixture(scope="module")
def restarted(lab, run_playbook):
    """The session before and after both agents' engines restarted."""
    for name in (NAME, BRIDGE):
        sweep(lab, name)
    run = run_playbook("session_create.yml", extra_vars=EXTRA)
    try:
        assert run.rc == 0, run
        where = {c["host"]: c["agent"] for c in run.stats["bai_session"]["containers"]}
        assert set(where.values()) == set(AGENTS), where
        bridged = run_playbook(
            "session_create.yml",
            extra_vars={
                "session_name": BRIDGE,
                "session_size": 2,
                "session_resources": {"cpu": 0.5, "mem": "256m"},
            },
        )
        assert bridged.rc == 0, bridged
        on_bridge = {c["container"]: c["agent"] for c in bridged.stats["bai_session"]["containers"]}
        assert len(set(on_bridge.values())) == 1, on_bridge  # one agent: its bridge
        before = {h: inspect(lab[a], f"bai-{NAME}-{h}") for h, a in where.items()}
        # Drift: agent2's isolation table gone. The engine's start hook must load it again
        # before the engine starts the session's containers (roles/session_isolation).
        code, out = on_agent(lab["agent2"], "nft", "delete", "table", "inet", "bai_isolation")
        assert code == 0, out
        for agent in AGENTS:
            restart_engine(lab, agent)

        def states() -> dict[str, dict]:
            return {h: inspect(lab[a], f"bai-{NAME}-{h}")["State"] for h, a in where.items()}

        def why() -> dict[str, dict]:
            keys = ("Status", "ExitCode", "Error", "StartedAt", "FinishedAt")
            return {h: {k: st.get(k) for k in keys} for h, st in states().items()}

        # On a bridge, Docker's restart policy must bring every container back by itself.
        wait_for(
            lambda: all(inspect(lab[a], c)["State"]["Running"] for c, a in on_bridge.items()),
            "Docker's restart of the bridge session's containers",
            60,
        )
        # On the overlay, Docker 20.10 may leave one stopped (docs/sessions.md#after-a-
        # restart): wait for it, then allow only the documented ways, counted.
        with contextlib.suppress(AssertionError):
            wait_for(lambda: all(st["Running"] for st in states().values()), "restart", 60)
        left = {h: docker_did_not_restore(st) for h, st in states().items() if not st["Running"]}
        assert None not in left.values(), f"stopped in a way not documented: {why()}"
        print(
            f"\nDocker brought back {len(where) - len(left)} of {len(where)} overlay "
            f"containers; left stopped: {left}"
        )
        if left:
            # The way back: list says degraded, the next reconcile (the housekeeping
            # pass) starts them and checks the mesh.
            listed = run_playbook("session_list.yml")
            assert {r["name"]: r for r in listed.stats["bai_sessions"]}[NAME]["state"] == (
                "degraded"
            ), listed
        repaired = run_playbook("session_reconcile.yml")
        assert repaired.rc == 0, repaired
        done = repaired.stats["bai_reconcile"]
        assert NAME not in (done.get("restart_failed") or {}), done
        # The reconcile started the session when, and only when, Docker had not.
        assert (NAME in done.get("restarted", [])) == bool(left), done
        assert BRIDGE not in done.get("restarted", []), done
        assert all(st["Running"] for st in states().values()), why()
        after = {h: inspect(lab[a], f"bai-{NAME}-{h}") for h, a in where.items()}
        yield where, before, after
    finally:
        run_playbook("session_destroy.yml", extra_vars={"session_names": [NAME, BRIDGE]})
        for name in (NAME, BRIDGE):
            sweep(lab, name)


def test_containers_come_back_with_the_same_environment(restarted):
    where, before, after = restarted
    for host in where:
        assert after[host]["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
        # Really restarted: a new start, the same container and environment.
        assert after[host]["State"]["StartedAt"] != before[host]["State"]["StartedAt"], host
        assert after[host]["Id"] == before[host]["Id"], host
        assert after[host]["Config"]["Env"] == before[host]["Config"]["Env"], host


def test_the_isolation_table_is_in_place_after_the_restart(restarted, lab):
    """On both agents, agent2's deleted before its restart included: the engine's start
    hook loads table inet bai_isolation, before the engine restarts session containers."""
    for agent in AGENTS:
        code, out = on_agent(lab[agent], "nft", "-t", "list", "table", "inet", "bai_isolation")
        assert code == 0 and 'comment "bai-cluster session isolation ' in out, (agent, out)


def test_the_ssh_mesh_works_across_agents_after_the_restart(restarted, lab):
    where, _before, _after = restarted

    def login(source: str, target: str) -> tuple[int, str]:
        return in_session(
            lab[where[source]],
            f"bai-{NAME}-{source}",
            f"ssh -o BatchMode=yes -o ConnectTimeout=10 {target} 'echo $BACKENDAI_CLUSTER_HOST'",
        )

    # sshd needs a moment after the container starts; then every pair, both ways.
    wait_for(lambda: login("main1", "sub2") == (0, "sub2"), "ssh main1 -> sub2", 30)
    for source, target in itertools.product(HOSTS, HOSTS):
        assert login(source, target) == (0, target), (source, target)


def test_list_reports_it_running_then_degraded_and_a_reconcile_repairs_it(
    restarted, lab, run_playbook
):
    """A container stopped behind the toolkit's back: degraded until the next reconcile
    starts it and checks the mesh from main1 (a create's rerun would start it too)."""
    where, _before, _after = restarted

    def state() -> str:
        run = run_playbook("session_list.yml")
        assert run.rc == 0, run
        return {row["name"]: row for row in run.stats["bai_sessions"]}[NAME]["state"]

    assert state() == "running"
    code, out = on_agent(lab[where["sub1"]], "docker", "stop", "-t", "1", f"bai-{NAME}-sub1")
    assert code == 0, out
    assert state() == "degraded"
    repaired = run_playbook("session_reconcile.yml")
    assert repaired.rc == 0, repaired
    assert repaired.stats["bai_reconcile"]["restarted"] == [NAME], repaired.stats
    assert inspect(lab[where["sub1"]], f"bai-{NAME}-sub1")["State"]["Running"]
    assert state() == "running"
