"""roles/gpu_runtime/files/check-gpu-node.sh, run against shim tools (no GPU here)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

# --- check-gpu-node.sh against shim tools ----------------------------------------------------
# SIMULATED: nvidia-smi, nvidia-ctk and docker are small scripts on PATH that answer like
# a healthy 2-GPU node, or broken in one way (SHIM_BREAK). What is real: the script's
# steps, its "exactly this device" and "no GPU without a request" logic, its messages
# and exit codes. (tests/integration/test_gpu_lab.py runs it against a real engine.)
SCRIPT = Path(__file__).resolve().parents[3] / "roles/gpu_runtime/files/check-gpu-node.sh"
UUID0 = "GPU-6f0c5d4e-1b8a-7c33-0f4e-2a9d7b1c8e01"
UUID1 = "GPU-0b7a2e91-5c4d-3f86-a1e2-9c3b5d7f1a22"
SHIMS = {
    "nvidia-smi": f"""#!/bin/sh
case "$*" in
  *--query-gpu*)
    echo "0, {UUID0}, NVIDIA H100 80GB HBM3, 550.90.07"
    echo "1, {UUID1}, NVIDIA H100 80GB HBM3, 550.90.07" ;;
esac
""",
    "nvidia-ctk": """#!/bin/sh
case "$*" in
  --version) echo "NVIDIA Container Toolkit CLI version 1.17.8" ;;
  "cdi list") printf 'nvidia.com/gpu=0\\nnvidia.com/gpu=1\\nnvidia.com/gpu=all\\n' ;;
esac
""",
    "docker": f"""#!/bin/bash
b=${{SHIM_BREAK:-}}
case "$1" in
  info)
    case "$*" in
      *Runtimes*)
        if [ "$b" = no-runtime ]; then echo '{{"runc":{{}}}}'
        else echo '{{"nvidia":{{"path":"x"}},"runc":{{}}}}'; fi ;;
      *DefaultRuntime*) [ "$b" = default-runtime ] && echo nvidia || echo runc ;;
    esac ;;
  image) exit 0 ;;
  run)
    case "$*" in
      *"--gpus device=0"*)
        echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: {UUID0})"
        [ "$b" = two-gpus ] && echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: {UUID1})" ;;
      *"--device nvidia.com/gpu=0"*)
        [ "$b" = no-cdi ] && {{ echo "docker: Error response: unknown device"; exit 125; }}
        echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: {UUID0})" ;;
      *) [ "$b" = leak ] && echo /dev/nvidia0 ;;
    esac ;;
esac
exit 0
""",
}


@pytest.fixture
def shim_node(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in SHIMS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    spec = tmp_path / "nvidia.yaml"
    spec.write_text("cdiVersion: 0.5.0\n")

    def run(*args, breaks="", specs=str(spec)):
        env = {
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "SHIM_BREAK": breaks,
            "CHECK_GPU_CDI_SPECS": specs,
        }
        done = subprocess.run(
            ["bash", str(SCRIPT), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return done.returncode, done.stdout + done.stderr

    return run


def test_check_script_passes_on_a_healthy_node(shim_node):
    rc, out = shim_node("-i", "img")
    assert rc == 0, out
    assert f"container (--gpus device=0) sees exactly {UUID0}" in out
    assert f"(--device nvidia.com/gpu=0, CDI) sees exactly {UUID0}" in out
    assert "container without a GPU request sees none" in out
    assert out.rstrip().endswith("all checks passed")


@pytest.mark.parametrize(
    ("breaks", "args", "step"),
    [
        ("no-runtime", (), "FAIL 3. runtime: nvidia is not registered"),
        ("default-runtime", (), "FAIL 3. runtime: nvidia is the DEFAULT runtime"),
        ("two-gpus", (), "FAIL 5. container (--gpus device=0): expected exactly GPU 0"),
        ("no-cdi", ("--cdi", "yes"), "FAIL 6. container (CDI nvidia.com/gpu=0)"),
        ("leak", (), "FAIL 7. container without a GPU request sees GPUs"),
        ("", ("-d", "5"), "FAIL 1. driver: no GPU with index 5"),
    ],
)
def test_check_script_stops_at_the_first_failing_step(shim_node, breaks, args, step):
    rc, out = shim_node(*args, breaks=breaks)
    assert rc == 1 and step in out, out
    assert "all checks passed" not in out


def test_check_script_without_a_cdi_spec_or_a_cdi_engine(shim_node):
    rc, out = shim_node(specs="/nonexistent/nvidia.yaml")
    assert rc == 1 and "FAIL 4. CDI: no spec in /nonexistent/nvidia.yaml" in out
    assert "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml" in out
    rc, out = shim_node(breaks="no-cdi")  # --cdi auto: an engine without CDI is a skip
    assert rc == 0 and "skip     CDI container" in out, out


def test_check_script_rejects_bad_usage(shim_node):
    assert shim_node("-d", "x")[0] == 2
    assert shim_node("--vendor", "intel")[0] == 2
