"""roles/session_image/files/wheels.sh: a build's wheels, cached by content, put into a copy
of its context; and the apps image's requirements file it reads.

pip is a stand-in here (it writes an empty wheel per pinned line and records its
arguments and environment): nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "roles" / "session_image" / "files" / "wheels.sh"
APPS = REPO / "roles" / "session_image" / "files" / "session-apps"

FAKE_PIP = """\
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
req, dest = Path(args[args.index("-r") + 1]), Path(args[args.index("-d") + 1])
log = Path(os.environ["FAKE_PIP_LOG"])
log.write_text(log.read_text() + json.dumps({"args": args, "env": {
    k: v for k, v in os.environ.items() if k.startswith("PIP_")}}) + "\\n")
for line in req.read_text().splitlines():
    if line.strip() and not line.startswith("#"):
        name, version = line.split("==")
        (dest / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(line.encode())
        if os.environ.get("FAKE_PIP_FAIL"):
            sys.exit("connection reset")
"""


def make_context(root: Path, pins: str) -> Path:
    ctx = root / "ctx"
    ctx.mkdir(exist_ok=True)
    (ctx / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n")
    (ctx / "requirements.txt").write_text(f"# python-version: 3.11\n{pins}")
    return ctx


def run(root: Path, platform: str = "manylinux_2_36_x86_64", env: dict | None = None):
    pip = root / "pip.py"
    pip.write_text(FAKE_PIP)
    log = root / "pip.log"
    if not log.exists():
        log.write_text("")
    environ = {
        **os.environ,
        "FAKE_PIP_LOG": str(log),
        "PIP_FIND_LINKS": "/opt/wheels",
        "PIP_CONSTRAINT": "/etc/constraints.txt",
        "PIP_INDEX_URL": "https://mirror.example/simple",
        **(env or {}),
    }
    ctx, out, cache = root / "ctx", root / "out" / "ctx", root / "cache"
    argv = [str(SCRIPT), str(ctx), str(out), str(cache), platform, sys.executable, str(pip)]
    return subprocess.run(
        argv, capture_output=True, text=True, env=environ, timeout=60, check=False
    )


def calls(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "pip.log").read_text().splitlines()]


def test_downloads_once_into_a_copy_of_the_context(tmp_path: Path):
    make_context(tmp_path, "six==1.17.0\nidna==3.20\n")
    first = run(tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1] == "changed"
    (key,) = [p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")]
    assert sorted(p.name for p in key.iterdir()) == [
        "idna-3.20-py3-none-any.whl",
        "six-1.17.0-py3-none-any.whl",
    ]
    out = tmp_path / "out" / "ctx"
    assert sorted(p.name for p in out.iterdir()) == ["Dockerfile", "requirements.txt", "wheels"]
    cached = sorted(p.name for p in key.iterdir())
    assert sorted(p.name for p in (out / "wheels").iterdir()) == cached
    assert not (tmp_path / "ctx" / "wheels").exists()

    (call,) = calls(tmp_path)
    args = call["args"]
    assert args[0] == "download" and "--no-deps" in args and "--only-binary=:all:" in args
    assert args[args.index("--python-version") + 1] == "3.11"
    platforms = [args[i + 1] for i, a in enumerate(args) if a == "--platform"]
    assert platforms[0] == "manylinux_2_36_x86_64" and "manylinux_2_5_x86_64" in platforms
    assert {"manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"} <= set(platforms)
    # No configuration file, no find-links or constraints; the index from the environment.
    assert call["env"]["PIP_CONFIG_FILE"] == "/dev/null"
    assert "PIP_FIND_LINKS" not in call["env"] and "PIP_CONSTRAINT" not in call["env"]
    assert call["env"]["PIP_INDEX_URL"] == "https://mirror.example/simple"

    # Nothing changed: no download, the copy left as it is.
    before = (out / "Dockerfile").stat().st_ino
    again = run(tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1] == "unchanged"
    assert len(calls(tmp_path)) == 1
    assert (out / "Dockerfile").stat().st_ino == before
    assert not [p for p in (tmp_path / "out").iterdir() if p.name != "ctx"]

    # A changed context file: a new copy, still no download.
    (tmp_path / "ctx" / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN true\n")
    edited = run(tmp_path)
    assert edited.stdout.splitlines()[-1] == "changed"
    assert "RUN true" in (out / "Dockerfile").read_text()
    assert len(calls(tmp_path)) == 1


def test_key_follows_the_file_and_the_platform(tmp_path: Path):
    make_context(tmp_path, "six==1.17.0\n")
    assert run(tmp_path).returncode == 0
    assert run(tmp_path, platform="manylinux_2_28_aarch64").returncode == 0
    args = calls(tmp_path)[1]["args"]
    platforms = [args[i + 1] for i, a in enumerate(args) if a == "--platform"]
    assert platforms[0] == "manylinux_2_28_aarch64" and "manylinux2014_aarch64" in platforms
    assert not [p for p in platforms if "manylinux1" in p or "manylinux2010" in p]
    make_context(tmp_path, "six==1.16.0\n")
    assert run(tmp_path).returncode == 0
    keys = [p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")]
    assert len(keys) == 3 and len(calls(tmp_path)) == 3
    wheels = tmp_path / "out" / "ctx" / "wheels"
    assert [p.name for p in wheels.iterdir()] == ["six-1.16.0-py3-none-any.whl"]


def test_refuses_what_is_not_pinned_and_keeps_no_half_download(tmp_path: Path):
    make_context(tmp_path, "six>=1.16\n")
    res = run(tmp_path)
    assert res.returncode != 0 and "not name==version" in res.stderr
    make_context(tmp_path, "six==1.17.0\n")
    (tmp_path / "ctx" / "requirements.txt").write_text("six==1.17.0\n")
    res = run(tmp_path)
    assert res.returncode != 0 and "python-version" in res.stderr
    make_context(tmp_path, "six==1.17.0\n")
    (tmp_path / "ctx" / "requirements.txt").write_text(
        "# python-version: 3.11\nsix==1.17.0\nidna==3.20\n"
    )
    res = run(tmp_path, env={"FAKE_PIP_FAIL": "1"})
    assert res.returncode != 0 and "pip download failed" in res.stderr
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [".lock"]
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
    # The next run downloads it all.
    assert run(tmp_path).returncode == 0
    assert len(list((tmp_path / "out" / "ctx" / "wheels").iterdir())) == 2


def test_apps_requirements_pin_every_package():
    """Every line `name==version`; JupyterLab, its kernel and terminal among them; the
    Python named; the image's files in place."""
    lines = (APPS / "requirements.txt").read_text().splitlines()
    reqs = [line for line in lines if line.strip() and not line.startswith("#")]
    assert reqs and all("==" in r and ";" not in r and " " not in r for r in reqs), reqs
    names = {r.split("==")[0] for r in reqs}
    assert {"jupyterlab", "ipykernel", "terminado", "jupyter-server-terminals"} <= names
    assert len(names) == len(reqs)
    assert "# python-version: 3.11" in lines
    assert os.stat(SCRIPT).st_mode & stat.S_IXUSR
    service = json.loads((APPS / "jupyter.json").read_text())
    assert service["command"][:2] == ["/opt/bai/apps/bin/jupyter", "lab"]
    assert "--port={ports[0]}" in service["command"]
    dockerfile = (APPS / "Dockerfile").read_text()
    assert 'LABEL ai.backend.service-ports="jupyter:http:8090"' in dockerfile
    assert "/etc/backend.ai/service-defs/jupyter.json" in dockerfile
