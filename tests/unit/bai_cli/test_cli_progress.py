"""Runner events -> progress lines (bai_cli.progress), from synthetic events shaped like
ansible-runner's, and a check that every task of the session playbooks maps to a step."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from bai_cli.progress import STEPS, PlayProgress, Printer, SessionProgress, step_of

REPO = Path(__file__).resolve().parents[3]
IMPORT_TASKS = "ansible.builtin.import_tasks"


def ev(kind: str, task: str = "", res: dict | None = None, **data) -> dict:
    return {"event": kind, "event_data": {"task": task, "res": res or {}, **data}}


def task_names(node) -> list[str]:
    """Every task name in a playbook (blocks and rescue too; not an import_tasks, which
    runs no task of its own: the imported files are checked themselves)."""
    found = []
    if isinstance(node, list):
        for item in node:
            found += task_names(item)
    elif isinstance(node, dict):
        plays = {"hosts", "import_playbook", "ansible.builtin.import_playbook", IMPORT_TASKS}
        if "name" in node and not plays & set(node):
            found.append(node["name"])
        for key in ("tasks", "block", "rescue", "always"):
            found += task_names(node.get(key) or [])
    return found


@pytest.mark.parametrize(
    "playbook",
    [
        "playbooks/session_create.yml",
        "playbooks/session_start.yml",
        "playbooks/session_schedule_pass.yml",
        "playbooks/session_place_reads.yml",
        "playbooks/session_make.yml",
        "playbooks/tasks/session_make_one.yml",
        "playbooks/tasks/session_make_across.yml",
        "playbooks/tasks/session_made.yml",
        "playbooks/tasks/session_make_queued.yml",
        "playbooks/tasks/session_make_unplaced.yml",
        "playbooks/tasks/session_undo.yml",
        "playbooks/tasks/session_place.yml",
        "playbooks/tasks/session_finish.yml",
        "playbooks/tasks/session_command.yml",
        "playbooks/tasks/session_report.yml",
        "playbooks/session_teardown.yml",
        "playbooks/session_manager.yml",
    ],
)
def test_every_session_task_maps_to_a_step(playbook):
    names = task_names(yaml.safe_load((REPO / playbook).read_text()))
    assert names, f"no tasks found in {playbook}"
    unmapped = [name for name in names if step_of(name) is None]
    assert not unmapped, f"tasks without a progress step (update bai_cli/progress.py): {unmapped}"


def test_every_step_prefix_names_a_task_of_the_playbooks():
    """The table has no entry a renamed or removed task (or play) left behind."""
    names: set[str] = set()

    def named(node) -> None:
        if isinstance(node, list):
            for item in node:
                named(item)
        elif isinstance(node, dict):
            if isinstance(node.get("name"), str):
                names.add(node["name"])
            for value in node.values():
                named(value)

    for path in (REPO / "playbooks").rglob("*.yml"):
        named(yaml.safe_load(path.read_text()))
    stale = [prefix for prefix, _step in STEPS if not any(n.startswith(prefix) for n in names)]
    assert not stale, f"STEPS entries that match no task (remove them): {stale}"


def test_step_names():
    assert step_of("Check the session request") == "check"
    assert step_of("Generate the session's SSH keys (secret, never printed)") == "keys"
    assert step_of("Create the session network") == "network"
    assert step_of("Create the containers on every agent, in parallel") == "containers"
    assert (
        step_of("Check the gang from main1 (SSH to every container as user work, the health gate)")
        == "health gate"
    )
    assert step_of("Report the failure") == "cleanup"
    assert step_of("Something else") is None and step_of(None) is None


def feed_all(progress, events) -> list[str]:
    lines = []
    for event in events:
        lines += progress.feed(event)
    return lines


AGENT = {
    "name": "agent1",
    "group": "default",
    "cpu": 4.0,
    "mem": 8 * 1024**3,
    "gpu": 0,
    "used_cpu": 1.5,
    "used_mem": 2 * 1024**3,
    "used_gpu": 0,
}
READ = "Read capacity and this session's containers on this agent"
PLACE = "Place the session on the agents"
ONE = "Create the containers on their agent"
MANY = "Create the containers on every agent, in parallel"
WAIT = "Wait for every agent"
MESH = "Check the gang from main1 (SSH to every container as user work, the health gate)"


def test_single_agent_create():
    placed = {
        "action": "create",
        "ready": False,
        "agents": ["agent1"],
        "size": 3,
        "mode": "single-node",
    }
    containers = [{"name": f"bai-s-{h}", "agent": "agent1"} for h in ("main1", "sub1", "sub2")]
    events = [
        ev("playbook_on_task_start", "Check the session request"),
        ev(
            "runner_on_ok",
            "Check the session request",
            {"size": 3, "hosts": ["main1", "sub1", "sub2"]},
        ),
        ev("playbook_on_task_start", PLACE),
        ev("runner_on_ok", PLACE, {"need_read": ["agent1"], "changed": False}),
        ev("playbook_on_task_start", READ),
        ev("runner_on_ok", READ, {"agent": AGENT}),  # one event per agent read
        ev("playbook_on_task_start", PLACE),
        ev("runner_on_ok", PLACE, placed),
        ev("playbook_on_task_start", "Generate the session's SSH keys (secret, never printed)"),
        ev(
            "runner_on_ok",
            "Generate the session's SSH keys (secret, never printed)",
            {"censored": "the output has been hidden"},
        ),
        ev("playbook_on_task_start", "Create the session network (an overlay, on the manager)"),
        ev("runner_on_skipped", "Create the session network (an overlay, on the manager)"),
        ev("playbook_on_task_start", ONE),
        ev(
            "runner_on_ok",
            ONE,
            {
                "containers": containers,
                "created": [1, 2, 3],
                "restarted": [],
                # One agent: its bridge and the health gate come from the same module run.
                "network": {"name": "bai-s-net", "driver": "bridge", "subnet": "10.224.0.0/24"},
                "mesh": ["ok main1", "ok sub1", "ok sub2"],
                "gate": {
                    "seconds": 0.4,
                    "members": {
                        "main1": {"ssh": "ok", "dns": "ok"},
                        "sub1": {"ssh": "ok", "dns": "ok", "mtu": "1500 rtt_ms=0.1"},
                        "sub2": {"ssh": "ok", "dns": "ok", "mtu": "1500 rtt_ms=0.1"},
                    },
                },
            },
        ),
        ev("playbook_on_task_start", MANY),
        ev("runner_on_skipped", MANY),
        ev("playbook_on_task_start", MESH),
        ev("runner_on_skipped", MESH),
    ]
    assert feed_all(SessionProgress(), events) == [
        "check: request ok, 3 container(s): main1, sub1, sub2",
        "placing: reading 1 agent(s): agent1",
        "placing: placed 3 container(s) on agent1 (single-node)",
        "keys: generated the session's SSH keys (in memory, never printed)",
        "containers 0/3: creating on agent1",
        "network: bai-s-net (bridge, 10.224.0.0/24)",
        "containers 3/3 on agent1 (3 created, 0 restarted)",
        "health gate: ok, 3 member(s), 3 check(s) (dns, mtu, ssh) in 0.4 s",
    ]


def test_agents_read_show_their_room_with_verbose_and_many_are_abbreviated():
    many = [f"va{i}" for i in range(1, 65)]
    assert SessionProgress().feed(ev("runner_on_ok", PLACE, {"need_read": many})) == [
        "placing: reading 64 agent(s): va1, va2, va3, va4, va5, va6, va7, va8 and 56 more"
    ]
    assert SessionProgress().feed(ev("runner_on_ok", READ, {"agent": AGENT})) == []
    assert SessionProgress(verbose=1).feed(ev("runner_on_ok", READ, {"agent": AGENT})) == [
        "placing: agent1 (group default) free cpu 2.5, mem 6g, gpu 0"
    ]


def test_multi_agent_containers_count_up_per_agent():
    progress = SessionProgress()
    placed = {"action": "create", "agents": ["agent2", "agent1"], "size": 6, "mode": "multi-node"}
    events = [
        ev("runner_on_ok", PLACE, placed),
        ev("playbook_on_task_start", ONE),
        ev("runner_on_skipped", ONE),
        ev("playbook_on_task_start", MANY),
        ev("runner_item_on_ok", WAIT, {"item": {"item": "agent2"}, "containers": [{}] * 4}),
        ev("runner_item_on_ok", WAIT, {"item": {"item": "agent1"}, "containers": [{}] * 2}),
    ]
    assert feed_all(progress, events) == [
        "placing: placed 6 container(s) on agent2, agent1 (multi-node)",
        "containers 0/6: creating on agent2, agent1 in parallel",
        "containers 4/6: agent2 done",
        "containers 6/6: agent1 done",
    ]


def test_existing_session_and_pending_retry():
    progress = SessionProgress()
    assert progress.feed(ev("runner_on_ok", PLACE, {"msg": "PENDING: full", "pending": True})) == []
    waiting = (
        "Place the session on the agents once capacity frees (PENDING, waiting up to "
        "session_wait_s)"
    )
    assert progress.feed(ev("runner_retry", waiting, {"pending": True})) == [
        "placing: still PENDING after 1 wait(s), trying again"
    ]
    assert progress.feed(
        ev(
            "runner_on_ok",
            PLACE,
            {"action": "exists", "ready": True, "size": 2, "agents": ["agent1"]},
        )
    ) == ["placing: the session exists with this spec and runs (nothing to do)"]


def test_cleanup_is_announced_once_and_verbose_shows_tasks_and_failures():
    progress = SessionProgress(verbose=1)
    lines = feed_all(
        progress,
        [
            ev("runner_on_failed", ONE, {"msg": "boom"}),
            ev("playbook_on_task_start", "Remove the containers this run made, on every agent"),
            ev("playbook_on_task_start", "Remove the networks this run made, on every agent"),
        ],
    )
    assert lines == [
        "containers: failed in 'Create the containers on their agent'",
        "task: Remove the containers this run made, on every agent",
        "cleanup: a step failed, removing what this run made",
        "task: Remove the networks this run made, on every agent",
    ]


def test_play_progress():
    progress = PlayProgress(verbose=1)
    lines = feed_all(
        progress,
        [
            ev("playbook_on_play_start", play="Bring the lab up or down"),
            ev("playbook_on_task_start", "Start the nodes"),
            ev("runner_on_ok", "Start the nodes", {"changed": True}, host="localhost"),
            ev("runner_on_ok", "Check", {"changed": False}, host="localhost"),
        ],
    )
    assert lines == [
        "play: Bring the lab up or down",
        "task: Start the nodes",
        "  changed: localhost",
    ]


def test_printer_plain_when_not_a_terminal(monkeypatch):
    stream = io.StringIO()
    Printer(stream)(["network: bai-s-net (bridge)"])
    line = stream.getvalue()
    assert "\033" not in line
    assert line.endswith("s] network: bai-s-net (bridge)\n") and line.startswith("[")


def test_printer_colours_only_a_terminal(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    stream = Tty()
    Printer(stream)(["keys: generated"])
    assert "\033[36mkeys\033[0m: generated" in stream.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    stream = Tty()
    Printer(stream)(["keys: generated"])
    assert "\033" not in stream.getvalue()
    quiet = io.StringIO()
    Printer(quiet, quiet=True)(["keys: generated"])
    assert quiet.getvalue() == ""


def test_app_proxy_route_from_the_recorded_summary():
    summary = {"name": "s", "appproxy": {"port": 10206, "ssh": "ssh -p 10206 work@10.210.1.12"}}
    record = "Record the session summary (set_stats key bai_session)"
    res = {"ansible_stats": {"data": {"bai_session": summary}}}
    assert SessionProgress().feed(ev("runner_on_ok", record, res)) == [
        "app proxy: users reach main1 with ssh -p 10206 work@10.210.1.12"
    ]
    without = {"ansible_stats": {"data": {"bai_session": {"name": "s"}}}}
    assert SessionProgress().feed(ev("runner_on_ok", record, without)) == []
    role_task = ev("playbook_on_task_start", "Any route task", role="appproxy")
    assert SessionProgress(verbose=1).feed(role_task) == ["task: Any route task"]
