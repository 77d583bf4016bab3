"""Shared fixtures for the integration tests: run ansible-playbook, talk to Docker.

Kept small on purpose (several test files share it): ``run_playbook`` runs a playbook
of this repository with the venv's ansible-playbook and returns its JSON result, and
``docker_client`` is a docker SDK client for this machine's engine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_AGENT,
    LABEL_SESSION,
)
from labtools import Lab, clear_stale_overlays, container_name

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"


@dataclass(repr=False)
class PlaybookRun:
    """Outcome of one ansible-playbook run (stdout callback: ansible.posix.json)."""

    args: list[str]
    rc: int
    stdout: str
    stderr: str
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def stats(self) -> dict[str, Any]:
        """set_stats data recorded with per_host: false."""
        return self.result.get("global_custom_stats") or {}

    @property
    def hosts(self) -> list[str]:
        """The hosts in the play recap: those some play ran on (delegation not counted)."""
        return sorted(self.result.get("stats", {}))

    def changed(self, host: str = "localhost") -> int:
        return self.result.get("stats", {}).get(host, {}).get("changed", -1)

    @property
    def failures(self) -> list[str]:
        """The msg of every failed task result (loop items included)."""
        found = []
        for play in self.result.get("plays", []):
            for task in play.get("tasks", []):
                for res in task.get("hosts", {}).values():
                    items = [res, *res.get("results", [])]
                    found += [str(r.get("msg")) for r in items if r.get("failed")]
        return found

    def __repr__(self) -> str:
        tail = "\n".join(self.failures) or self.stdout[-3000:]
        return (
            f"ansible-playbook {' '.join(self.args)} -> rc {self.rc}\n{tail}\n{self.stderr[-2000:]}"
        )


def _parse(stdout: str) -> dict[str, Any]:
    # profile_tasks (enabled in ansible.cfg) prints timing lines around the JSON.
    match = re.search(r"^\{", stdout, re.M)
    if not match:
        return {}
    try:
        result, _end = json.JSONDecoder().raw_decode(stdout[match.start() :])
    except ValueError:
        return {}
    return result


def _run(argv: list[str], env: dict[str, str], cwd: Path, timeout: int):
    """Every command the integration tests run from this repository goes through here: a
    hang past ``timeout`` fails the test (and says which command) instead of eating CI's
    time, and with BAI_PLAYBOOK_TIMES each run's time is logged."""
    began, cpu = time.monotonic(), os.times()
    proc = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    _log_time(argv, began, cpu)
    return proc


def ansible_playbook(
    playbook: str,
    *args: str,
    extra_vars: dict[str, Any] | None = None,
    inventory: str | None = None,
    timeout: int = 900,
) -> PlaybookRun:
    """Run ``playbooks/<playbook>`` (or an absolute path) from the repository root, with
    the JSON stdout callback; never raises on failure."""
    argv, env = _command(playbook, args, extra_vars, inventory)
    proc = _run(argv, env, REPO, timeout)
    return PlaybookRun(argv[1:], proc.returncode, proc.stdout, proc.stderr, _parse(proc.stdout))


def ansible(
    tool: str,
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path = REPO,
    timeout: int = 900,
    prefix: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """Run the venv's ``tool`` (``ansible-playbook``, ``ansible``...) with this
    repository's ansible.cfg and Ansible's default text output (for the tests that read
    the recap or a task's lines), under ``prefix`` where given (another network
    namespace); never raises on failure."""
    full_env = {**_ansible_env(), "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), **(env or {})}
    return _run([*prefix, str(VENV_BIN / tool), *args], full_env, cwd, timeout)


def _log_time(argv: list[str], began: float, cpu: os.times_result) -> None:
    """With BAI_PLAYBOOK_TIMES=FILE: one JSON line per run (the test, the playbook, its
    wall and CPU seconds), to see where the integration tests spend their time."""
    log = os.environ.get("BAI_PLAYBOOK_TIMES")
    if not log:
        return
    tool = Path(argv[0]).name
    what, args = (Path(argv[1]).name, argv[2:]) if tool == "ansible-playbook" else (tool, argv[1:])
    now = os.times()
    spent = (now.children_user - cpu.children_user) + (now.children_system - cpu.children_system)
    row = {
        "test": os.environ.get("PYTEST_CURRENT_TEST", ""),
        "playbook": what,
        "args": [a for a in args if not a.startswith("{")][:4],
        "wall": round(time.monotonic() - began, 2),
        "cpu": round(spent, 2),
    }
    with open(log, "a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


def _ansible_env() -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
    }


def _command(
    playbook: str, args: Any, extra_vars: dict[str, Any] | None, inventory: str | None
) -> tuple[list[str], dict[str, str]]:
    path = playbook if os.path.isabs(playbook) else f"playbooks/{playbook}"
    argv = [str(VENV_BIN / "ansible-playbook"), path]
    if inventory:
        argv += ["-i", inventory]
    if extra_vars:
        argv += ["-e", json.dumps(extra_vars)]
    argv += list(args)
    env = {
        **_ansible_env(),
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_SHOW_CUSTOM_STATS": "true",
    }
    return argv, env


def start_playbook(
    playbook: str,
    *args: str,
    extra_vars: dict[str, Any] | None = None,
    inventory: str | None = None,
) -> subprocess.Popen:
    """Start ``ansible_playbook``'s run in the background (its own process group, so a
    test can kill it whole); ``finish_playbook`` collects it. For races."""
    argv, env = _command(playbook, args, extra_vars, inventory)
    return subprocess.Popen(
        argv,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def create_at_once(
    names: list[str],
    resources: dict[str, Any],
    *,
    each: Any = lambda _index: {},
    timeout: int = 900,
    inventory: str | None = None,
    **variables: Any,
) -> list[PlaybookRun]:
    """session_create.yml for each of ``names`` (size 1, ``resources``), all started at
    once and waited for: their runs, in order. ``each(i)`` adds variables to the i-th
    create (which manager it goes through); ``variables`` are ``session_KEY`` for all."""
    procs = [
        start_playbook(
            "session_create.yml",
            extra_vars={
                "session_name": name,
                "session_size": 1,
                "session_resources": resources,
                **{f"session_{key}": value for key, value in variables.items()},
                **each(i),
            },
            inventory=inventory,
        )
        for i, name in enumerate(names)
    ]
    return [finish_playbook(proc, timeout=timeout) for proc in procs]


def finish_playbook(proc: subprocess.Popen, timeout: int = 900) -> PlaybookRun:
    out, err = proc.communicate(timeout=timeout)
    return PlaybookRun(list(proc.args[1:]), proc.returncode, out, err, _parse(out))


def bai_cli(tmp: Path | None, *argv: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run the venv's bai-cluster (with ``tmp`` as its TMPDIR, when given); never raises
    on failure."""
    env = {**os.environ, "NO_COLOR": "1", **({"TMPDIR": str(tmp)} if tmp else {})}
    return _run([str(VENV_BIN / "bai-cluster"), *argv], env, REPO, timeout)


def virtual_agents(tmp_path: Path, agents: tuple[str, ...], cpu: int, mem: str = "2g") -> Path:
    """An inventory of virtual agents (``bai_agent_id`` slots of this machine's engine) of
    ``cpu`` CPUs and ``mem`` each, with the test's own file ledger."""
    path = tmp_path / "queue.yml"
    ledger = tmp_path / "ledger.json"
    path.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "vars": {"bai_ledger_path": str(ledger), "bai_ledger_store": "file"},
                    "hosts": {
                        "localhost": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                        }
                    },
                    "children": {
                        "agents": {
                            "hosts": {name: {"bai_agent_id": name} for name in agents},
                            "vars": {
                                "ansible_connection": "local",
                                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                                "bai_agent_resources": {"cpu": cpu, "mem": mem, "gpu": 0},
                            },
                        }
                    },
                }
            }
        )
    )
    return path


def labels_of(docker_client, name: str) -> list[dict]:
    """The labels of every container (any state) of session ``name`` on this engine."""
    found = docker_client.containers.list(all=True, filters={"label": f"{LABEL_SESSION}={name}"})
    return [c.labels for c in found]


@pytest.fixture
def gone(docker_client, tmp_path):
    """Names of sessions (inventories/local) the test makes: those still there after it
    are destroyed."""
    names: list[str] = []
    yield names
    for name in names:
        if labels_of(docker_client, name):
            bai_cli(tmp_path, "-i", "inventories/local", "session", "destroy", name)


def cli_ok(tmp: Path, inventory: Path, *argv: str) -> None:
    """bai-cluster -i INVENTORY --quiet ARGV, which must succeed."""
    run = bai_cli(tmp, "-i", str(inventory), "--quiet", *argv)
    assert run.returncode == 0, (argv, run.stdout, run.stderr)


def agent_containers(docker_client, agent: str) -> tuple[int, set[str]]:
    """The containers agent ``agent`` (a virtual agent's label) holds on this engine, in
    any state, and the sessions they are of."""
    found = docker_client.containers.list(all=True, filters={"label": f"{LABEL_AGENT}={agent}"})
    return len(found), {c.labels[LABEL_SESSION] for c in found if LABEL_SESSION in c.labels}


@dataclass
class PrometheusAPI:
    """A Prometheus's HTTP API at ``url``: instant queries and plain GETs."""

    url: str

    def query(self, expr: str) -> list[dict]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def value(self, expr: str) -> float | None:
        found = self.query(expr)
        assert len(found) <= 1, (expr, found)
        return float(found[0]["value"][1]) if found else None

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(self.url + path, timeout=10) as answer:
            return json.load(answer)


@pytest.fixture(scope="session")
def run_playbook():
    """``run_playbook("session_create.yml", extra_vars={...}, inventory="inventories/local")``."""
    return ansible_playbook


# Drift made behind Ansible's back before the shared converge: agent1's firewall table
# deleted, the web server's boot script for it removed. The first run must repair both.
SITE_DRIFT = (
    ("agent1", ["nft", "delete", "table", "inet", "bai_firewall"]),
    ("webserver", ["rm", "/etc/init.d/bai-firewall"]),
)


@pytest.fixture(scope="session")
def site_converged(docker_client) -> tuple[PlaybookRun, PlaybookRun]:
    """site.yml twice on the lab, once per test run: (first, second). Over SSH as the
    unprivileged bai-admin with sudo (inventories/lab-ssh), the way an operator reaches a
    real cluster, after the drift above. The modules that check the converge
    (test_agents_lab, test_site_lab, test_swarm_lab, test_firewall_lab, test_ssh_lab) share
    it: each run of site.yml on the lab costs about 160 s of CPU, most of a core-minute
    per host."""
    for host, argv in SITE_DRIFT:
        made = docker_client.containers.get(container_name(host)).exec_run(argv)
        assert made.exit_code == 0, (host, argv, made.output.decode())
    site, ssh = str(REPO / "site.yml"), "inventories/lab-ssh"
    return ansible_playbook(site, inventory=ssh), ansible_playbook(site, inventory=ssh)


@pytest.fixture(scope="session")
def docker_client():
    """A docker SDK client for this machine's engine; skips when there is none."""
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.skip(f"no Docker engine: {exc}")
    yield client
    client.close()


@pytest.fixture(scope="session")
def lab(docker_client) -> Lab:
    """The embedded lab's node containers by name (``lab["agent1"]``, ``lab.agents``,
    ``lab.manager``); a test that asks for a node skips when the lab is not up."""
    return Lab(docker_client)


@pytest.fixture(scope="session")
def manager(lab):
    """The lab's first manager node (the ledger's and the overlays' home)."""
    return lab.manager


# --- every module starts from empty agents and leaves them empty --------------------------
def _session_leftovers(client, local: bool, lab: bool) -> list[str]:
    """Session containers and networks on this machine's engine (``local``) and, when the
    lab is up, inside its agents' and manager's engines (``lab``): ["where: name", ...]."""
    found = []
    if local:
        found += [
            f"local: {c.name}"
            for c in client.containers.list(all=True, filters={"label": LABEL_SESSION})
        ]
        found += [
            f"local: network {n.name}"
            for n in client.networks.list(filters={"label": LABEL_SESSION})
        ]
    for node in ("agent1", "agent2", "manager") if lab else ():
        try:
            container = client.containers.get(container_name(node))
        except docker.errors.NotFound:
            continue
        if container.status != "running":
            continue
        for kind, argv in (
            ("", ["docker", "ps", "-a", "--format", "{{.Names}}"]),
            ("network ", ["docker", "network", "ls", "--format", "{{.Name}}"]),
        ):
            code, out = container.exec_run([*argv, "--filter", f"label={LABEL_SESSION}"])
            assert code == 0, out.decode(errors="replace")
            found += [f"{node}: {kind}{name}" for name in out.decode().split()]
    return found


def _remove_leftovers(client, local: bool, lab: bool) -> None:
    if local:
        for c in client.containers.list(all=True, filters={"label": LABEL_SESSION}):
            c.remove(force=True)
        for n in client.networks.list(filters={"label": LABEL_SESSION}):
            n.remove()
    for node in ("agent1", "agent2", "manager") if lab else ():
        try:
            container = client.containers.get(container_name(node))
        except docker.errors.NotFound:
            continue
        label = f"label={LABEL_SESSION}"
        container.exec_run(
            ["sh", "-c", f"docker rm -f $(docker ps -aq --filter {label}) 2>/dev/null"]
        )
        container.exec_run(
            ["sh", "-c", f"docker network rm $(docker network ls -q --filter {label}) 2>/dev/null"]
        )
    if lab:
        # An overlay a worker kept after the managers removed it (a Docker defect,
        # docs/sessions.md "After a restart") cannot be removed there: only restarting
        # that agent's engine clears it, so that one leak fails one module, not the rest.
        stale = clear_stale_overlays(Lab(client))
        if stale:
            print(f"\nagents whose engine kept a removed session overlay, restarted: {stale}")


def _engines_of(module: pytest.Module) -> tuple[bool, bool]:
    """(local, lab): which engines the module's tests selected in this run work on. A test
    marked ``lab`` works on the lab's engines, any other on this machine's.

    `make test` runs the two kinds in two pytest processes at once (``-m lab`` and
    ``-m "not lab"``): each checks only the engines its own tests use, since the other
    process's sessions come and go on the others."""
    items = [item for item in module.session.items if item.module is module.obj]
    lab = [item.get_closest_marker("lab") is not None for item in items]
    return (not all(lab)), any(lab)


# The ledger inventories/local uses when a test names none (playbooks/vars/session.yml).
LOCAL_LEDGER = Path("/var/lib/bai-cluster/ledger.json")


def _stale_local_sessions(client) -> list[str]:
    """Names of the sessions on this machine's engine or in its default ledger."""
    names = {
        c.labels[LABEL_SESSION]
        for c in client.containers.list(all=True, filters={"label": LABEL_SESSION})
    }
    if LOCAL_LEDGER.exists():
        names |= set(json.loads(LOCAL_LEDGER.read_text()).get("sessions", {}))
    return sorted(names)


@pytest.fixture(scope="session", autouse=True)
def engines_start_clean(request, docker_client):
    """A run starts from empty engines, whatever an earlier run left.

    A run that was cut off (a killed CI job, a machine stopped mid-test) leaves sessions
    behind, and an engine restarts their containers when it starts again (their restart
    policy), so they outlive the machine's reboot. They are not this run's finding, but
    every module would trip over them: each is destroyed with the destroy playbook (its
    ledger entry goes too), then whatever is left is swept, and what was found is printed.
    Only the engines this pytest process uses are touched (the lab lane and the local lane
    run at once)."""
    items = request.session.items
    lab = any(item.get_closest_marker("lab") is not None for item in items)
    local = any(item.get_closest_marker("lab") is None for item in items)
    found = _session_leftovers(docker_client, local, lab)
    stale = _stale_local_sessions(docker_client) if local else []
    if found or stale:
        print(f"\nleft by an earlier run, removed first: {found} (sessions {stale})")
        for name in stale:
            ansible_playbook(
                "session_destroy.yml",
                extra_vars={"session_name": name},
                inventory="inventories/local",
                timeout=300,
            )
        _remove_leftovers(docker_client, local, lab)
    yield


@pytest.fixture(scope="module", autouse=True)
def agents_start_and_end_empty(request, docker_client):
    """Placement depends on what the agents already run, so a test module must not see
    another module's sessions: each module checks the engines it uses are empty before
    its first test, and after its last one (a leak fails the leaking module, then is
    removed so the next module still starts clean)."""
    engines = _engines_of(request.node)
    before = _session_leftovers(docker_client, *engines)
    assert before == [], f"{request.module.__name__} starts with sessions left over: {before}"
    yield
    after = _session_leftovers(docker_client, *engines)
    if after:
        _remove_leftovers(docker_client, *engines)
    assert after == [], f"{request.module.__name__} left sessions behind: {after}"
