"""Agents taken out of service and back (docs/operations.md), on the lab's real swarm.

Pause, drain and activate (playbooks/agent_availability.yml, agent_drain.yml), and what
they do to everything else: placement passes over a paused agent in every mode and says
so when a session waits; the agent's own admission refuses a create that was placed
before its pause reached the ledger; a drain waits for the sessions, fails naming them,
or destroys them with force; site.yml leaves a paused agent paused; the agents' list
shows who paused it and counts none of its room as free. Every assertion reads the
engines (the swarm node, the agent's containers), not only what the playbooks report.

An agent that is down (its node container stopped): list marks its sessions, a create
passes over it, destroy keeps its part until it answers; removed as dead
(playbooks/agent_remove.yml), its sessions end on the other agent and its node goes
without anything contacting it; site.yml adds it back, and reconcile removes what it
still ran. An agent that answers is removed only once its sessions have ended (refused,
then forced) and added back by site.yml. A manager leaves only while the swarm keeps
its quorum. Maintenance (playbooks/maintenance.yml) works on one agent at a time, never
under a session: it restarts an engine, upgrades a package (one that stands in for the
engine's, from an apt repository of the test's own) and restarts the engine after it,
reboots the node and runs an operator's task file, while a session on the other agent
answers ``ssh sub1`` every second.

This module comes first of the lab modules that converge site.yml (alphabetical order):
it asks for the shared ``site_converged`` run while agent1 is paused, agent2 removed and
(when the manager test ran) manager3 out of the swarm, so the checks that site.yml never
brings a paused agent back and adds an agent and a manager cost no converge of their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import docker
import pytest
from conftest import REPO, VENV_BIN, ansible_playbook
from labtools import (
    changed_hosts,
    container_name,
    in_session,
    on_agent,
    spanning_by_memory,
    spanning_session,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.lab]

REASON = "driver upgrade"
ANSWERING = ("Leader", "Reachable")  # a manager's status while it answers


@pytest.fixture(scope="module", autouse=True)
def members_back_in_the_swarm(manager):
    """The tests here take agent2 and manager3 out of the swarm; the site.yml converge
    they share adds them back. Run alone (-k), a test may leave one out: put it back."""
    yield
    found = manager.exec_run(["docker", "node", "ls", "--format", "{{.Hostname}}"])
    if {"agent2", "manager3"} - set(found.output.decode().split()):
        added = ansible_playbook(str(REPO / "site.yml"), "--tags", "docker_swarm")
        assert added.rc == 0, added


@pytest.fixture(autouse=True)
def agents_back_in_service(run_playbook, lab, manager):
    """Whatever a test did, both agents are active again afterwards: the playbook runs for
    an agent whose swarm node or own record says it is out of service (a pause or drain
    writes both; a test that set only the agent's record shows in the record)."""
    yield
    for agent in ("agent1", "agent2"):
        if in_service(manager, lab[agent], agent):
            continue
        done = set_availability(run_playbook, agent, "active")
        assert done.rc == 0, done


def in_service(manager, node, agent):
    try:
        code, out = on_agent(
            manager, "docker", "node", "inspect", agent, "--format", "{{.Spec.Availability}}"
        )
        return code == 0 and out == "active" and own_record(node) == {}
    except docker.errors.APIError:  # a node container that is not running
        return False


def set_availability(run_playbook, agent, availability, reason=""):
    extra = {"agent_name": agent, "agent_availability": availability, "agent_reason": reason}
    return run_playbook("agent_availability.yml", extra_vars=extra)


def node_availability(manager, agent):
    code, out = on_agent(
        manager, "docker", "node", "inspect", agent, "--format", "{{.Spec.Availability}}"
    )
    assert code == 0, out
    return out


def own_record(node):
    """The agent's own availability records (what its admission reads)."""
    code, out = on_agent(node, "cat", "/var/lib/bai-cluster/availability.json")
    return json.loads(out) if code == 0 else {}


def sessions_on(node):
    code, out = on_agent(
        node,
        "docker",
        "ps",
        "-a",
        "--filter",
        "label=ai.backend.cluster.session",
        "--format",
        '{{.Label "ai.backend.cluster.session"}}',
    )
    assert code == 0, out
    return sorted(set(out.split()))


def create(run_playbook, name, **extra):
    return run_playbook(
        "session_create.yml", extra_vars={"session_name": name, "session_size": 1, **extra}
    )


def destroy(run_playbook, *names):
    done = run_playbook("session_destroy.yml", extra_vars={"session_names": list(names)})
    assert done.rc == 0, done
    return done


def agent_rows(run_playbook):
    listed = run_playbook("agent_list.yml")
    assert listed.rc == 0, listed
    return {row["name"]: row for row in listed.stats["bai_agents"]}, listed.stats[
        "bai_agent_totals"
    ]


def swarm_state(manager, agent):
    code, out = on_agent(
        manager, "docker", "node", "inspect", agent, "--format", "{{.Status.State}}"
    )
    return out if code == 0 else f"? {out}"


def remove_agent(run_playbook, agent, **extra):
    return run_playbook("agent_remove.yml", extra_vars={"agent_name": agent, **extra})


def swarm_hostnames(manager):
    code, out = on_agent(manager, "docker", "node", "ls", "--format", "{{.Hostname}}")
    assert code == 0, out
    return out.split()


def firewall_of(node):
    """The host firewall's table as loaded in the node's kernel."""
    code, out = on_agent(node, "nft", "list", "table", "inet", "bai_firewall")
    assert code == 0, out
    return out


def reconcile(run_playbook):
    done = run_playbook("session_reconcile.yml")
    assert done.rc == 0, done
    return done.stats["bai_reconcile"]


def test_an_agent_that_is_down_is_listed_passed_over_and_its_part_kept(run_playbook, lab, manager):
    # One container on each agent (5g each: no agent holds both), then agent2 stops.
    made = run_playbook("session_create.yml", extra_vars=spanning_by_memory("it-ag-down"))
    assert made.rc == 0, made
    node = lab["agent2"]
    node.stop(timeout=5)
    try:
        listed = run_playbook("session_list.yml")
        assert listed.rc == 0 and listed.stats["bai_unreached"] == ["agent2"], listed
        (row,) = [r for r in listed.stats["bai_sessions"] if r["name"] == "it-ag-down"]
        assert row["state"] == "unreachable" and row["unreachable"] == ["agent2"], row
        rows, totals = agent_rows(run_playbook)
        assert rows["agent2"]["health"].startswith("unreachable"), rows["agent2"]
        assert rows["agent2"]["source"] == "ledger"
        assert rows["agent2"]["sessions"] == ["it-ag-down"]
        assert totals["in_service"] == 1

        # A create that must read every agent (no kept read) passes over the one that
        # does not answer, instead of failing.
        one = create(
            run_playbook,
            "it-ag-one",
            session_resources={"cpu": 1, "mem": "1g"},
            session_agent_read_max_age_s=0,
        )
        assert one.rc == 0, one
        assert "it-ag-one" in sessions_on(lab["agent1"])
        destroy(run_playbook, "it-ag-one")

        # Destroy removes agent1's part and keeps agent2's, and the reservation.
        began = time.monotonic()
        kept = run_playbook("session_destroy.yml", extra_vars={"session_name": "it-ag-down"})
        assert kept.rc != 0, kept
        assert any("not removed from agent2" in m for m in kept.failures), kept
        assert sessions_on(lab["agent1"]) == []
        relisted = run_playbook("session_list.yml")
        assert [r["state"] for r in relisted.stats["bai_sessions"]] == ["unreachable"]
        print(f"destroy with agent2 down: {time.monotonic() - began:.1f} s")

        # Removed as dead: nothing contacts agent2; its session ends on agent1 (the
        # reservation goes, agent2's part is left to reconcile) and its node goes.
        began = time.monotonic()
        removed = remove_agent(run_playbook, "agent2", agent_remove_dead=True)
        assert removed.rc == 0, removed
        print(f"remove --dead of a stopped agent: {time.monotonic() - began:.1f} s")
        # Nothing contacted agent2: no task ran there (the drain's plays were skipped).
        untouched = removed.result["stats"].get("agent2", {})
        assert untouched.get("ok", 0) == untouched.get("unreachable", 0) == 0, untouched
        assert removed.stats["bai_session_destroyed"]["left_on"] == ["agent2"]
        assert removed.stats["bai_agent_removed"]["sessions_ended"] == ["it-ag-down"]
        assert run_playbook("session_list.yml").stats["bai_sessions"] == []
        assert "agent2" not in swarm_hostnames(manager)
        assert "10.210.3.22" not in firewall_of(lab["agent1"])
        assert "10.210.3.22" not in firewall_of(manager)
        again = remove_agent(run_playbook, "agent2", agent_remove_dead=True)
        assert again.rc == 0 and changed_hosts(again) == {}, again
        assert again.stats["bai_agent_removed"]["node"] is None
    finally:
        node.start()
        wait_for(lambda: on_agent(node, "docker", "info")[0] == 0, "agent2's engine answers")
        # Back after its node was removed: site.yml makes it leave the swarm it no
        # longer belongs to and join again (its engine and images are intact, so the
        # swarm and the firewall are all it needs).
        began = time.monotonic()
        added = run_playbook(str(REPO / "site.yml"), "--tags", "docker_swarm")
        took = time.monotonic() - began
        print(f"site.yml --tags docker_swarm adding agent2 back: {took:.1f} s")
        assert added.rc == 0, added
        wait_for(lambda: swarm_state(manager, "agent2") == "ready", "agent2 ready in the swarm")
    assert own_record(node) == {}
    assert "10.210.3.22" in firewall_of(lab["agent1"])
    # Back: its leftover (restarted by its restart policy) is removed, never taken in.
    assert sessions_on(node) == ["it-ag-down"]
    done = reconcile(run_playbook)
    assert done["forsaken"] == ["it-ag-down"] and done["adopted"] == [], done
    assert sessions_on(node) == []


def manager_status(manager):
    """{hostname: ManagerStatus} of the swarm's nodes ('' for a worker); {} while the
    managers cannot answer (electing a leader after one stopped)."""
    code, out = on_agent(
        manager, "docker", "node", "ls", "--format", "{{.Hostname}}={{.ManagerStatus}}"
    )
    return dict(line.split("=", 1) for line in out.splitlines()) if code == 0 else {}


def test_a_manager_leaves_only_while_the_swarm_keeps_its_quorum(run_playbook, lab, manager):
    other = lab["manager2"]
    other.stop(timeout=5)
    try:
        wait_for(
            lambda: manager_status(manager).get("manager2") == "Unreachable",
            "manager2 unreachable",
        )
        refused = run_playbook("manager_remove.yml", extra_vars={"manager_name": "manager3"})
        assert refused.rc != 0, refused
        words = "2 of the swarm's 3 managers answer; without manager3, 1 of 2 would"
        assert any(words in m for m in refused.failures), refused.failures
        assert manager_status(manager).get("manager3") in ANSWERING  # nothing changed
    finally:
        other.start()
        wait_for(
            lambda: manager_status(manager).get("manager2") in ANSWERING,
            "manager2 back among the managers",
            seconds=120,
        )

    began = time.monotonic()
    removed = run_playbook("manager_remove.yml", extra_vars={"manager_name": "manager3"})
    assert removed.rc == 0, removed
    print(f"manager removal (demote, leave, node rm, firewalls): {time.monotonic() - began:.1f} s")
    status = manager_status(manager)
    assert "manager3" not in status and sorted(v for v in status.values() if v) == [
        "Leader",
        "Reachable",
    ], status
    third = lab["manager3"]
    assert on_agent(third, "docker", "info", "--format", "{{.Swarm.LocalNodeState}}") == (
        0,
        "inactive",
    )
    assert "10.210.3.14" not in firewall_of(manager)
    assert removed.stats["bai_manager_removed"]["managers_left"] == 2
    # The first manager is never removed this way (it keeps the registry).
    first = run_playbook("manager_remove.yml", extra_vars={"manager_name": "manager"})
    assert first.rc != 0 and any("other than the first" in m for m in first.failures)
    # site.yml adds manager3 back: the next test's converge (shared with the site tests).


def test_a_paused_agent_takes_no_new_session_the_other_is_removed_and_site_yml_adds_it_back(
    request, run_playbook, lab, manager
):
    paused = set_availability(run_playbook, "agent1", "pause", REASON)
    assert paused.rc == 0, paused
    assert node_availability(manager, "agent1") == "pause"
    assert own_record(lab["agent1"])[""]["reason"] == REASON

    # Single-node: agent1 is first by name and empty, yet the session goes to agent2.
    made = create(run_playbook, "it-ag-single")
    assert made.rc == 0, made
    assert sessions_on(lab["agent2"]) == ["it-ag-single"] and sessions_on(lab["agent1"]) == []

    # Multi-node: 3 x 2 CPUs need both agents; it waits and names the paused one.
    spread = run_playbook("session_create.yml", extra_vars=spanning_session("it-ag-spread"))
    assert spread.rc != 0
    (msg,) = [m for m in spread.failures if "PENDING" in m]
    assert "agent1 paused by" in msg and REASON in msg and "agent1: cpu" not in msg, msg
    assert sessions_on(lab["agent1"]) == []

    rows, totals = agent_rows(run_playbook)
    assert rows["agent1"]["availability"] == "pause" and rows["agent1"]["reason"] == REASON
    assert rows["agent1"]["health"] == "ready" and not rows["agent1"]["in_service"]
    assert rows["agent2"]["sessions"] == ["it-ag-single"]
    # agent1's 4 CPUs are not free: only agent2's 4, less the session's 1.
    assert totals["free"]["cpu"] == 3.0 and totals["offered"]["cpu"] == 8.0, totals

    # agent2 out of the cluster: refused while it-ag-single runs there (nothing is
    # removed; agent2 stays drained), then with --force.
    refused = remove_agent(run_playbook, "agent2", agent_drain_timeout_s=0)
    assert refused.rc != 0, refused
    assert any("still hold it after 0 s: it-ag-single" in m for m in refused.failures), refused
    assert sessions_on(lab["agent2"]) == ["it-ag-single"]
    assert swarm_state(manager, "agent2") == "ready"
    began = time.monotonic()
    removed = remove_agent(run_playbook, "agent2", agent_drain_timeout_s=0, agent_drain_force=True)
    assert removed.rc == 0, removed
    print(f"remove of an agent with one session (forced): {time.monotonic() - began:.1f} s")
    assert removed.stats["bai_agent_removed"]["sessions_ended"] == ["it-ag-single"]
    assert sessions_on(lab["agent2"]) == []
    assert "agent2" not in swarm_hostnames(manager)
    assert on_agent(lab["agent2"], "docker", "info", "--format", "{{.Swarm.LocalNodeState}}") == (
        0,
        "inactive",
    )
    assert own_record(lab["agent2"])[""]["purpose"] == "removed"
    assert "10.210.3.22" not in firewall_of(lab["agent1"])
    assert "10.210.3.22" not in firewall_of(manager)
    # (A second removal changes nothing: the dead agent's, in the first test.)

    # site.yml, twice (the run the site tests share), adds agent2 back (in service once
    # its swarm membership and firewall are set up) and puts agent1 back in service no
    # more than any other run does.
    first, second = request.getfixturevalue("site_converged")
    assert first.rc == 0 and second.rc == 0, (first, second)
    # It adds manager3 back too (the manager test took it out), with the manager token.
    assert manager_status(manager).get("manager3") in ANSWERING
    assert node_availability(manager, "agent1") == "pause"
    assert own_record(lab["agent1"])[""]["availability"] == "pause"
    assert swarm_state(manager, "agent2") == "ready" and own_record(lab["agent2"]) == {}
    assert node_availability(manager, "agent2") == "active"
    assert "10.210.3.22" in firewall_of(lab["agent1"]) and "10.210.3.22" in firewall_of(manager)

    back = set_availability(run_playbook, "agent1", "active")
    assert back.rc == 0, back
    assert node_availability(manager, "agent1") == "active" and own_record(lab["agent1"]) == {}
    spread = run_playbook("session_create.yml", extra_vars=spanning_session("it-ag-spread"))
    assert spread.rc == 0, spread
    assert sessions_on(lab["agent1"]) == sessions_on(lab["agent2"]) == ["it-ag-spread"]
    destroy(run_playbook, "it-ag-spread")


def test_a_create_placed_before_the_pause_reached_the_ledger_does_not_land(
    run_playbook, lab, manager
):
    # A pause writes the agent's own record first: here it has, the ledger's not yet.
    argv = [
        str(VENV_BIN / "ansible"),
        "agent1",
        "-m",
        "bai.cluster.bai_agent_availability",
        "-a",
        "agent=agent1 availability=pause reason=race by=test",
    ]
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    told = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert told.returncode == 0, told.stdout + told.stderr
    assert node_availability(manager, "agent1") == "active"

    made = create(run_playbook, "it-ag-race")
    # The ledger placed it on agent1 (first by name); agent1 refused it; placed again.
    assert made.rc == 0, made
    assert any("refuses session it-ag-race: it is paused by test" in m for m in made.failures)
    assert sessions_on(lab["agent1"]) == [] and sessions_on(lab["agent2"]) == ["it-ag-race"]
    destroy(run_playbook, "it-ag-race")


def test_a_drain_waits_fails_naming_the_sessions_and_with_force_destroys_them(
    run_playbook, lab, manager
):
    made = create(run_playbook, "it-ag-drain")
    assert made.rc == 0, made
    assert sessions_on(lab["agent1"]) == ["it-ag-drain"]

    extra = {"agent_name": "agent1", "agent_drain_timeout_s": 3, "agent_drain_delay_s": 1}
    began = time.monotonic()
    waited = run_playbook("agent_drain.yml", extra_vars=extra)
    took = time.monotonic() - began
    assert waited.rc != 0, waited
    assert any("1 session(s) still hold it after 3 s: it-ag-drain" in m for m in waited.failures)
    assert node_availability(manager, "agent1") == "drain"
    assert sessions_on(lab["agent1"]) == ["it-ag-drain"]  # nothing was destroyed
    print(f"drain that timed out after 3 s: {took:.1f} s")

    began = time.monotonic()
    forced = run_playbook("agent_drain.yml", extra_vars={**extra, "agent_drain_force": True})
    took = time.monotonic() - began
    assert forced.rc == 0, forced
    assert forced.stats["bai_agent_drain"]["left"] == ["it-ag-drain"]
    assert [s["name"] for s in forced.stats["bai_sessions_destroyed"]] == ["it-ag-drain"]
    assert sessions_on(lab["agent1"]) == []
    assert node_availability(manager, "agent1") == "drain"  # only activate brings it back
    print(f"forced drain (3 s wait, one session destroyed): {took:.1f} s")

    # Drained and empty: a drain now ends at once.
    began = time.monotonic()
    again = run_playbook("agent_drain.yml", extra_vars=extra)
    assert again.rc == 0 and again.stats["bai_agent_drain"]["left"] == [], again
    print(f"drain of an empty agent: {time.monotonic() - began:.1f} s")


# --- maintenance one agent at a time ---------------------------------------------------
class Probe(threading.Thread):
    """``ssh sub1`` from main1 of a session, every second, until stopped: the times it
    answered and the failures (what the session's users would have seen)."""

    def __init__(self, node, session):
        super().__init__(daemon=True)
        self.node, self.session = node, session
        self.answered = 0
        self.failures: list[str] = []
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            code, out = in_session(
                self.node, f"bai-{self.session}-main1", "ssh -o ConnectTimeout=3 sub1 true"
            )
            if code == 0:
                self.answered += 1
            else:
                self.failures.append(f"{time.strftime('%H:%M:%S')} rc={code}: {out[-200:]}")
            self.done.wait(1)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.join(timeout=30)


def dockerd_pid(node):
    code, out = on_agent(node, "pidof", "dockerd")
    assert code == 0, out
    return out


def maintain(run_playbook, hosts, **extra):
    extra = {"maintenance_action": "restart", "maintenance_hosts": hosts, **extra}
    return run_playbook("maintenance.yml", extra_vars=extra)


# A package that stands in for the engine's: version 1.0 installed on the node, 2.0 in an
# apt repository of its own, the node's only source while the test runs (no mirror read).
PROBE_REPO = r"""
set -eu
d=$(mktemp -d) repo=/srv/bai-maint-repo
mkdir -p "$repo"
for v in 1.0 2.0; do
  mkdir -p "$d/$v/DEBIAN"
  printf '%s\n' 'Package: bai-maint-probe' "Version: $v" 'Architecture: all' \
    'Maintainer: bai-cluster tests <tests@localhost>' 'Description: an engine stand-in' \
    >"$d/$v/DEBIAN/control"
  dpkg-deb -b "$d/$v" "$d/bai-maint-probe_${v}_all.deb" >/dev/null
done
dpkg -i "$d/bai-maint-probe_1.0_all.deb" >/dev/null
deb=$repo/bai-maint-probe_2.0_all.deb
cp "$d/bai-maint-probe_2.0_all.deb" "$deb"
{ dpkg-deb -f "$deb"; echo "Filename: ./${deb##*/}"; echo "Size: $(stat -c %s "$deb")"
  echo "SHA256: $(sha256sum "$deb" | cut -d ' ' -f 1)"; } >"$repo/Packages"
mv /etc/apt/sources.list /etc/apt/sources.list.bai-maint
echo "deb [trusted=yes] file:$repo ./" >/etc/apt/sources.list.d/bai-maint-probe.list
rm -rf "$d"
"""
PROBE_REPO_GONE = (
    "mv /etc/apt/sources.list.bai-maint /etc/apt/sources.list 2>/dev/null; "
    "rm -rf /srv/bai-maint-repo /etc/apt/sources.list.d/bai-maint-probe.list "
    "/var/lib/apt/lists/*bai-maint-repo* /var/lib/bai-maint-mark; "
    "dpkg -r bai-maint-probe >/dev/null 2>&1; true"
)
OPERATOR_TASKS = """---
- name: Leave the operator's mark
  ansible.builtin.copy:
    content: "{{ inventory_hostname }} {{ maintenance_action }}\n"
    dest: /var/lib/bai-maint-mark
    mode: "0644"
"""


def probe_version(node):
    return on_agent(node, "dpkg-query", "-W", "-f", "${Version}", "bai-maint-probe")


def node_started(docker_client, agent):
    """When the agent's node container last started (a lab node's reboot starts it)."""
    return docker_client.api.inspect_container(container_name(agent))["State"]["StartedAt"]


def test_maintenance_restarts_upgrades_reboots_and_runs_tasks_while_sessions_elsewhere_answer(
    run_playbook, lab, manager, docker_client, tmp_path
):
    # A session of two containers on agent2 (agent1 paused while it is placed).
    assert set_availability(run_playbook, "agent1", "pause").rc == 0
    made = create(run_playbook, "it-ag-keep2", session_size=2)
    assert made.rc == 0, made
    assert set_availability(run_playbook, "agent1", "active").rc == 0
    assert sessions_on(lab["agent2"]) == ["it-ag-keep2"]
    before = {agent: dockerd_pid(node) for agent, node in lab.agents.items()}

    # Over both agents, one at a time: agent1 is restarted while the session on agent2
    # answers every second; agent2 still runs it, so the run stops there untouched.
    began = time.monotonic()
    with Probe(lab["agent2"], "it-ag-keep2") as probe:
        run = maintain(run_playbook, "agents", agent_drain_timeout_s=0)
    print(f"maintenance: agent1 restarted, agent2 refused: {time.monotonic() - began:.1f} s")
    assert run.rc != 0, run
    assert any("still hold it after 0 s: it-ag-keep2" in m for m in run.failures), run.failures
    assert probe.failures == [] and probe.answered >= 10, (probe.answered, probe.failures)
    assert dockerd_pid(lab["agent1"]) != before["agent1"]  # restarted
    assert dockerd_pid(lab["agent2"]) == before["agent2"]  # never under a session
    assert sessions_on(lab["agent2"]) == ["it-ag-keep2"]
    assert node_availability(manager, "agent1") == "active" and own_record(lab["agent1"]) == {}
    assert run.stats["bai_maintenance"]["agent1"]["back_in_service"] is True
    # agent2 is left drained by the maintenance that stopped there.
    assert own_record(lab["agent2"])[""]["purpose"] == "maintenance"

    # The other way round: a session on agent1 (agent2 is drained), and agent2 upgraded,
    # rebooted and given the operator's tasks while it answers.
    made = create(run_playbook, "it-ag-keep1", session_size=2)
    assert made.rc == 0, made
    assert sessions_on(lab["agent1"]) == ["it-ag-keep1"]
    destroy(run_playbook, "it-ag-keep2")
    node = lab["agent2"]
    code, out = on_agent(node, "bash", "-c", PROBE_REPO)
    assert code == 0, out
    tasks = tmp_path / "operator-tasks.yml"
    tasks.write_text(OPERATOR_TASKS)
    took = {}
    try:
        with Probe(lab["agent1"], "it-ag-keep1") as probe:
            # upgrade: the package has a newer version, so the engine restarts after it.
            began = time.monotonic()
            upgraded = maintain(
                run_playbook,
                "agent2",
                maintenance_action="upgrade",
                maintenance_packages=["bai-maint-probe"],
                agent_drain_timeout_s=0,
            )
            took["upgrade"] = time.monotonic() - began
            assert upgraded.rc == 0, upgraded
            assert probe_version(node) == (0, "2.0")
            assert dockerd_pid(node) != before["agent2"]  # the upgraded engine restarted
            # The drain the stopped run left was its own: agent2 is back in service.
            assert node_availability(manager, "agent2") == "active" and own_record(node) == {}

            # reboot: the node goes down and comes back (inventories/lab: a lab node's
            # init ends and its restart policy starts it again).
            started, pid = node_started(docker_client, "agent2"), dockerd_pid(node)
            began = time.monotonic()
            rebooted = maintain(
                run_playbook,
                "agent2",
                maintenance_action="reboot",
                maintenance_reboot_timeout_s=300,
                agent_drain_timeout_s=0,
            )
            took["reboot"] = time.monotonic() - began
            assert rebooted.rc == 0, rebooted
            assert node_started(docker_client, "agent2") != started  # really down and up
            assert dockerd_pid(node) != pid
            # What the roles enabled at boot runs again (Prometheus scrapes it next).
            exporter = on_agent(node, "pgrep", "-f", "/usr/bin/prometheus-node-exporter")
            assert exporter[0] == 0, exporter

            # tasks: the operator's own file, on agent2 only.
            began = time.monotonic()
            ran = maintain(
                run_playbook,
                "agent2",
                maintenance_action="tasks",
                maintenance_tasks=str(tasks),
                agent_drain_timeout_s=0,
            )
            took["tasks"] = time.monotonic() - began
            assert ran.rc == 0, ran
            assert on_agent(node, "cat", "/var/lib/bai-maint-mark") == (0, "agent2 tasks")
            assert on_agent(lab["agent1"], "test", "-e", "/var/lib/bai-maint-mark")[0] != 0
        print("maintenance of agent2 (seconds):", {k: round(v, 1) for k, v in took.items()})
        # The session on agent1 answered through all three (no failed probe).
        assert probe.failures == [] and probe.answered >= 30, (probe.answered, probe.failures)
        for done, action in ((upgraded, "upgrade"), (rebooted, "reboot"), (ran, "tasks")):
            assert done.stats["bai_maintenance"]["agent2"] == {
                "action": action,
                "back_in_service": True,
                "kept": None,
            }, (action, done.stats)
        # Back after each: in service, ready in the swarm, its firewall table loaded.
        assert node_availability(manager, "agent2") == "active" and own_record(node) == {}
        assert swarm_state(manager, "agent2") == "ready"
        assert "10.210.3.21" in firewall_of(node)
        assert sessions_on(lab["agent1"]) == ["it-ag-keep1"]
    finally:
        on_agent(node, "sh", "-c", PROBE_REPO_GONE)
    destroy(run_playbook, "it-ag-keep1")
