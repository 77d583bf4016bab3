"""Helpers for tests that look inside the lab's nodes (Docker-in-Docker containers).

Session containers live in the agents' inner engines, so everything goes through
``docker exec bai-lab-agentN docker ...`` (the SDK's exec_run on the node container). The
shared ``lab`` fixture (conftest.py) is a ``Lab``: the node containers by name.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import docker
import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import LABEL_SESSION

AGENTS = ("agent1", "agent2")
# Every node of the lab (scripts/lab.py), in the order docs/lab.md lists them.
NODES = (
    "webserver",
    "manager",
    "manager2",
    "manager3",
    "appproxy",
    *AGENTS,
    "user",
    "intruder",
)
# The label the lab puts on everything it makes, and the one naming a node.
LAB_LABEL = "ai.backend.lab"
LAB_NODE_LABEL = "ai.backend.lab.node"


def container_name(node: str) -> str:
    """The Docker container a lab node is: ``bai-lab-<node>``."""
    return f"bai-lab-{node}"


def spanning_session(name: str) -> dict:
    """Extra vars for a multi-node session of 3 x 2 CPUs: it cannot fit on one of the lab's
    4-CPU agents, so it spans agent1 and agent2 over an overlay."""
    return {
        "session_name": name,
        "session_size": 3,
        "session_mode": "multi-node",
        "session_resources": {"cpu": 2, "mem": "512m"},
    }


def spanning_by_memory(name: str) -> dict:
    """Extra vars for a multi-node session of 2 x (0.5 CPU, 5g): no lab agent (8g offered)
    holds both, so it spans agent1 and agent2 over an overlay, at little CPU."""
    return {
        "session_name": name,
        "session_size": 2,
        "session_mode": "multi-node",
        "session_resources": {"cpu": 0.5, "mem": "5g"},
    }


def lab_node(docker_client, name: str):
    """The running lab node container ``bai-lab-<name>``; skips when it does not exist or
    is not running (the lab is down). Any other Docker error is an error, not a skip."""
    try:
        node = docker_client.containers.get(container_name(name))
    except docker.errors.NotFound:
        pytest.skip(f"the lab is not up (no {container_name(name)}; make lab-up)")
    if node.status != "running":
        pytest.skip(f"the lab is not up ({container_name(name)} is {node.status}; make lab-up)")
    return node


class Lab:
    """The lab's node containers by node name (``lab["agent1"]``, ``lab["appproxy"]``),
    each looked up when first asked for: a node that is not up skips the test that asks
    (the lab is down). ``lab.agents`` is the agents alone, where sessions run;
    ``lab.manager`` the first manager, where a session's overlay is made. Not a mapping
    on purpose: a test names the nodes it means (looping over all nine lab nodes where
    the agents were meant failed CI twice)."""

    def __init__(self, client) -> None:
        self.client = client
        self._found: dict[str, Any] = {}

    def __getitem__(self, name: str):
        if name not in NODES:
            raise KeyError(name)
        if name not in self._found:
            self._found[name] = lab_node(self.client, name)
        return self._found[name]

    @property
    def agents(self) -> dict[str, Any]:
        return {agent: self[agent] for agent in AGENTS}

    @property
    def manager(self):
        return self["manager"]


# Each lab host's management address (bai_admin_cidrs: this machine reaches it there).
ADDRESS = {
    "webserver": "10.210.2.10",
    "manager": "10.210.2.11",
    "manager2": "10.210.2.13",
    "manager3": "10.210.2.14",
    "appproxy": "10.210.3.12",
    "agent1": "10.210.3.21",
    "agent2": "10.210.3.22",
}
SHARED = "/srv/bai-data"  # the agents' shared data volume (the same on every agent)


@contextmanager
def data_folder(lab: Lab, name: str) -> Iterator[str]:
    """A folder ``name`` in the agents' shared data volume, anyone may write; removed after."""
    path = f"{SHARED}/{name}"
    code, out = on_agent(lab["agent1"], "bash", "-c", f"mkdir -p {path} && chmod 777 {path}")
    assert code == 0, out
    try:
        yield path
    finally:
        on_agent(lab["agent1"], "rm", "-rf", path)


def node_exec(client, node: str, *argv: str) -> tuple[int, str]:
    """Run argv on lab node ``node`` (its container, through ``client``); (exit code,
    output as it came)."""
    code, out = client.containers.get(container_name(node)).exec_run(list(argv))
    return code, out.decode(errors="replace")


def on_agent(node, *argv):
    """Run argv on the node; (exit code, stripped output)."""
    code, out = node.exec_run(list(argv))
    return code, out.decode(errors="replace").strip()


END_OF_OUTPUT = "--- end of output ---"


def read_on(node, command: str, tries: int = 3) -> str:
    """The whole output of a shell command on the node, for tests that compare it.

    exec_run can hand back an empty stream for a command that ran and exited 0: the
    engine attaches the output after a short-lived process has already written it
    (docker-py#2042, moby#27289; seen here once reading /proc/sys in test_role_checks_lab).
    A marker echoed after the command tells a lost stream from an empty output, and only a
    read that lost its stream is tried again; a failing command fails the test at once.
    """
    for _attempt in range(tries):
        code, out = on_agent(
            node, "sh", "-c", f"{command}; status=$?; echo '{END_OF_OUTPUT}'; exit $status"
        )
        assert code == 0, (command, out)
        if out.endswith(END_OF_OUTPUT):
            return out[: -len(END_OF_OUTPUT)].strip()
    raise AssertionError(f"{command!r}: the engine lost its output {tries} times in a row")


def in_session(node, container, command, user="work"):
    """Run a bash command as `user` in a session container on that node's engine."""
    return on_agent(node, "docker", "exec", "-u", user, container, "bash", "-c", command)


def inspect(node, container) -> dict:
    code, out = on_agent(node, "docker", "inspect", container)
    assert code == 0, out
    return json.loads(out)[0]


def started(lab, summary) -> dict:
    """Each container of the session: (Id, State.StartedAt), read on its agent."""
    found = {}
    for item in summary["containers"]:
        info = inspect(lab[item["agent"]], item["container"])
        found[item["container"]] = (info["Id"], info["State"]["StartedAt"])
    return found


def _session_nodes(lab: Lab) -> list:
    """Where a session leaves things: the agents, and the manager (its overlay) while that
    node runs (a test may have stopped it)."""
    lab.manager.reload()
    return [*lab.agents.values(), *([lab.manager] if lab.manager.status == "running" else [])]


def sweep(lab: Lab, name: str) -> None:
    """Remove whatever a session left on the agents (and its overlay on the manager)."""
    label = f"label={LABEL_SESSION}={name}"
    for node in lab.agents.values():
        _code, ids = on_agent(node, "docker", "ps", "-aq", "--filter", label)
        if ids:
            on_agent(node, "docker", "rm", "-f", *ids.split())
    for node in _session_nodes(lab):
        _code, nets = on_agent(node, "docker", "network", "ls", "-q", "--filter", label)
        if nets:
            on_agent(node, "docker", "network", "rm", *nets.split())


def count(lab: Lab, name: str) -> int:
    """Containers and networks of a session left on the agents and the manager."""
    label = f"label={LABEL_SESSION}={name}"
    total = 0
    for node in lab.agents.values():
        _code, out = on_agent(node, "docker", "ps", "-aq", "--filter", label)
        total += len(out.split())
    for node in _session_nodes(lab):
        _code, out = on_agent(node, "docker", "network", "ls", "-q", "--filter", label)
        total += len(out.split())
    return total


def swarm_ready(manager, agent: str) -> bool:
    code, out = on_agent(manager, "docker", "node", "inspect", "-f", "{{.Status.State}}", agent)
    return (code, out) == (0, "ready")


def restart_engine(lab: Lab, agent: str) -> None:
    """``service docker restart`` on an agent node (the lab's nodes have no systemd), then
    wait until its engine is back in the swarm and the managers see it ready."""
    code, out = on_agent(lab[agent], "service", "docker", "restart")
    assert code == 0, out
    wait_for(
        lambda: (
            on_agent(lab[agent], "docker", "info", "--format", "{{.Swarm.LocalNodeState}}")
            == (0, "active")
        ),
        f"{agent}'s engine back in the swarm",
    )
    wait_for(lambda: swarm_ready(lab.manager, agent), f"{agent} ready in the swarm")


def clear_stale_overlays(lab: Lab, name: str | None = None, seconds: float = 20) -> list[str]:
    """The agents that still listed session ``name``'s overlay (any session's, without a
    name) after the manager had removed it, whose engines this restarted to clear it.
    Docker can keep a worker's side of a removed overlay (only its load-balancer endpoint,
    ``lb-NETWORK``, left) after a container failed to attach to it, across an engine
    restart or under load (docs/sessions.md, "After a restart"); a worker cannot remove a
    swarm network, and only restarting its engine clears it. A worker that is still
    detaching drops it within ``seconds`` by itself."""
    label = f"label={LABEL_SESSION}={name}" if name else f"label={LABEL_SESSION}"
    if on_agent(lab.manager, "docker", "network", "ls", "-q", "--filter", label)[1].strip():
        return []  # the manager still has it: a leftover, not a stale attachment

    def listed(agent: str) -> bool:
        argv = ["docker", "network", "ls", "-q", "--filter", label, "--filter", "scope=swarm"]
        return bool(on_agent(lab[agent], *argv)[1].strip())

    stale = []
    for agent in lab.agents:
        deadline = time.monotonic() + seconds
        while listed(agent) and time.monotonic() < deadline:
            time.sleep(1)
        if listed(agent):
            stale.append(agent)
            restart_engine(lab, agent)
            wait_for(lambda a=agent: not listed(a), f"{agent}'s engine drops the overlay of {name}")
    return stale


def docker_did_not_restore(state: dict) -> str | None:
    """Why Docker's restart policy left a session container stopped, when the reason is
    the engine behaviour docs/sessions.md ("After a restart") documents for a container
    attached to a swarm overlay, else None: "attach failed" (State.Error says attaching to
    the network failed) or "not started" (exited with code 0 and no error: the engine's
    one try did not happen). A stopped container with any other state is not allowed."""
    if state.get("Running"):
        return None
    if "attaching to network failed" in (state.get("Error") or ""):
        return "attach failed"
    if state.get("Status") == "exited" and state.get("ExitCode") == 0 and not state.get("Error"):
        return "not started"
    return None


def wait_for(check, what: str, seconds: float = 90, why=lambda: "") -> None:
    """Poll ``check`` every second until it is true; fail naming ``what`` (and ``why()``)."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {seconds:.0f} s {why()}"
        time.sleep(1)


def recap(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP lines of a text run -> {host: {ok: n, changed: n, failed: n, ...}}."""
    rows = {}
    for m in re.finditer(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$", output, re.M):
        rows[m.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
    return rows


def task_results(output: str, task: str) -> list[str]:
    """The status words (ok, changed, skipping, failed...) printed under TASK [task]."""
    block = (
        output.split(f"TASK [{task}]", 1)[1].split("TASK [", 1)[0]
        if f"TASK [{task}]" in output
        else ""
    )
    return re.findall(r"^(\w+): \[", block, re.M)


def one_line(output: str) -> str:
    """Ansible wraps long messages; compare against the text with whitespace collapsed."""
    return " ".join(output.replace("''", "'").split())


def changed_hosts(run: Any) -> dict[str, int]:
    """{host: changed} for every host in a PlaybookRun's recap that changed something."""
    return {h: s["changed"] for h, s in run.result.get("stats", {}).items() if s["changed"]}


# Probes are bash /dev/tcp connects with a 3 s timeout, run in parallel inside the probing
# node: open (the first bytes are kept), refused (a reset), noroute, timeout (dropped).
PROBE = r"""
probe() {
  read1='{ timeout 1 head -c 40 <&3 || true; }'
  out=$(timeout 3 bash -c "exec 3<>/dev/tcp/$1/$2 && $read1" 2>&1); rc=$?
  case "$rc:$out" in
    124:*) r=timeout ;;
    *"Network is unreachable"*|*"No route to host"*) r=noroute ;;
    *"Connection refused"*) r=refused ;;
    0:*) r="open $(printf %s "$out" | tr -c '[:print:]' ' ')" ;;
    *) r="error $rc $(printf %s "$out" | tr -c '[:print:]' ' ')" ;;
  esac
  echo "$1:$2 $r"
}
"""


def probe(node, targets: list[tuple[str, int]]) -> dict[tuple[str, int], str]:
    """Connect from `node` to every (address, port) in parallel; {target: result}."""
    calls = " ".join(f"probe {a} {p} &" for a, p in targets)
    code, out = on_agent(node, "bash", "-c", PROBE + calls + " wait")
    assert code == 0, out
    results = {}
    for line in out.splitlines():
        target, _sep, result = line.partition(" ")
        address, _sep, port = target.rpartition(":")
        results[(address, int(port))] = result
    assert set(results) == set(targets), out
    return results
