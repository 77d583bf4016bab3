"""gpu_runtime on real Docker: the lab agents (no GPU) and a simulated NVIDIA agent.

1. The lab (needs `make lab-up`): `site.yml --tags gpu_runtime` on agents without an
   accelerator detects nothing, says so, changes nothing (check mode included), and
   daemon.json keeps no runtime.

2. SIMULATED NVIDIA agent (needs a Docker engine and the bai/lab-node image, not the
   lab). No machine running these tests has a GPU, so a throwaway Docker-in-Docker
   container stands in for a GPU agent: /dev/nvidia0, /dev/nvidia1 and /dev/nvidiactl
   are made with mknod (no driver behind them), `nvidia-smi` is a script replaying the
   recorded H100 output of tests/unit/fixtures/gpu, and the container toolkit is four
   stub .deb packages with the real package names (nvidia-ctk answers --version,
   `cdi generate` and `cdi list`; the runtime and hook do nothing GPU-related), installed
   through gpu_runtime_nvidia_local_packages_dir (the air-gapped path; NVIDIA's
   repository cannot be reached here). What is real: the role's decisions and file
   writes, the package installation, the runtime reaching daemon.json through the real
   site.yml wiring, the inner engine accepting it, idempotence, the missing-driver
   failure, and check-gpu-node.sh's host-level steps (its container steps need a GPU).

GPU sessions: on the lab, a GPU request is PENDING (for ever: no agent has a
GPU) and creates nothing; GPUs only *declared* in bai_agent_resources.gpu are counted by
placement but creating containers with them is refused, leaving nothing behind; a
session without GPUs has GPU_COUNT=0 and N_GPUS=0 in docker exec and SSH logins. On the
SIMULATED NVIDIA agent: each container's device request names exactly its own device,
one more GPU request is PENDING while both are held, and a container without GPUs gets
no device and NVIDIA_VISIBLE_DEVICES=void.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import tarfile
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml
from ansible_collections.bai.cluster.plugins.module_utils.containers.gate import (
    CHECKS as GATE_CHECKS,
)
from conftest import ansible, finish_playbook, start_playbook
from labtools import one_line, recap

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "unit" / "fixtures" / "gpu"
AGENTS = ["agent1", "agent2"]
SIM_IMAGE = "bai/lab-node:latest"
SIM_LABEL = "ai.backend.cluster.gpu-sim"


def adhoc_json(module: str, *args: str) -> dict[str, Any]:
    """Run ``module`` on the agents ad hoc, with the json callback: each agent's result."""
    run = ansible(
        "ansible",
        "agents",
        "-m",
        module,
        *args,
        env={"ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"},
    )
    assert run.returncode == 0, tail(run)
    # The json callback's document; the timing callback prints after it.
    document, _end = json.JSONDecoder().raw_decode(run.stdout[run.stdout.index("{") :])
    return document["plays"][0]["tasks"][0]["hosts"]


def tail(run: subprocess.CompletedProcess[str]) -> str:
    return run.stdout[-5000:] + run.stderr[-2000:]


@pytest.fixture(scope="module")
def client() -> docker.DockerClient:
    return docker.from_env()


# --- 1. the lab: no GPU, no change -----------------------------------------------------
@pytest.fixture(scope="module")
def lab(client):
    for node in AGENTS:
        try:
            if client.containers.get(f"bai-lab-{node}").status != "running":
                pytest.skip("the lab is not up (make lab-up)")
        except docker.errors.NotFound:
            pytest.skip("the lab is not up (make lab-up)")
    check = ansible("ansible-playbook", "site.yml", "--tags", "gpu_runtime", "--check", "--diff")
    real = ansible("ansible-playbook", "site.yml", "--tags", "gpu_runtime")
    return check, real


@pytest.mark.lab
def test_lab_agents_have_no_gpu_and_nothing_changes(lab):
    check, real = lab
    for run in (check, real):
        assert run.returncode == 0, tail(run)
        rows = recap(run.stdout)
        for node in AGENTS:
            assert rows[node]["failed"] == 0 and rows[node]["changed"] == 0, rows
        text = one_line(run.stdout)
        for node in AGENTS:
            assert (
                f"{node} has no GPU (no NVIDIA or AMD device found): gpu_runtime changes nothing"
                in text
            )
    # The vendors' task files were not even included on nodes without GPUs.
    assert "TASK [bai.cluster.gpu_runtime : NVIDIA container toolkit" in real.stdout
    assert "Install the toolkit" not in real.stdout and "device groups" not in real.stdout


@pytest.mark.lab
def test_lab_agents_report_zero_gpus(lab):
    hosts = adhoc_json("bai.cluster.bai_gpu_facts")
    for node in AGENTS:
        facts = hosts[node]["ansible_facts"]["bai_gpu"]
        assert (facts["vendor"], facts["count"], facts["status"]) == ("none", 0, "ok"), facts
        assert hosts[node]["changed"] is False


@pytest.mark.lab
def test_lab_agents_have_no_rdma_device(lab):
    """The plain agents: nothing under /dev/infiniband, so sessions get no device."""
    hosts = adhoc_json("bai.cluster.bai_agent_info", "-a", "gpu_detect=false")
    for node in AGENTS:
        assert hosts[node]["agent"]["rdma_devices"] == [], hosts[node]["agent"]


@pytest.mark.lab
@pytest.mark.parametrize("node", AGENTS)
def test_lab_daemon_json_has_no_nvidia_runtime(lab, client, node):
    res = client.containers.get(f"bai-lab-{node}").exec_run(["cat", "/etc/docker/daemon.json"])
    assert res.exit_code == 0, res.output
    config = json.loads(res.output)
    assert "runtimes" not in config and "default-runtime" not in config, config
    res = client.containers.get(f"bai-lab-{node}").exec_run(
        ["docker", "info", "--format", "{{json .Runtimes}}|{{.DefaultRuntime}}"]
    )
    runtimes, default = res.output.decode().strip().split("|")
    assert "nvidia" not in json.loads(runtimes) and default == "runc"


# --- 1b. GPU sessions on the lab (its agents have no GPU and declare gpu 0) ----------------
LABEL_SESSION = "ai.backend.cluster.session"
LABEL_GPU_DEVICES = "ai.backend.cluster.gpu-devices"
LABEL_SESSION_ID = "ai.backend.cluster.session-id"
JOB_MAPPING = "/var/lib/bai-cluster/dcgm-job-mapping"


@pytest.fixture(scope="module")
def lab_agents(client):
    """The lab's agent containers (no site.yml run); skips when the lab is not up."""
    nodes = {}
    for node in AGENTS:
        try:
            nodes[node] = client.containers.get(f"bai-lab-{node}")
        except docker.errors.NotFound:
            pytest.skip("the lab is not up (make lab-up)")
        if nodes[node].status != "running":
            pytest.skip("the lab is not up (make lab-up)")
    return nodes


def on_agent(node, *argv: str) -> tuple[int, str]:
    res = node.exec_run(list(argv))
    return res.exit_code, res.output.decode(errors="replace").strip()


def leftovers(lab_agents, name: str) -> dict[str, str]:
    """Containers and networks of session ``name`` on each agent (by label)."""
    found = {}
    for node_name, node in lab_agents.items():
        flt = f"label={LABEL_SESSION}={name}"
        _code, ctrs = on_agent(node, "docker", "ps", "-aq", "--filter", flt)
        _code, nets = on_agent(node, "docker", "network", "ls", "-q", "--filter", flt)
        found[node_name] = (ctrs + " " + nets).strip()
    return found


def create_on_lab(run_playbook, name: str, *args: str, **variables):
    extra = {"session_name": name, **{f"session_{k}": v for k, v in variables.items()}}
    return run_playbook("session_create.yml", *args, extra_vars=extra)


def destroy_on_lab(run_playbook, name: str):
    return run_playbook("session_destroy.yml", extra_vars={"session_name": name})


@pytest.mark.lab
def test_lab_gpu_request_is_pending_for_ever_and_creates_nothing(lab_agents, run_playbook):
    name = "gpu-it-pend"
    started = time.monotonic()
    # session_wait_s would retry a PENDING session; no agent has a GPU, so it must not wait.
    run = create_on_lab(run_playbook, name, size=2, resources={"gpu": 1}, wait_s=120)
    elapsed = time.monotonic() - started
    try:
        assert run.rc != 0, run
        text = one_line(" ".join(run.failures))
        assert "PENDING" in text, run
        assert "container main1 needs cpu 1, mem 1g, gpu 1" in text, text
        assert "it can never fit; GPUs asked for: 1; agent1 has no GPU; agent2 has no GPU" in text
        # Well under session_wait_s: one placement, no retry (a playbook run is ~10 s).
        assert elapsed < 45, f"a PENDING that can never fit waited {elapsed:.0f} s"
        assert leftovers(lab_agents, name) == {"agent1": "", "agent2": ""}
    finally:
        destroy_on_lab(run_playbook, name)


@pytest.mark.lab
def test_lab_declared_gpus_count_for_placement_but_are_never_faked(lab_agents, run_playbook):
    """SIMULATED capacity: the agents *declare* 2 GPUs (bai_agent_resources.gpu) but have
    none. Placement counts them and gives main1 and sub1 a device each; creating the
    containers is then refused on the agent before anything is made, and the rescue
    removes the session network the run had already made."""
    name = "gpu-it-decl"
    declared = {"cpu": 4, "mem": "8g", "gpu": 2}
    run = create_on_lab(
        run_playbook,
        name,
        "-e",
        json.dumps({"bai_agent_resources": declared}),
        size=2,
        resources={"cpu": 0.5, "mem": "256m", "gpu": 1},
    )
    try:
        assert run.rc != 0, run
        text = one_line(" ".join(run.failures))
        assert "main1 was given GPU device(s) 0 but no NVIDIA or AMD GPU was detected" in text
        assert "sub1 was given GPU device(s) 1" in text, text
        assert "bai_agent_resources.gpu alone only count for placement" in text, text
        assert "nothing was created" in text and "everything made for it was removed" in text
        assert leftovers(lab_agents, name) == {"agent1": "", "agent2": ""}
    finally:
        destroy_on_lab(run_playbook, name)


@pytest.fixture(scope="module")
def zero_gpu_session(lab_agents, run_playbook):
    name = "gpu-it-zero"
    destroy_on_lab(run_playbook, name)
    run = create_on_lab(run_playbook, name, size=2, resources={"cpu": 0.5, "mem": "256m"})
    try:
        assert run.rc == 0, run
        agent = run.stats["bai_session"]["containers"][0]["agent"]
        yield name, lab_agents[agent]
    finally:
        destroy_on_lab(run_playbook, name)
        assert leftovers(lab_agents, name) == {"agent1": "", "agent2": ""}


@pytest.mark.lab
@pytest.mark.parametrize("host", ["main1", "sub1"])
def test_lab_session_without_gpus_has_gpu_count_zero_inside(zero_gpu_session, host):
    name, node = zero_gpu_session
    ctr = f"bai-{name}-{host}"
    code, out = on_agent(node, "docker", "exec", ctr, "env")
    assert code == 0, out
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert (env["GPU_COUNT"], env["N_GPUS"]) == ("0", "0"), env
    assert "NVIDIA_VISIBLE_DEVICES" not in env  # only set (to void) on NVIDIA agents
    code, out = on_agent(node, "docker", "inspect", ctr)
    assert code == 0, out
    (info,) = json.loads(out)
    assert not info["HostConfig"]["DeviceRequests"] and not info["HostConfig"]["Devices"]
    assert info["Config"]["Labels"][LABEL_GPU_DEVICES] == ""
    # SSH logins (how MPI and torchrun start workers) see the same values.
    other = "sub1" if host == "main1" else "main1"
    code, out = on_agent(
        node, "docker", "exec", "-u", "work", ctr, "ssh", other, "echo $GPU_COUNT/$N_GPUS"
    )
    assert (code, out) == (0, "0/0")


# --- 2. a simulated NVIDIA agent ---------------------------------------------------------
# SIMULATED nvidia-smi: the recorded H100 listing (2 GPUs), columns picked by name.
FAKE_NVIDIA_SMI = r"""#!/bin/sh
# SIMULATED nvidia-smi for bai-cluster tests: no GPU or driver here. Replays a recorded
# listing (index, uuid, name, memory.total, driver_version).
data=/usr/share/bai-gpusim/nvidia-smi.csv
for arg in "$@"; do
  case "$arg" in
    -L) awk -F', ' '{printf "GPU %s: %s (UUID: %s)\n", $1, $3, $2}' "$data"; exit 0 ;;
    --query-gpu=*) fields=${arg#--query-gpu=} ;;
  esac
done
[ -n "${fields:-}" ] || { echo "simulated nvidia-smi: $*"; exit 0; }
awk -F', ' -v fields="$fields" 'BEGIN { n = split(fields, f, ",");
  col["index"] = 1; col["uuid"] = 2; col["name"] = 3
  col["memory.total"] = 4; col["driver_version"] = 5 }
  { line = ""
    for (i = 1; i <= n; i++) line = line (i > 1 ? ", " : "") $col[f[i]]
    print line }' "$data"
"""

# SIMULATED nvidia-ctk: --version, cdi generate (from nvidia-smi), cdi list.
FAKE_NVIDIA_CTK = r"""#!/bin/sh
# SIMULATED nvidia-ctk for bai-cluster tests (no GPU): --version, cdi generate, cdi list.
set -eu
case "${1:-}" in
  --version)
    echo "NVIDIA Container Toolkit CLI version 1.17.8 (simulated)"
    echo "commit: 0000000"
    exit 0 ;;
  cdi) shift ;;
  *) echo "simulated nvidia-ctk: unsupported: $*" >&2; exit 2 ;;
esac
case "${1:-}" in
  generate)
    out=""
    for a in "$@"; do case "$a" in --output=*) out=${a#--output=} ;; esac; done
    spec() {
      echo "---"
      echo "cdiVersion: 0.5.0"
      echo "kind: nvidia.com/gpu"
      echo "devices:"
      nvidia-smi --query-gpu=index,uuid --format=csv,noheader,nounits |
      while IFS=', ' read -r i u; do
        for n in "$i" "$u"; do
          printf -- '- name: "%s"\n  containerEdits:\n' "$n"
          printf -- '    deviceNodes:\n    - path: /dev/nvidia%s\n' "$i"
        done
      done
      printf 'containerEdits:\n  deviceNodes:\n  - path: /dev/nvidiactl\n'
    }
    echo 'level=info msg="Generated CDI spec (simulated)"' >&2
    if [ -n "$out" ]; then spec > "$out"; else spec; fi ;;
  list)
    for f in /etc/cdi/nvidia.yaml /var/run/cdi/nvidia.yaml; do
      [ -f "$f" ] && sed -n 's/^- name: "\(.*\)"$/nvidia.com\/gpu=\1/p' "$f"
    done
    exit 0 ;;
  *) echo "simulated nvidia-ctk: unsupported: cdi $*" >&2; exit 2 ;;
esac
"""

# The toolkit's real package names and dependencies, with stub contents.
STUB_PACKAGES = {
    "libnvidia-container1": ([], {}),
    "libnvidia-container-tools": (["libnvidia-container1"], {}),
    "nvidia-container-toolkit-base": (
        [],
        {
            "usr/bin/nvidia-ctk": FAKE_NVIDIA_CTK,
            "usr/bin/nvidia-container-runtime": '#!/bin/sh\nexec runc "$@"\n',
        },
    ),
    "nvidia-container-toolkit": (
        ["nvidia-container-toolkit-base", "libnvidia-container-tools"],
        {"usr/bin/nvidia-container-runtime-hook": "#!/bin/sh\nexit 0\n"},
    ),
}


def tar_of(files: dict[str, tuple[str, int]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, (text, mode) in files.items():
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def sim_exec(container, cmd: str) -> tuple[int, str]:
    res = container.exec_run(["sh", "-c", cmd])
    return res.exit_code, res.output.decode()


@pytest.fixture(scope="module")
def sim(client, tmp_path_factory):
    """A throwaway DinD container posing as a GPU agent, its inventory, and the runs."""
    try:
        client.images.get(SIM_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.skip(f"{SIM_IMAGE} is not built (make images)")
    name = f"bai-gpusim-{uuid.uuid4().hex[:8]}"
    container = client.containers.run(
        SIM_IMAGE,
        name=name,
        hostname="gpusim",
        detach=True,
        init=True,
        labels={SIM_LABEL: "1"},
        environment={"LAB_DOCKERD": "1"},
        # As the lab's agents: an inner engine without --privileged (see ENVIRONMENT.md).
        cap_add=["ALL"],
        cap_drop=["SYS_RESOURCE"],
        security_opt=["seccomp=unconfined", "apparmor=unconfined"],
        device_cgroup_rules=["a *:* rwm"],
        volumes={f"{name}-docker": {"bind": "/var/lib/docker", "mode": "rw"}},
    )
    try:
        yield prepare_sim(container, tmp_path_factory.mktemp("gpusim"))
    finally:
        container.remove(force=True, v=True)
        with contextlib.suppress(docker.errors.NotFound):
            client.volumes.get(f"{name}-docker").remove(force=True)


def prepare_sim(container, tmp: Path) -> dict:
    # Device nodes as a driver would make them (major 195); no driver behind them.
    rc, out = sim_exec(
        container,
        "mknod -m 666 /dev/nvidia0 c 195 0 && mknod -m 666 /dev/nvidia1 c 195 1 && "
        "mknod -m 666 /dev/nvidiactl c 195 255",
    )
    assert rc == 0, out
    inventory = tmp / "hosts.yml"
    host = {
        "ansible_connection": "community.docker.docker",
        "ansible_host": container.name,
        "ansible_python_interpreter": "/usr/bin/python3",
        "bai_resource_group": "gpu",
        "gpu_runtime_nvidia_local_packages_dir": "/srv/nvidia-debs",
    }
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    # One engine, no swarm: the session ledger is a file on it.
                    "vars": {
                        "bai_zone_cidrs": {},
                        "bai_admin_cidrs": [],
                        "bai_ledger_store": "file",
                        # SIMULATED: the stub runtime puts no device in a container, so
                        # the health gate's gpu check would refuse every GPU session
                        # here; test_sim_the_gate_refuses_a_gpu_it_cannot_see runs it.
                        "bai_gate_checks": [c for c in GATE_CHECKS if c != "gpu"],
                    },
                    "children": {
                        "manager": {"hosts": {"gpusim": host}},
                        "agents": {"hosts": {"gpusim": None}},
                    },
                }
            }
        )
    )
    runs: dict = {"container": container, "inventory": str(inventory)}

    def site(*args: str) -> subprocess.CompletedProcess[str]:
        # Preflight is not what is tested here (and costs a fact gathering per run).
        return ansible(
            "ansible-playbook", "-i", str(inventory), "site.yml", "--skip-tags", "preflight", *args
        )

    # a) Device nodes, no nvidia-smi: the driver's user space is missing.
    runs["no_driver"] = site("--tags", "gpu_runtime")

    # b) Now the "driver" (replayed nvidia-smi) and the stub toolkit packages.
    csv = "".join((FIXTURES / "nvidia-smi_h100x8.csv").read_text().splitlines(True)[:2])
    files = {
        "usr/bin/nvidia-smi": (FAKE_NVIDIA_SMI, 0o755),
        "usr/share/bai-gpusim/nvidia-smi.csv": (csv, 0o644),
    }
    for package, (depends, payload) in STUB_PACKAGES.items():
        control = textwrap.dedent(
            f"""\
            Package: {package}
            Version: 1.17.8-1
            Architecture: all
            Maintainer: bai-cluster tests <tests@invalid>
            Description: SIMULATED stand-in for NVIDIA's {package} (bai-cluster tests)
            """
        )
        if depends:
            control += f"Depends: {', '.join(depends)}\n"
        files[f"tmp/debsrc/{package}/DEBIAN/control"] = (control, 0o644)
        for path, text in payload.items():
            files[f"tmp/debsrc/{package}/{path}"] = (text, 0o755)
    assert container.put_archive("/", tar_of(files))
    rc, out = sim_exec(
        container,
        "mkdir -p /srv/nvidia-debs && for d in /tmp/debsrc/*; do "
        "dpkg-deb --root-owner-group --build $d /srv/nvidia-debs/ >/dev/null || exit 1; done",
    )
    assert rc == 0, out

    # c) Check mode on the fresh node, d) converge, e) converge again.
    runs["check"] = site("--tags", "gpu_runtime,docker_engine", "--check", "--diff")
    rc, runs["after_check_dpkg"] = sim_exec(
        container, "dpkg-query -W -f='${Status}' nvidia-container-toolkit 2>&1; ls /etc/cdi 2>&1"
    )
    runs["first"] = site("--tags", "gpu_runtime,docker_engine")
    runs["second"] = site("--tags", "gpu_runtime,docker_engine")

    # f) The node check script, as an operator would run it on the node.
    script = (ROOT / "roles/gpu_runtime/files/check-gpu-node.sh").read_text()
    assert container.put_archive("/", tar_of({"usr/local/bin/check-gpu-node": (script, 0o755)}))
    runs["check_script"] = sim_exec(container, "check-gpu-node 2>&1; echo rc=$?")[1]
    return runs


def test_sim_device_nodes_without_nvidia_smi_fail_with_what_to_install(sim):
    run = sim["no_driver"]
    assert run.returncode != 0
    assert recap(run.stdout)["gpusim"]["failed"] == 1
    text = one_line(run.stdout)
    assert "NVIDIA device nodes exist (/dev/nvidia0, /dev/nvidia1)" in text
    assert "nvidia-smi is not installed" in text and "install the NVIDIA driver" in text
    assert "gpu_runtime_fail_on_driver_problem: false" in text


def test_sim_check_mode_on_a_fresh_gpu_node_changes_nothing(sim):
    run = sim["check"]
    assert run.returncode == 0, tail(run)
    assert recap(run.stdout)["gpusim"]["changed"] > 0  # it would change things...
    assert "install ok installed" not in sim["after_check_dpkg"]  # ...but did not
    assert "No such file" in sim["after_check_dpkg"]  # no /etc/cdi either
    # The diff shows the runtime going into daemon.json.
    assert '"nvidia"' in run.stdout and "/usr/bin/nvidia-container-runtime" in run.stdout


def test_sim_converge_installs_the_toolkit_and_reports_the_gpus(sim):
    run = sim["first"]
    assert run.returncode == 0, tail(run)
    assert recap(run.stdout)["gpusim"]["failed"] == 0
    text = one_line(run.stdout)
    assert "gpusim: 2 x NVIDIA H100 80GB HBM3 (81559 MiB each), driver 550.90.07" in text
    assert "runtimes for daemon.json: nvidia" in text
    rc, out = sim_exec(
        sim["container"],
        "dpkg-query -W -f='${Package} ${Status}\\n' nvidia-container-toolkit "
        "nvidia-container-toolkit-base libnvidia-container-tools libnvidia-container1",
    )
    assert rc == 0 and out.count("install ok installed") == 4, out


def test_sim_cdi_spec_names_each_gpu_by_index_and_uuid(sim):
    rc, out = sim_exec(sim["container"], "cat /etc/cdi/nvidia.yaml")
    assert rc == 0, out
    spec = yaml.safe_load(out)
    names = [d["name"] for d in spec["devices"]]
    assert names == [
        "0",
        "GPU-6f0c5d4e-1b8a-7c33-0f4e-2a9d7b1c8e01",
        "1",
        "GPU-0b7a2e91-5c4d-3f86-a1e2-9c3b5d7f1a22",
    ]
    assert spec["kind"] == "nvidia.com/gpu"


def test_sim_runtime_reaches_daemon_json_and_the_engine_but_is_not_default(sim):
    rc, out = sim_exec(sim["container"], "cat /etc/docker/daemon.json")
    config = json.loads(out)
    assert config["runtimes"] == {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}
    assert "default-runtime" not in config
    rc, out = sim_exec(
        sim["container"], "docker info --format '{{json .Runtimes}}|{{.DefaultRuntime}}'"
    )
    assert rc == 0, out
    runtimes, default = out.strip().split("|")
    assert json.loads(runtimes)["nvidia"]["path"] == "/usr/bin/nvidia-container-runtime"
    assert default == "runc"


def test_sim_second_converge_changes_nothing(sim):
    run = sim["second"]
    assert run.returncode == 0, tail(run)
    assert recap(run.stdout)["gpusim"]["changed"] == 0, tail(run)


def test_sim_check_script_passes_the_host_steps_and_stops_at_the_first_failure(sim):
    out = sim["check_script"]
    assert "ok   1. driver: 2 GPU(s), NVIDIA H100 80GB HBM3, driver 550.90.07" in out, out
    assert "ok   2. toolkit: NVIDIA Container Toolkit CLI version 1.17.8" in out, out
    assert "ok   3. runtime: nvidia registered, default runtime runc" in out, out
    assert "ok   4. CDI: /etc/cdi/nvidia.yaml lists nvidia.com/gpu=0" in out, out
    # No image in the simulated node's engine (and no GPU behind the nodes): it stops here.
    assert "FAIL 5. image: bai/session:latest is not on this node" in out, out
    assert out.strip().endswith("rc=1"), out


# --- 2b. GPU sessions on the simulated NVIDIA agent ----------------------------------------
@pytest.fixture(scope="module")
def sim_ready(sim):
    """The simulated agent converged, with the session image loaded into its engine."""
    assert sim["first"].returncode == 0, tail(sim["first"])
    load = subprocess.run(
        f"docker save bai/session:latest | docker exec -i {sim['container'].name} docker load -q",
        shell=True,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert load.returncode == 0, load.stderr
    return sim


def test_sim_concurrent_gpu_creates_never_share_a_device(sim_ready, run_playbook):
    """SIMULATED GPUs (see sim_sessions): three creates at once, one GPU each, on the agent
    with two devices. Through the session ledger two get a device each, never the same
    one, and the third is PENDING and makes nothing. (Before the ledger, all three read
    two free devices.)"""
    names = ["gpu-race-a", "gpu-race-b", "gpu-race-c"]
    procs = [
        start_playbook(
            "session_create.yml",
            extra_vars={
                "session_name": name,
                "session_resource_group": "gpu",
                "session_size": 1,
                "session_resources": {"cpu": 0.25, "mem": "128m", "gpu": 1},
            },
            inventory=sim_ready["inventory"],
        )
        for name in names
    ]
    runs = dict(zip(names, (finish_playbook(p) for p in procs)))
    container = sim_ready["container"]
    try:
        won = sorted(name for name, run in runs.items() if run.rc == 0)
        assert len(won) == 2, runs
        (lost,) = set(names) - set(won)
        assert "PENDING" in one_line(" ".join(runs[lost].failures)), runs[lost]
        devices = []
        for name in won:
            rc, out = sim_exec(container, f"docker inspect bai-{name}-main1")
            assert rc == 0, out
            (request,) = json.loads(out)[0]["HostConfig"]["DeviceRequests"]
            devices += request["DeviceIDs"]
        assert sorted(devices) == ["0", "1"]  # each device once
        rc, out = sim_exec(container, f"docker ps -aq --filter name=bai-{lost}-")
        assert (rc, out.strip()) == (0, ""), out
    finally:
        for name in names:
            run_playbook(
                "session_destroy.yml",
                extra_vars={"session_name": name},
                inventory=sim_ready["inventory"],
            )


@pytest.fixture(scope="module")
def sim_sessions(sim_ready, run_playbook):
    """SIMULATED GPUs: sessions on the simulated NVIDIA agent above (2 device nodes made
    with mknod, nvidia-smi replaying a recording, a stub nvidia-container-runtime-hook
    that does nothing). No machine running these tests has a GPU. What is real: the
    agent's detection, placement and device assignment, the device requests the inner
    Docker engine records and runs through its NVIDIA device driver (registered because
    the hook is installed), the labels and the environment. What a real GPU would add
    (the device visible inside the container) is check-gpu-node.sh's steps 5-7."""
    sim = sim_ready
    container = sim["container"]

    def create(name: str, **variables):
        extra = {"session_name": name, "session_resource_group": "gpu"}
        extra.update({f"session_{k}": v for k, v in variables.items()})
        return run_playbook("session_create.yml", extra_vars=extra, inventory=sim["inventory"])

    def inspect(name: str) -> dict:
        rc, out = sim_exec(container, f"docker inspect {name}")
        assert rc == 0, out
        return json.loads(out)[0]

    # First, with the gate's gpu check on, while both devices are free: the device the
    # container is given is not in it.
    gated = run_playbook(
        "session_create.yml",
        extra_vars={
            "session_name": "gpu-sim-gated",
            "session_resource_group": "gpu",
            "session_size": 1,
            "session_resources": {"cpu": 0.25, "mem": "128m", "gpu": 1},
            "bai_gate_checks": list(GATE_CHECKS),
        },
        inventory=sim["inventory"],
    )
    gated_left = sim_exec(container, "docker ps -aq --filter name=bai-gpu-sim-gated-")[1]
    runs = {
        "gated": gated,
        "gated_left": gated_left,
        "two": create("gpu-sim-two", size=2, resources={"cpu": 0.5, "mem": "256m", "gpu": 1}),
        "more": create("gpu-sim-more", size=1, resources={"cpu": 0.5, "mem": "256m", "gpu": 1}),
        "none": create("gpu-sim-none", size=1, resources={"cpu": 0.5, "mem": "256m"}),
    }
    # What gpu-sim-two's containers looked like before main1 is stopped below.
    runs["two_inspect"] = {
        host: inspect(f"bai-gpu-sim-two-{host}")
        for host in ("main1", "sub1")
        if runs["two"].rc == 0
    }
    # A stopped container keeps its device (a session holds what it was given until it
    # is destroyed): another session does not get it, and a rerun of the stopped
    # session's create is admitted and starts it again.
    rc, out = sim_exec(container, "docker stop -t 1 bai-gpu-sim-two-main1")
    assert rc == 0, out
    runs["take"] = create("gpu-sim-take", size=1, resources={"cpu": 0.25, "mem": "128m", "gpu": 1})
    runs["rerun"] = create("gpu-sim-two", size=2, resources={"cpu": 0.5, "mem": "256m", "gpu": 1})
    runs["after_rerun"] = sim_exec(
        container, "docker ps -a --format '{{.Names}} {{.State}}' --filter name=gpu-sim-two"
    )[1]
    # dcgm-exporter's job mapping, as the agent's modules left it: GPU index: session id.
    runs["job_mapping"] = sim_exec(container, f"cd {JOB_MAPPING} && grep -H . *")[1]

    # No destroy at the end: the sessions go with the simulated agent (the sim fixture
    # removes its container, its engine's volume and the file ledger on it).
    yield runs, inspect


def test_sim_the_gate_refuses_a_gpu_it_cannot_see(sim_sessions):
    """SIMULATED device missing (the issue's "GPU listed but not usable"): the agent has
    the device nodes and the container is given one, but the stub runtime puts none in
    it; the health gate's gpu check catches it before the session is handed over, and
    the create removes what it made."""
    runs, _inspect = sim_sessions
    gated = runs["gated"]
    assert gated.rc != 0, gated.stdout
    said = one_line(" ".join(gated.failures))
    assert "the health gate of session gpu-sim-gated failed (checked twice)" in said, said
    assert "main1 on agent gpusim: gpu: given 1 GPU(s), sees 0 device(s)" in said, said
    assert runs["gated_left"].strip() == ""


def test_sim_each_gpu_container_gets_exactly_its_own_device(sim_sessions):
    runs, _inspect = sim_sessions
    assert runs["two"].rc == 0, runs["two"]
    seen = {}
    for host in ("main1", "sub1"):
        info = runs["two_inspect"][host]
        (request,) = info["HostConfig"]["DeviceRequests"]
        assert request["Driver"] == "nvidia" and request["Capabilities"] == [["gpu"]]
        assert request["Count"] == 0  # exactly these devices, not "any N"
        seen[host] = request["DeviceIDs"]
        env = dict(item.split("=", 1) for item in info["Config"]["Env"])
        assert (env["GPU_COUNT"], env["N_GPUS"]) == ("1", "1"), env
        assert "NVIDIA_VISIBLE_DEVICES" not in env  # the engine's NVIDIA driver sets it
        assert info["Config"]["Labels"][LABEL_GPU_DEVICES] == request["DeviceIDs"][0]
        assert info["State"]["Running"], info["State"]
        # Pinned memory and driver threads' priority, for GPU containers only.
        assert {"IPC_LOCK", "SYS_NICE"} <= set(info["HostConfig"]["CapAdd"]), info["HostConfig"]
        assert info["HostConfig"]["CapDrop"] == ["ALL"]
    assert seen == {"main1": ["0"], "sub1": ["1"]}


def test_sim_dcgm_job_mapping_names_the_session_holding_each_gpu(sim_sessions):
    """One file per GPU a session holds, its session id inside (docs/metrics.md): both
    GPUs are gpu-sim-two's; gpu-sim-none holds none and is in no file."""
    runs, _inspect = sim_sessions
    assert runs["rerun"].rc == 0, runs["rerun"]
    sid = runs["two_inspect"]["main1"]["Config"]["Labels"][LABEL_SESSION_ID]
    assert sorted(runs["job_mapping"].split()) == [f"0:{sid}", f"1:{sid}"], runs["job_mapping"]


def test_sim_a_request_for_a_held_gpu_is_pending_until_one_is_free(sim_sessions):
    runs, _inspect = sim_sessions
    run = runs["more"]
    assert run.rc != 0, run
    text = one_line(" ".join(run.failures))
    assert "PENDING" in text and "gpusim: cpu" in text and "(short of gpu)" in text, text
    assert "gpusim has GPU devices 0,1, free: none" in text, text
    assert "can never fit" not in text  # it can, once gpu-sim-two is gone


def test_sim_a_container_without_gpus_on_a_gpu_agent_gets_none(sim_sessions):
    runs, inspect = sim_sessions
    assert runs["none"].rc == 0, runs["none"]
    info = inspect("bai-gpu-sim-none-main1")
    assert not info["HostConfig"]["DeviceRequests"] and not info["HostConfig"]["Devices"]
    assert not {"IPC_LOCK", "SYS_NICE"} & set(info["HostConfig"]["CapAdd"])
    env = dict(item.split("=", 1) for item in info["Config"]["Env"])
    assert (env["GPU_COUNT"], env["N_GPUS"]) == ("0", "0")
    # A CUDA image's NVIDIA_VISIBLE_DEVICES=all must not reach the GPUs of an NVIDIA agent.
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert info["Config"]["Labels"][LABEL_GPU_DEVICES] == ""


def test_sim_a_stopped_container_keeps_its_gpu_until_its_session_is_destroyed(sim_sessions):
    runs, inspect = sim_sessions
    run = runs["take"]
    assert run.rc != 0, run
    text = one_line(" ".join(run.failures))
    assert "PENDING" in text and "gpusim has GPU devices 0,1, free: none" in text, text
    assert runs["rerun"].rc == 0, runs["rerun"]
    states = dict(line.split() for line in runs["after_rerun"].splitlines())
    assert states == {"bai-gpu-sim-two-main1": "running", "bai-gpu-sim-two-sub1": "running"}
    (request,) = inspect("bai-gpu-sim-two-main1")["HostConfig"]["DeviceRequests"]
    assert request["DeviceIDs"] == ["0"]  # its own device, given to nobody else meanwhile


# --- 2b. RDMA on the simulated agent --------------------------------------------------------
@pytest.fixture(scope="module")
def rdma(sim_ready, sim_sessions, run_playbook):
    """SIMULATED RDMA devices: /dev/infiniband/uverbs0 (231:192) and rdma_cm (10:58) made
    with mknod on the simulated agent, no InfiniBand driver or adapter behind them. What is
    real: the agent's detection (bai_agent_info), the device nodes Docker makes inside the
    containers, the capabilities, and the inventory switch (bai_session_rdma). Made after
    the GPU sessions above exist, which therefore have no RDMA device."""
    container = sim_ready["container"]
    rc, out = sim_exec(
        container,
        "mkdir -p /dev/infiniband && mknod -m 666 /dev/infiniband/uverbs0 c 231 192 && "
        "mknod -m 666 /dev/infiniband/rdma_cm c 10 58",
    )
    assert rc == 0, out

    def create(name: str, *args: str):
        extra = {"session_name": name, "session_resource_group": "gpu", "session_size": 1}
        extra["session_resources"] = {"cpu": 0.25, "mem": "128m"}
        return run_playbook(
            "session_create.yml", *args, extra_vars=extra, inventory=sim_ready["inventory"]
        )

    info = ansible(
        "ansible",
        "-i",
        sim_ready["inventory"],
        "gpusim",
        "-m",
        "bai.cluster.bai_agent_info",
        "-a",
        "agent_name=gpusim gpu_detect=false",
        env={"ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"},
    )
    runs = {
        "info": info,
        "on": create("rdma-on"),
        "off": create("rdma-off", "-e", "bai_session_rdma=false"),
    }
    # The sessions and the devices go with the simulated agent (the sim fixture).
    yield runs


def _sim_inspect(sim, name: str) -> dict:
    rc, out = sim_exec(sim["container"], f"docker inspect {name}")
    assert rc == 0, out
    return json.loads(out)[0]


def test_sim_rdma_devices_are_reported_and_given_to_containers(sim_ready, rdma):
    assert rdma["info"].returncode == 0, tail(rdma["info"])
    document, _end = json.JSONDecoder().raw_decode(
        rdma["info"].stdout[rdma["info"].stdout.index("{") :]
    )
    agent = document["plays"][0]["tasks"][0]["hosts"]["gpusim"]["agent"]
    assert agent["rdma_devices"] == ["/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs0"]
    assert rdma["on"].rc == 0, rdma["on"]
    host = _sim_inspect(sim_ready, "bai-rdma-on-main1")["HostConfig"]
    assert sorted(d["PathInContainer"] for d in host["Devices"]) == agent["rdma_devices"]
    assert {"IPC_LOCK", "SYS_NICE"} <= set(host["CapAdd"]), host["CapAdd"]
    inside = "docker exec bai-rdma-on-main1 bash -c 'ls /dev/infiniband'"
    rc, out = sim_exec(sim_ready["container"], inside)
    assert (rc, out.split()) == (0, ["rdma_cm", "uverbs0"]), out


def test_sim_rdma_can_be_turned_off_per_agent(sim_ready, rdma):
    assert rdma["off"].rc == 0, rdma["off"]
    host = _sim_inspect(sim_ready, "bai-rdma-off-main1")["HostConfig"]
    assert not host["Devices"]
    assert not {"IPC_LOCK", "SYS_NICE"} & set(host["CapAdd"]), host["CapAdd"]


# --- 3. a simulated AMD agent ------------------------------------------------------------
# SIMULATED: /dev/kfd and two render nodes made with mknod (root:root 0644, no driver),
# rocm-smi under /opt/rocm/bin replaying the recorded MI300X output. No sysfs for the
# nodes in a container, so devices match rocm-smi's cards by position. What is real: the
# role's AMD path (groups, udev rule, making the nodes group-usable, recording the
# groups' numbers) and its idempotence.
FAKE_ROCM_SMI = """#!/bin/sh
# SIMULATED rocm-smi for bai-cluster tests (no GPU): replays a recorded MI300X listing.
cat /usr/share/bai-gpusim/rocm-smi.json
"""


@pytest.fixture(scope="module")
def amd_sim(client, tmp_path_factory):
    try:
        client.images.get(SIM_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.skip(f"{SIM_IMAGE} is not built (make images)")
    container = client.containers.run(
        SIM_IMAGE,
        name=f"bai-amdsim-{uuid.uuid4().hex[:8]}",
        hostname="amdsim",
        detach=True,
        init=True,
        labels={SIM_LABEL: "1"},
    )
    try:
        rc, out = sim_exec(
            container,
            # udev installed but not running, as on a host booted without it.
            "mkdir -p /dev/dri /etc/udev/rules.d && mknod -m 644 /dev/kfd c 510 0 && "
            "mknod -m 644 /dev/dri/renderD128 c 226 128 && "
            "mknod -m 644 /dev/dri/renderD129 c 226 129 && "
            "(getent group render && groupdel render || true) >/dev/null",
        )
        assert rc == 0, out
        files = {
            "opt/rocm/bin/rocm-smi": (FAKE_ROCM_SMI, 0o755),
            "usr/share/bai-gpusim/rocm-smi.json": (
                (FIXTURES / "rocm-smi_mi300x8.json").read_text(),
                0o644,
            ),
        }
        assert container.put_archive("/", tar_of(files))
        inventory = tmp_path_factory.mktemp("amdsim") / "hosts.yml"
        host = {
            "ansible_connection": "community.docker.docker",
            "ansible_host": container.name,
            "ansible_python_interpreter": "/usr/bin/python3",
            "bai_resource_group": "gpu",
        }
        inventory.write_text(
            yaml.safe_dump(
                {"all": {"children": {"agents": {"hosts": {"amdsim": host}}, "manager": {}}}}
            )
        )
        args = (
            "-i",
            str(inventory),
            "site.yml",
            "--tags",
            "gpu_runtime",
            "--skip-tags",
            "preflight",
        )
        check = ansible("ansible-playbook", *args, "--check", "--diff")
        rc, after_check = sim_exec(container, "stat -c '%n %G %a' /dev/kfd; getent group render")
        first = ansible("ansible-playbook", *args)
        second = ansible("ansible-playbook", *args)
        rc, nodes = sim_exec(
            container,
            "stat -c '%n %G %a' /dev/kfd /dev/dri/renderD128 /dev/dri/renderD129; "
            "getent group render video; cat /etc/udev/rules.d/70-bai-amdgpu.rules",
        )
        yield first, second, nodes, check, after_check
    finally:
        container.remove(force=True, v=True)


def test_amd_sim_makes_the_device_nodes_usable_by_the_render_group(amd_sim):
    first, _second, nodes, _check, _after_check = amd_sim
    assert first.returncode == 0, tail(first)
    assert recap(first.stdout)["amdsim"]["changed"] > 0
    for node in ("/dev/kfd", "/dev/dri/renderD128", "/dev/dri/renderD129"):
        assert f"{node} render 660" in nodes, nodes
    assert re.search(r"^render:x:\d+:", nodes, re.M), nodes
    assert 'KERNEL=="kfd", GROUP="render", MODE="0660"' in nodes


def test_amd_sim_reports_the_gpus_and_registers_no_runtime(amd_sim):
    first, *_others = amd_sim
    text = one_line(first.stdout)
    assert "amdsim: 2 x AMD Instinct MI300X OAM (196288 MiB each), driver 6.7.0" in text
    assert "runtimes for daemon.json: none" in text


def test_amd_sim_second_run_changes_nothing(amd_sim):
    _first, second, *_others = amd_sim
    assert second.returncode == 0, tail(second)
    assert recap(second.stdout)["amdsim"]["changed"] == 0, tail(second)


def test_amd_sim_check_mode_changes_nothing(amd_sim):
    *_others, check, after_check = amd_sim
    assert check.returncode == 0, tail(check)
    assert recap(check.stdout)["amdsim"]["changed"] > 0  # it would...
    assert after_check.strip() == "/dev/kfd root 644", after_check  # ...but did not
