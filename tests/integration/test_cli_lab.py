"""The bai-cluster CLI (docs/cli.md), run for real: ``.venv/bin/bai-cluster`` as a subprocess
against the lab (default inventory); ``-i inventories/local`` in test_cli_local.

Checks the progress lines and the summary of a create, list/show/env as JSON against
what Docker says, ``session ssh`` running a command as user work, exit codes 2 (bad
input) and 3 (PENDING) with nothing created, destroy, and that no private key material
ever lies in the runner's temp folders: a watcher reads every file that appears under the
CLI's TMPDIR while it runs, and the folder must be empty afterwards.
Sessions carry the ``cli-`` prefix and are removed at the end (by label as a last resort).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest
from conftest import bai_cli as cli

pytestmark = [pytest.mark.integration, pytest.mark.lab]

REPO = Path(__file__).resolve().parents[2]
CLI = REPO / ".venv" / "bin" / "bai-cluster"
LAB = "cli-it-lab"
LABEL = "ai.backend.cluster.session"
AGENTS = ("agent1", "agent2")


class Watcher:
    """Reads every file under ``root`` every 20 ms while a command runs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.seen: dict[str, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            for path in self.root.rglob("*"):
                try:
                    if path.is_file():
                        self.seen[f"{path}#{len(self.seen)}"] = path.read_text(errors="replace")
                except OSError:
                    pass  # removed between listing and reading
            self.stop.wait(0.02)

    def __enter__(self) -> Watcher:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


def lab_containers(name: str) -> list[str]:
    """Names of the containers labelled with session ``name`` on both lab agents."""
    found = []
    for agent in AGENTS:
        out = sh(
            "docker",
            "exec",
            f"bai-lab-{agent}",
            "docker",
            "ps",
            "-aq",
            "--filter",
            f"label={LABEL}={name}",
            "--format",
            "{{.Names}}",
        )
        found += out.split()
    return found


def lab_sweep(name: str) -> None:
    for agent in AGENTS:
        node = f"bai-lab-{agent}"
        subprocess.run(
            [
                "docker",
                "exec",
                node,
                "sh",
                "-c",
                f"docker rm -f $(docker ps -aq --filter label={LABEL}={name}) 2>/dev/null;"
                f"docker network rm $(docker network ls -q --filter label={LABEL}={name})"
                " 2>/dev/null",
            ],
            capture_output=True,
            check=False,
        )


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    if not CLI.exists():
        pytest.skip(f"{CLI} is missing: run scripts/setup.sh venv")
    for agent in AGENTS:
        state = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Running}}", f"bai-lab-{agent}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if state.stdout.strip() != "true":
            pytest.skip("the lab is not up (make lab-up)")
    return tmp_path_factory.mktemp("cli-tmp")


def on_user(command: str) -> subprocess.CompletedProcess:
    """A shell command on the lab's user node (a person's machine, public zone)."""
    return subprocess.run(
        ["docker", "exec", "bai-lab-user", "sh", "-c", command],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module")
def people(tmp_path_factory):
    """Three people's keypairs, made on the user node (private keys never leave it):
    ``file`` is given to create as a .pub file, ``line`` as a key line, ``other`` not at
    all. The .pub file lies outside the CLI's TMPDIR."""
    keys = {name: f"/root/.ssh/{LAB}-{name}" for name in ("file", "line", "other")}
    made = on_user(
        "mkdir -p -m 700 /root/.ssh && "
        + " && ".join(
            f"rm -f {k} {k}.pub && ssh-keygen -q -t ed25519 -N '' -C {LAB}-{n} -f {k}"
            for n, k in keys.items()
        )
    )
    assert made.returncode == 0, made.stderr
    public = {n: on_user(f"cat {k}.pub").stdout.strip() for n, k in keys.items()}
    pub_file = tmp_path_factory.mktemp("people") / "person.pub"
    pub_file.write_text(public["file"] + "\n")
    yield {"keys": keys, "public": public, "pub_file": pub_file}
    on_user("rm -f " + " ".join(f"{k} {k}.pub" for k in keys.values()))


@pytest.fixture(scope="module")
def created(tmp, people):
    """A size-2 session on the lab, made by the CLI while a watcher reads its temp files;
    two people's public keys are given with --authorized-key (a .pub file and a line)."""
    lab_sweep(LAB)
    try:
        with Watcher(tmp) as watcher:
            run = cli(
                tmp,
                "session",
                "create",
                LAB,
                "-n",
                "2",
                "--cpu",
                "0.5",
                "--mem",
                "256m",
                "--env",
                "CLI_TEST=yes",
                "--authorized-key",
                str(people["pub_file"]),
                "--authorized-key",
                people["public"]["line"],
            )
        yield run, watcher
    finally:
        cli(tmp, "session", "destroy", LAB)
        lab_sweep(LAB)


def test_create_shows_progress_and_a_summary(created, tmp):
    run, _watcher = created
    assert run.returncode == 0, run.stderr
    steps = [line.split("] ", 1)[1] for line in run.stderr.splitlines() if "] " in line]
    order = [
        "check: request ok, 2 container(s): main1, sub1",
        "placing: placed 2 container(s)",
        "keys: generated",
        f"network: bai-{LAB}-net (bridge",
        "containers 2/2 on agent",
        "health gate: ok, 2 member(s), 9 check(s)",
    ]
    positions = []
    for want in order:
        hits = [i for i, line in enumerate(steps) if line.startswith(want)]
        assert hits, f"no progress line {want!r} in:\n{run.stderr}"
        positions.append(hits[0])
    assert positions == sorted(positions), run.stderr
    assert "\033" not in run.stderr
    assert run.stdout.splitlines()[0] == f"session {LAB} created"
    assert f"bai-{LAB}-main1" in run.stdout and f"bai-{LAB}-sub1" in run.stdout
    assert sorted(lab_containers(LAB)) == [f"bai-{LAB}-main1", f"bai-{LAB}-sub1"]


def test_no_private_key_material_on_disk(created, tmp):
    run, watcher = created
    assert run.returncode == 0, run.stderr
    assert watcher.seen, "the watcher saw no runner files at all"
    session = json.loads(cli(tmp, "--json", "session", "show", LAB).stdout)
    main1 = session["containers"][0]
    key = sh(
        "docker",
        "exec",
        f"bai-lab-{main1['agent']}",
        "docker",
        "exec",
        main1["container"],
        "cat",
        "/home/work/.ssh/id_cluster",
    )
    body = [line for line in key.splitlines() if line and "PRIVATE KEY" not in line]
    assert body, "could not read the session key to compare"
    for name, text in watcher.seen.items():
        assert "PRIVATE KEY" not in text, name
        assert not any(line in text for line in body), name
    assert list(tmp.iterdir()) == [], "the runner's private data dir was left behind"


def test_list_show_env_as_json(created, tmp):
    run, _watcher = created
    assert run.returncode == 0, run.stderr
    rows = json.loads(cli(tmp, "--json", "session", "list").stdout)
    (row,) = [r for r in rows if r["name"] == LAB]
    assert (row["size"], row["running"], row["state"]) == (2, 2, "running")

    show = cli(tmp, "session", "show", LAB, "--json")
    assert show.returncode == 0, show.stderr
    details = json.loads(show.stdout)
    assert [c["host"] for c in details["containers"]] == ["main1", "sub1"]
    assert details["state"] == "running" and details["network"] == f"bai-{LAB}-net"
    main1, sub1 = details["containers"]
    inspect = json.loads(
        sh("docker", "exec", f"bai-lab-{main1['agent']}", "docker", "inspect", main1["container"])
    )[0]
    net = inspect["NetworkSettings"]["Networks"][f"bai-{LAB}-net"]["IPAddress"]
    assert main1["addresses"] == {f"bai-{LAB}-net": net}
    port = inspect["NetworkSettings"]["Ports"]["2200/tcp"][0]["HostPort"]
    assert details["ssh_port"] == int(port) and sub1["ports"] == {}

    env = cli(tmp, "--json", "session", "env", LAB, "sub1")
    assert env.returncode == 0, env.stderr
    values = json.loads(env.stdout)
    assert values["BACKENDAI_CLUSTER_HOST"] == "sub1"
    assert values["BACKENDAI_CLUSTER_HOSTS"] == "main1,sub1"
    assert values["MASTER_ADDR"] == "main1"
    assert json.loads(values["TF_CONFIG"])["task"] == {"type": "worker", "index": 1}
    assert "CLI_TEST" not in values and "PATH" not in values


def test_ssh_runs_as_work_in_the_right_container(created, tmp):
    run, _watcher = created
    assert run.returncode == 0, run.stderr
    ssh = cli(
        tmp,
        "session",
        "ssh",
        LAB,
        "sub1",
        "--",
        # One line, several commands: run by the shell, as `ssh host 'a; b'` does.
        "id -un; hostname; echo $CLI_TEST; ssh main1 hostname",
    )
    assert ssh.returncode == 0, ssh.stderr
    assert ssh.stdout.split() == ["work", "sub1", "yes", "main1"]
    printed = cli(tmp, "session", "ssh", LAB, "--print").stdout.split()
    assert printed[:3] == ["docker", "exec", "-i"] and printed[3] in (
        "bai-lab-agent1",
        "bai-lab-agent2",
    )
    assert printed[-3:] == [f"bai-{LAB}-main1", "bash", "-l"]


def test_authorized_keys_let_exactly_those_people_in_through_the_app_proxy(created, tmp, people):
    """--authorized-key (docs/cli.md): the keys, from a .pub file and as a line, land in
    every container's ~work/.ssh/authorized_keys2, and from the user node each of them
    logs in to main1 through the app proxy route the session shows; a key not given is
    refused there."""
    run, _watcher = created
    assert run.returncode == 0, run.stderr
    details = json.loads(cli(tmp, "--json", "session", "show", LAB).stdout)
    wanted = [people["public"]["file"], people["public"]["line"]]
    for c in details["containers"]:
        keys = sh(
            "docker",
            "exec",
            f"bai-lab-{c['agent']}",
            "docker",
            "exec",
            c["container"],
            "cat",
            "/home/work/.ssh/authorized_keys2",
        )
        assert keys.splitlines() == wanted, (c["host"], keys)
    route = details["appproxy_route"]
    assert route and route["ssh"] == f"ssh -p {route['port']} work@{route['address']}", route

    def login(who: str) -> subprocess.CompletedProcess:
        return on_user(
            f"ssh -i {people['keys'][who]} -o BatchMode=yes -o IdentitiesOnly=yes "
            "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectTimeout=10 "
            f"-p {route['port']} work@{route['address']} 'hostname; id -un'"
        )

    for who in ("file", "line"):
        got = login(who)
        assert (got.returncode, got.stdout.split()) == (0, ["main1", "work"]), (who, got.stderr)
    refused = login("other")
    assert refused.returncode != 0 and "Permission denied" in refused.stderr, refused


def test_authorized_key_file_that_is_not_pub_is_refused_unread(tmp, tmp_path):
    """A file not named .pub (perhaps a private key) is refused before anything runs, and
    its content appears nowhere in the output."""
    secret = tmp_path / "id_ed25519"
    secret.write_text("NOT-A-KEY-" + os.urandom(8).hex() + "\n")
    run = cli(tmp, "session", "create", "cli-it-key", "-n", "1", "--authorized-key", str(secret))
    assert run.returncode == 2, run.stderr
    assert f"--authorized-key: {secret} is not a .pub file (never a private key)" in run.stderr
    assert secret.read_text().strip() not in run.stdout + run.stderr
    assert lab_containers("cli-it-key") == []


def test_bad_input_exits_2_and_creates_nothing(tmp):
    run = cli(tmp, "session", "create", "cli-it-bad", "-n", "0")
    assert run.returncode == 2, run.stderr
    assert "invalid session spec: size" in run.stderr
    assert "(step: check, task: Check the session request)" in run.stderr
    assert lab_containers("cli-it-bad") == []


def test_impossible_request_exits_3_pending(tmp):
    run = cli(tmp, "--json", "session", "create", "cli-it-pend", "-n", "2", "--cpu", "64")
    assert run.returncode == 3, run.stderr
    error = json.loads(run.stdout)["error"]
    assert error["kind"] == "pending" and "PENDING" in error["message"]
    assert error["step"] == "placing"
    assert lab_containers("cli-it-pend") == []


def test_destroy_removes_everything_and_is_idempotent(created, tmp):
    run, _watcher = created
    assert run.returncode == 0, run.stderr
    gone = cli(tmp, "session", "destroy", LAB)
    assert gone.returncode == 0, gone.stderr
    assert gone.stdout.startswith(f"session {LAB}: removed 2 container(s)")
    assert lab_containers(LAB) == []
    again = cli(tmp, "session", "destroy", LAB)
    assert (again.returncode, again.stdout.strip()) == (
        0,
        f"session {LAB}: nothing to remove (no such session)",
    )
    missing = cli(tmp, "session", "show", LAB)
    assert missing.returncode == 1 and f"no session {LAB}" in missing.stderr


# --- lab and site -------------------------------------------------------------------
LAB_IMG = "bai/session:latest"


def lab_state() -> dict[str, object]:
    """What `lab up` could touch: the lab's containers (ID, start time, restarts), its
    networks and volumes, the images on this machine and in the agents."""
    ids = sh("docker", "ps", "-aq", "--filter", "label=ai.backend.lab=bai-lab").split()
    containers = json.loads(sh("docker", "inspect", *ids))
    networks = sh("docker", "network", "ls", "-q", "--filter", "label=ai.backend.lab=bai-lab")
    volumes = sh("docker", "volume", "ls", "-q", "--filter", "label=ai.backend.lab=bai-lab")
    image = "{{.Id}}"
    return {
        "containers": sorted(
            (c["Name"], c["Id"], c["State"]["StartedAt"], c["RestartCount"]) for c in containers
        ),
        "networks": sorted(networks.split()),
        "volumes": sorted(volumes.split()),
        "images": [
            sh("docker", "image", "inspect", "-f", image, ref)
            for ref in (LAB_IMG, "bai/lab-node:latest")
        ],
        "agent_images": [
            sh("docker", "exec", f"bai-lab-{a}", "docker", "image", "inspect", "-f", image, LAB_IMG)
            for a in AGENTS
        ],
    }


def test_lab_up_on_the_running_lab_changes_nothing(tmp):
    """`bai-cluster lab up` on the lab that is up: success, changed=0, and nothing was
    recreated or restarted, no image rebuilt or reloaded."""
    before = lab_state()
    run = cli(tmp, "--json", "lab", "up", timeout=600)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["playbook"] == "playbooks/lab.yml"
    assert summary["ok"].get("localhost", 0) > 0, summary
    assert all(n == 0 for n in summary["changed"].values()), summary
    assert summary["failures"] == {}, summary
    assert lab_state() == before


def test_site_with_tags_converges_what_drifted_and_only_that(tmp):
    """`bai-cluster site --tags agent_network`: a persisted sysctl file removed on agent1
    comes back as the role writes it, agent1 is the only host changed, and the recap
    lists exactly the hosts of the plays run (preflight is tagged always)."""
    path = "/etc/sysctl.d/60-bai-agent-network.conf"
    wanted = sh("docker", "exec", "bai-lab-agent2", "cat", path)
    sh("docker", "exec", "bai-lab-agent1", "rm", "-f", path)
    try:
        run = cli(tmp, "site", "--tags", "agent_network", timeout=600)
        assert run.returncode == 0, run.stderr
        recap = dict(line.split(": ", 1) for line in run.stdout.splitlines())
        assert recap.pop("agent1").endswith(" changed=1"), run.stdout
        assert sorted(recap) == [
            "agent2",
            "appproxy",
            "manager",
            "manager2",
            "manager3",
            "webserver",
        ], run.stdout
        assert all(v.endswith(" changed=0") for v in recap.values()), run.stdout
    finally:
        restored = subprocess.run(
            ["docker", "exec", "bai-lab-agent1", "cat", path],
            capture_output=True,
            text=True,
            check=False,
        )
        if restored.returncode != 0:  # leave the lab as it was found
            subprocess.run(
                ["docker", "exec", "-i", "bai-lab-agent1", "sh", "-c", f"cat > {path}"],
                input=wanted + "\n",
                text=True,
                check=False,
            )
    assert restored.stdout.strip() == wanted
