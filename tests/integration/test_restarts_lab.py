"""A gang restart after an agent is lost (docs/sessions.md, "Restarts"), on the embedded lab,
kept in its rack (docs/placement.md, "Topology").

The lab's inventory, copied, with three agents in two racks: ``a1x`` (rack r1) and ``a1y``
(rack r2, 1 CPU and 2g) are slots of agent1's engine (``bai_agent_id``), ``a2x`` (rack r1)
is agent2's. Three interactive blockers (7g on a1x, 7g on a2x, 1g on a1y, where the
placement packs them) leave room for one 768m member on each slot, so a 2-container batch
job with ``--topology rack --restarts 1`` spans rack r1: main1 on a1x, sub1 on a2x. The
blockers go, then agent2's engine is stopped (``service docker stop``: its containers die
with it, and Ansible still reaches the node, whose engine fails). main1 sees sub1 gone and
stops the command. Reconcile passes (what the housekeeping timer runs every minute, run
here back to back) find a2x not answering, wait until main1 has been stopped for the fence
(scheduling/steps/fencing.py: 30 s), destroy the attempt (forced on that agent) and queue
the gang again; the pass's scheduler run starts it in its own rack, on a1x alone, though
rack r2 (a1y) holds it too and is the tighter (where a first placement would go).
From the engines' own timestamps: main1 of the first attempt had stopped, and agent2's
engine was down, before any container of the second attempt started. The second attempt
runs with BACKENDAI_SESSION_RESTART_COUNT=1 to its end; the engine comes back, and the
next reconcile removes what the first attempt left there (by its attempt label: the
session id is the same), keeping its output.
"""

from __future__ import annotations

import json
import shutil
import time
from datetime import datetime

import pytest
import yaml
from conftest import REPO, bai_cli
from labtools import on_agent, swarm_ready, sweep, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NAME = "it-rlost"
BLOCKERS = {"it-rlost-b1": "7g", "it-rlost-b2": "7g", "it-rlost-b3": "1g"}
LABEL = "ai.backend.cluster.session"
LABEL_AGENT = "ai.backend.cluster.agent"
# Inventory agent -> (its node, its rack, what it offers).
SLOTS = {
    "a1x": ("agent1", "r1", {"cpu": 4, "mem": "8g", "gpu": 0}),
    "a1y": ("agent1", "r2", {"cpu": 1, "mem": "2g", "gpu": 0}),
    "a2x": ("agent2", "r1", {"cpu": 4, "mem": "8g", "gpu": 0}),
}
COMMAND = (
    'echo "attempt $BACKENDAI_SESSION_RESTART_COUNT"; '
    'if [ "$BACKENDAI_SESSION_RESTART_COUNT" = 1 ]; then ssh sub1 printenv '
    "BACKENDAI_SESSION_RESTART_COUNT; sleep 2; exit 0; fi; sleep 600"
)


@pytest.fixture(scope="module")
def cli(tmp_path_factory, lab):
    """bai-cluster on the lab's inventory with SLOTS as its agents, each in its rack."""
    lab["agent1"]  # skips when the lab is not up
    folder = tmp_path_factory.mktemp("racked") / "lab"
    shutil.copytree(REPO / "inventories" / "lab", folder)
    hosts = yaml.safe_load((folder / "hosts.yml").read_text())
    hosts["all"]["children"]["lab"]["children"]["agents"]["hosts"] = {
        slot: {
            "ansible_host": f"bai-lab-{node}",
            "bai_agent_id": slot,
            "bai_agent_resources": offer,
            "bai_topology": {"rack": rack},
        }
        for slot, (node, rack, offer) in SLOTS.items()
    }
    (folder / "hosts.yml").write_text(yaml.safe_dump(hosts))
    with (folder / "group_vars" / "all.yml").open("a") as handle:
        handle.write("\nbai_topology_levels: [rack]\n")

    def run(*argv: str, timeout: int = 300):
        return bai_cli(None, "-i", str(folder), *argv, timeout=timeout)

    return run


def members(lab) -> dict[str, dict]:
    """host -> {agent, id, state, attempt, started, finished} of the job's containers."""
    found = {}
    for agent, node in lab.agents.items():
        code, out = on_agent(node, "docker", "ps", "-aq", "--filter", f"label={LABEL}={NAME}")
        if code != 0 or not out:
            continue
        code, raw = on_agent(node, "docker", "inspect", *out.split())
        for item in json.loads(raw) if code == 0 else []:
            labels = item["Config"]["Labels"]
            found[f"{labels['ai.backend.cluster.host']}@{agent}"] = {
                "agent": agent,
                "slot": labels.get(LABEL_AGENT),
                "id": item["Id"][:12],
                "state": item["State"]["Status"],
                "attempt": labels.get("ai.backend.cluster.restart-count"),
                "started": item["State"]["StartedAt"],
                "finished": item["State"]["FinishedAt"],
            }
    return found


def epoch(text: str) -> float:
    head, _dot, frac = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(head + "+00:00").timestamp() + float("0." + (frac or "0"))


def start_engine(lab, agent: str) -> None:
    """``service docker start`` on an agent node whose engine this test stopped, then wait
    until the managers see it ready in the swarm."""
    code, out = on_agent(lab[agent], "service", "docker", "start")
    assert code == 0, out
    wait_for(lambda: swarm_ready(lab.manager, agent), f"{agent} ready in the swarm")


@pytest.fixture(autouse=True)
def swept(lab, cli):
    """Nothing of this module's sessions before a test; after it, an engine it stopped is
    started again and its sessions destroyed."""
    for name in (NAME, *BLOCKERS):
        sweep(lab, name)
    yield
    for agent, node in lab.agents.items():
        if on_agent(node, "docker", "version")[0] != 0:
            start_engine(lab, agent)
    for name in (NAME, *BLOCKERS):
        cli("session", "destroy", name)


def slots_of(lab, name: str) -> set[str]:
    found = set()
    for node in lab.agents.values():
        _code, out = on_agent(
            node, "docker", "ps", "--filter", f"label={LABEL}={name}",
            "--format", f'{{{{.Label "{LABEL_AGENT}"}}}}',
        )  # fmt: skip
        found.update(out.split())
    return found


def test_a_lost_agent_restarts_the_gang_in_its_rack_without_overlap(lab, manager, cli):
    for blocker, mem in BLOCKERS.items():
        made = cli("session", "create", blocker, "-n", "1", "--cpu", "0.25", "--mem", mem)
        assert made.returncode == 0, made.stderr
    # Packed: the 7g ones where they fit (r1), the 1g one into the tighter rack, r2.
    assert [slots_of(lab, b) for b in BLOCKERS] == [{"a1x"}, {"a2x"}, {"a1y"}]
    run = cli(
        "session", "run", NAME, "-n", "2", "--mode", "multi-node", "--cpu", "0.25", "--mem",
        "768m", "--topology", "rack", "--restarts", "1", "--detach", "--", COMMAND,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    first = members(lab)
    where = {key.split("@")[0]: m["slot"] for key, m in first.items()}
    assert where == {"main1": "a1x", "sub1": "a2x"}, first
    for blocker in BLOCKERS:
        assert cli("session", "destroy", blocker).returncode == 0

    lost, kept = "agent2", "agent1"
    code, out = on_agent(lab[lost], "service", "docker", "stop")
    assert code == 0, out
    stopped_at = time.time()
    wait_for(lambda: not swarm_ready(manager, lost), f"{lost} down in the swarm", 60)

    # The housekeeping pass, back to back: it fails while the agent does not answer.
    passes = 0
    while True:
        passes += 1
        pass_ = cli("--json", "session", "reconcile")
        now = members(lab)
        second = [m for m in now.values() if m["attempt"] == "1" and m["state"] == "running"]
        if len(second) == 2:
            break
        assert time.time() - stopped_at < 240, (pass_.stdout, pass_.stderr, now)
    running_at = time.time()
    # The pass still fails: an agent did not answer (and the old overlay, which the lost
    # agent's endpoint still uses, could not go yet).
    assert pass_.returncode != 0, pass_.stderr
    # Said in plain words: which agent, how, and that the pass went on with the others.
    assert "a2x did not answer (its Docker engine does not answer); the run went on" in (
        pass_.stderr
    ), pass_.stderr
    # Back in its rack, r1: on a1x, not the tighter a1y of rack r2.
    assert {m["slot"] for m in second} == {"a1x"}, now
    print(
        f"lab: {lost}'s engine stopped -> the new gang running on {kept}: "
        f"{running_at - stopped_at:.0f} s ({passes} reconcile pass(es))"
    )
    # No overlap, by the engines' clocks: the first attempt's main1 (on the agent that
    # answers) had stopped, and the lost agent's engine was down, before any new start.
    # The old main1 was removed by the attempt's destroy: its end is in its engine's events.
    old_main = first[f"main1@{kept}"]["id"]
    code, out = on_agent(
        lab[kept], "docker", "events", "--since", str(int(stopped_at - 600)), "--until",
        str(int(time.time())), "--filter", f"container={old_main}", "--filter", "event=die",
        "--format", "{{.TimeNano}}",
    )  # fmt: skip
    assert code == 0 and out, out
    old_died = int(out.split()[-1]) / 1e9
    new_started = min(epoch(m["started"]) for m in second)
    assert old_died < new_started and stopped_at < new_started, (old_died, new_started)

    # The second attempt runs to its end; the next pass ends it.
    wait_for(
        lambda: all(m["state"] == "exited" for m in members(lab).values() if m["agent"] == kept),
        "the second attempt's end",
        60,
    )
    cli("session", "reconcile")
    shown = json.loads(cli("--json", "session", "show", NAME).stdout)
    assert (shown["job"]["state"], shown["attempt"]) == ("succeeded", 1), shown
    (earlier,) = shown["attempts"]
    assert earlier["state"] == "lost" and earlier["left_on"] == ["a2x"], earlier
    assert cli("session", "logs", NAME).stdout.splitlines() == ["attempt 1", "1"]
    assert cli("session", "logs", NAME, "--attempt", "0").stdout.startswith("attempt 0")

    # The lost agent comes back: what the first attempt left there goes, by its attempt.
    start_engine(lab, lost)
    done = cli("--json", "session", "reconcile")
    assert done.returncode == 0, done.stderr
    assert members(lab) == {}, members(lab)
    kept_sub = cli("session", "logs", NAME, "--member", "sub1", "--attempt", "0")
    assert kept_sub.returncode == 0, kept_sub.stderr
