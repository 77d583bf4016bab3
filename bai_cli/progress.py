"""Turn ansible-runner events into progress lines people can follow.

Pure: :class:`SessionProgress` and :class:`PlayProgress` take runner events (dicts) and
return the lines to print; :class:`Printer` writes them (to stderr, coloured only on a
terminal). The steps of a session create are those of ``playbooks/session_create.yml``,
recognised by task name (:func:`step_of`): check, placing, keys, network,
containers k/N, the health gate, and cleanup when a failure part-way undoes the session.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

# Task-name prefixes of playbooks/session_create.yml (and session_destroy.yml) -> step.
# tests/unit/bai_cli/test_cli_progress.py checks that every task of those playbooks maps to one,
# and that every prefix here names a task of playbooks/.
STEPS: tuple[tuple[str, str], ...] = (
    ("Find the manager that serves the session ledger", "manager"),
    ("Read the session ledger's identity through this manager", "manager"),
    ("Choose the first manager that answered", "manager"),
    ("Check that a manager serves the swarm's session ledger", "manager"),
    ("Check the request's variables", "check"),
    ("Check the session request", "check"),
    ("Check the session name", "check"),
    ("Note until when a PENDING session may wait", "placing"),
    ("Place the session", "placing"),
    ("Read capacity and this session's containers", "placing"),
    ("Read the agents and place", "placing"),
    ("Note the plan and the agents the ledger asks to read", "placing"),
    ("Fail when an agent's declaration is wrong", "placing"),
    ("Read the session ledger's reservations", "reading"),
    ("Stop when the session cannot be placed", "placing"),
    ("Make the session", "containers"),
    ("Generate the session's SSH keys", "keys"),
    ("Create the session network", "network"),
    ("Create the containers", "containers"),
    ("Wait for every agent", "containers"),
    ("Check the gang from main1", "health gate"),
    ("Undo what this run made", "cleanup"),
    ("Remove the containers this run made", "cleanup"),
    ("Remove the networks this run made", "cleanup"),
    ("Remove the app proxy route this run made", "cleanup"),
    ("Release the reservation this run made", "cleanup"),
    ("Note the agents that refused the session", "cleanup"),
    ("Report the failure", "cleanup"),
    ("Confirm the session's reservation", "summary"),
    ("Note that the session is made", "summary"),
    ("Note that the session is queued", "summary"),
    ("Route a user-facing port of the app proxy", "app proxy"),
    ("Remove a session's route from the app proxy", "app proxy"),
    ("Record the session summary", "summary"),
    ("Start the batch session's command", "command"),
    ("Wait for a batch session's end", "command"),
    ("Wait for the end, record and say it", "command"),
    ("Look up the session in the session ledger", "command"),
    ("Stop when the ledger knows no such session", "command"),
    ("Wait until main1 has stopped", "command"),
    ("Wait until every container of the session has stopped", "command"),
    ("Record what the command came to", "command"),
    ("Say what the command came to", "command"),
    ("Fail unless the command succeeded", "command"),
    ("Show the session", "summary"),
    # playbooks/session_start.yml, session_schedule.yml: the queue
    ("Record the queued session", "summary"),
    ("Show the queued session", "summary"),
    ("Decide what starts now", "queue"),
    ("Record the pass", "queue"),
    ("Check the queued request again", "check"),
    ("Start it with the pass's ticket", "queue"),
    ("Start the chosen session", "placing"),
    ("Note the sessions to destroy", "check"),
    ("Check the session names", "check"),
    ("Look up the sessions' agents", "check"),
    ("Stop when the ledger could not be read or refused a session", "check"),
    ("Choose the agents to clean", "check"),
    ("Remove a session's containers", "containers"),
    ("Remove a session's networks", "network"),
    ("Release a session's reservation", "summary"),
    ("Fail when an agent or the manager was not reached", "summary"),
    ("Record what was removed", "summary"),
    ("Show what was removed", "summary"),
    ("Note whether a scheduler pass follows", "queue"),
    # playbooks/agent_*.yml
    ("Check the agent", "check"),
    ("Note who asks", "check"),
    ("Set the agent's own availability", "agent"),
    ("Fail when the agent's own record could not be cleared", "agent"),
    ("Record the availability in the session ledger", "cluster"),
    ("Warn that the agent itself was not told", "cluster"),
    ("Read the availability records", "cluster"),
    ("Read the agent's offer", "agents"),
    ("Note when the wait ends", "drain"),
    ("Read the sessions left on the agent", "drain"),
    ("Fail when sessions remain", "drain"),
    ("Fail when the agent did not answer", "drain"),
)
GIB = 1024**3


def step_of(task: str | None) -> str | None:
    """The progress step of a session playbook's task name, or None."""
    if not task:
        return None
    for prefix, step in STEPS:
        if task.startswith(prefix):
            return step
    return None


def _mem(value: Any) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return f"{number / GIB:g}g"


def _num(value: Any) -> str:
    try:
        return f"{float(value):g}"
    except (TypeError, ValueError):
        return str(value)


class SessionProgress:
    """Progress of ``session_create.yml``: feed events, get lines ("step: text")."""

    def __init__(self, verbose: int = 0) -> None:
        self.verbose = verbose
        self.total = 0
        self.done = 0
        self.agents: list[str] = []
        self.cleanup_shown = False
        self.waits = 0

    def pending_wait(self) -> str:
        self.waits += 1
        return f"{self.waits} wait(s)"

    def feed(self, event: Mapping[str, Any]) -> list[str]:
        kind = str(event.get("event") or "")
        data = event.get("event_data") or {}
        task = str(data.get("task") or "")
        res = data.get("res") or {}
        # Tasks of an included role (roles/appproxy's route) belong to its step.
        step = step_of(task) or (
            "app proxy" if str(data.get("role")).endswith("appproxy") else None
        )
        if kind == "playbook_on_task_start":
            return self._start(task, step)
        if kind == "runner_item_on_ok":
            return self._item_ok(task, res)
        if kind == "runner_retry" and task.startswith("Place the session on the agents"):
            return [f"placing: still PENDING after {self.pending_wait()}, trying again"]
        if kind == "runner_on_ok" and task.startswith("Read capacity"):
            return self._read_ok(res)  # one event per agent read (a play over them)
        if kind == "runner_on_ok":
            return self._ok(task, res)
        failed = kind in ("runner_on_failed", "runner_item_on_failed")
        if failed and self.verbose and not data.get("ignore_errors"):
            return [f"{step or 'task'}: failed in '{task}'"]
        return []

    def _start(self, task: str, step: str | None) -> list[str]:
        lines = [f"task: {task}"] if self.verbose else []
        if task.startswith("Create the containers on their agent") and len(self.agents) == 1:
            lines.append(f"containers {self.done}/{self.total}: creating on {self.agents[0]}")
        elif task.startswith("Create the containers on every agent") and len(self.agents) > 1:
            lines.append(
                f"containers {self.done}/{self.total}: creating on "
                f"{', '.join(self.agents)} in parallel"
            )
        elif task.startswith("Check the gang from main1") and len(self.agents) > 1:
            lines.append("health gate: main1 -> every container")
        elif step == "cleanup" and not self.cleanup_shown:
            self.cleanup_shown = True
            lines.append("cleanup: a step failed, removing what this run made")
        return lines

    def _read_ok(self, res: Mapping[str, Any]) -> list[str]:
        agent = res.get("agent") or {}
        if not agent or not self.verbose:
            return []
        free_cpu = float(agent.get("cpu") or 0) - float(agent.get("used_cpu") or 0)
        free_mem = float(agent.get("mem") or 0) - float(agent.get("used_mem") or 0)
        free_gpu = int(agent.get("gpu") or 0) - int(agent.get("used_gpu") or 0)
        return [
            f"placing: {agent.get('name')} (group {agent.get('group')}) free cpu "
            f"{_num(free_cpu)}, mem {_mem(free_mem)}, gpu {free_gpu}"
        ]

    def _item_ok(self, task: str, res: Mapping[str, Any]) -> list[str]:
        if task.startswith("Wait for every agent"):
            containers = res.get("containers") or []
            self.done += len(containers)
            agent = (res.get("item") or {}).get("item") or res.get("_ansible_item_label") or "?"
            return [f"containers {self.done}/{self.total}: {agent} done"]
        return []

    def _ok(self, task: str, res: Mapping[str, Any]) -> list[str]:
        if task.startswith("Check the session request"):
            self.total = int(res.get("size") or 0)
            hosts = ", ".join(res.get("hosts") or [])
            return [f"check: request ok, {self.total} container(s): {hosts}"]
        if task.startswith("Place the session on the agents"):
            if res.get("need_read"):
                names = list(res["need_read"])
                shown = ", ".join(names[:8]) + (
                    f" and {len(names) - 8} more" if len(names) > 8 else ""
                )
                return [f"placing: reading {len(names)} agent(s): {shown}"]
            if res.get("failed") or res.get("pending") or res.get("msg"):
                # The final error says it; shown here only with -v.
                return [f"placing: {res.get('msg')}"] if self.verbose else []
            self.agents = [str(a) for a in res.get("agents") or []]
            self.total = int(res.get("size") or self.total)
            if res.get("ready"):
                self.done = self.total
                return ["placing: the session exists with this spec and runs (nothing to do)"]
            verb = "placed" if res.get("action") == "create" else "bringing back"
            return [
                f"placing: {verb} {self.total} container(s) on {', '.join(self.agents)} "
                f"({res.get('mode')})"
            ]
        if task.startswith("Generate the session's SSH keys"):
            return ["keys: generated the session's SSH keys (in memory, never printed)"]
        if task.startswith("Create the session network"):
            return _network_line(res.get("network") or {})
        if task.startswith("Create the containers on their agent"):
            # One agent: the same module run made the bridge and ran the health gate.
            containers = res.get("containers") or []
            self.done = len(containers)
            created = len(res.get("created") or [])
            restarted = len(res.get("restarted") or [])
            agent = containers[0].get("agent") if containers else "?"
            lines = _network_line(res.get("network") or {})
            lines.append(
                f"containers {self.done}/{self.total or self.done} on {agent} "
                f"({created} created, {restarted} restarted)"
            )
            return lines + _gate_line(res)
        if task.startswith("Record the session summary"):
            summary = ((res.get("ansible_stats") or {}).get("data") or {}).get("bai_session") or {}
            route = summary.get("appproxy") or {}
            if route.get("ssh"):
                return [f"app proxy: users reach main1 with {route['ssh']}"]
            return []
        if task.startswith("Check the gang from main1"):
            return _gate_line(res)
        return []


def _network_line(net: Mapping[str, Any]) -> list[str]:
    if not net:
        return []
    subnet = f", {net['subnet']}" if net.get("subnet") else ""
    return [f"network: {net.get('name')} ({net.get('driver')}{subnet})"]


def _gate_line(res: Mapping[str, Any]) -> list[str]:
    """The health gate's line: its members, its checks and its time (the SSH mesh's
    members where a module gave no gate)."""
    members = (res.get("gate") or {}).get("members") or {}
    if members:
        checks = sorted({check for found in members.values() for check in found})
        took = res["gate"].get("seconds")
        return [
            f"health gate: ok, {len(members)} member(s), {len(checks)} check(s) "
            f"({', '.join(checks)}) in {took} s"
        ]
    reached = [line[3:] for line in res.get("mesh") or [] if line.startswith("ok ")]
    return [f"SSH check: ok, main1 reaches {', '.join(reached)}"] if reached else []


class PlayProgress:
    """Progress of any other playbook (lab, site, list, destroy): plays and tasks as
    they start, changed results with -v."""

    def __init__(self, verbose: int = 0) -> None:
        self.verbose = verbose
        self.tasks = 0

    def feed(self, event: Mapping[str, Any]) -> list[str]:
        kind = str(event.get("event") or "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            return [f"play: {data.get('play')}"]
        if kind == "playbook_on_task_start":
            self.tasks += 1
            return [f"task: {data.get('task')}"]
        if self.verbose and kind in ("runner_on_ok", "runner_item_on_ok"):
            res = data.get("res") or {}
            if res.get("changed"):
                return [f"  changed: {data.get('host')}"]
        return []


class Printer:
    """Writes progress lines with the time since start; colour only on a terminal
    (and never with NO_COLOR set)."""

    def __init__(self, stream: TextIO | None = None, quiet: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.start = time.monotonic()
        isatty = getattr(self.stream, "isatty", lambda: False)
        self.colour = bool(isatty()) and not os.environ.get("NO_COLOR")

    def __call__(self, lines: list[str]) -> None:
        if self.quiet:
            return
        for line in lines:
            stamp = f"[{time.monotonic() - self.start:5.1f}s]"
            if self.colour:
                head, sep, rest = line.partition(":")
                line = f"\033[36m{head}\033[0m{sep}{rest}" if sep else line
            self.stream.write(f"{stamp} {line}\n")
        self.stream.flush()
