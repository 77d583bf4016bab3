"""Module payloads with their bytecode (plugins/plugin_utils/payload_bytecode.py): imported
from the bytecode by the Python that made it, from the source by any other, and kept by
the store beside the plain payload; the callback uses them only where every host is the
controller without pipelining (a real ansible-playbook run decides)."""

from __future__ import annotations

import base64
import io
import json
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from ansible.executor.module_common import _CachedModule
from ansible_collections.bai.cluster.plugins.plugin_utils import payload_bytecode as pb
from ansible_collections.bai.cluster.plugins.plugin_utils import payload_store as ps
from playbook_run import ansible_playbook

REPO = Path(__file__).resolve().parents[4]
OWN = ps.OWN_PREFIX + "bai_x-ZIP_DEFLATED-none"


def a_zip() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("pkg/__init__.py", "")
        z.writestr("pkg/mod.py", "def answer():\n    return 6 * 7\n")
        z.writestr("pkg/data.txt", "not Python")
    return out.getvalue()


def imported(zip_path: Path) -> dict[str, str]:
    """Import pkg.mod from the zip in a fresh Python (this one): its file and answer."""
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import pkg.mod as m; "
        "print(json.dumps({'file': m.__file__, 'answer': m.answer()}))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code, str(zip_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def test_a_zip_with_bytecode_is_imported_from_it_and_any_other_python_uses_the_source(tmp_path):
    plain = a_zip()
    with_pyc = pb.zip_with_bytecode(plain)
    names = zipfile.ZipFile(io.BytesIO(with_pyc)).namelist()
    assert sorted(names) == sorted(
        ["pkg/__init__.py", "pkg/__init__.pyc", "pkg/mod.py", "pkg/mod.pyc", "pkg/data.txt"]
    )
    (tmp_path / "pyc.zip").write_bytes(with_pyc)
    got = imported(tmp_path / "pyc.zip")
    assert got["file"].endswith("pkg/mod.pyc") and got["answer"] == 42
    # Bytecode of another Python (another magic number): the source is compiled instead.
    other = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(with_pyc)) as src, zipfile.ZipFile(other, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, b"\0\0\r\n" + data[4:] if info.filename.endswith(".pyc") else data)
    (tmp_path / "other.zip").write_bytes(other.getvalue())
    got = imported(tmp_path / "other.zip")
    assert got["file"].endswith("pkg/mod.py") and got["answer"] == 42


def test_a_cached_payload_gets_its_bytecode_and_keeps_the_rest():
    cached = _CachedModule(
        zip_data=base64.b64encode(a_zip()), metadata="metadata", source_mapping={"/a": "b"}
    )
    variant = pickle.loads(pb.with_bytecode(pickle.dumps(cached)))
    assert isinstance(variant, _CachedModule)
    assert (variant.metadata, variant.source_mapping) == ("metadata", {"/a": "b"})
    names = zipfile.ZipFile(io.BytesIO(base64.b64decode(variant.zip_data))).namelist()
    assert "pkg/mod.pyc" in names and "pkg/mod.py" in names
    with pytest.raises(pb.UnknownForm):
        pb.with_bytecode(b"not a pickle")
    with pytest.raises(pb.UnknownForm):
        pb.with_bytecode(pickle.dumps({"zip_data": "no"}))


def test_the_store_keeps_both_forms_of_a_payload(tmp_path):
    kept = ps.store_dir(tmp_path / "store", "k")
    run = tmp_path / "run" / "ansiballz_cache"
    run.mkdir(parents=True)
    cached = _CachedModule(zip_data=base64.b64encode(a_zip()), metadata=None, source_mapping={})
    (run / OWN).write_bytes(pickle.dumps(cached))
    assert ps.keep(run, kept) == 1
    assert (kept / OWN).read_bytes() == (run / OWN).read_bytes()
    variant = pickle.loads((kept / ps.BYTECODE / OWN).read_bytes())
    zipped = zipfile.ZipFile(io.BytesIO(base64.b64decode(variant.zip_data)))
    assert "pkg/mod.pyc" in zipped.namelist()
    assert oct(os.stat(kept / ps.BYTECODE).st_mode & 0o777) == oct(0o700)
    # A run links one form or the other.
    linked = tmp_path / "run2" / "ansiballz_cache"
    linked.parent.mkdir()
    assert ps.link(kept / ps.BYTECODE, linked) == 1
    assert os.readlink(linked / OWN) == str(kept / ps.BYTECODE / OWN)


@pytest.mark.parametrize(
    ("hosts", "form"),
    [
        # Every host is the controller, modules read from files: the bytecode form.
        ({"here": {"ansible_connection": "local", "ansible_pipelining": False}}, "bytecode"),
        # Pipelining (the default in ansible.cfg), or one host elsewhere: the plain form.
        ({"here": {"ansible_connection": "local"}}, "plain"),
        (
            {
                "here": {"ansible_connection": "local", "ansible_pipelining": False},
                "agent": {"ansible_host": "192.0.2.1"},
            },
            "plain",
        ),
    ],
)
def test_a_run_links_the_bytecode_form_only_where_every_host_is_the_controller_itself(
    tmp_path, hosts, form
):
    inventory = tmp_path / "hosts.json"
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    playbook = tmp_path / "play.yml"
    playbook.write_text("- hosts: localhost\n  gather_facts: false\n  tasks: []\n")
    done = ansible_playbook(
        ["-vvv", "-i", str(inventory), str(playbook)],
        tmp_path,
        env={"BAI_PAYLOAD_CACHE": str(tmp_path / "store")},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    out = done.stdout
    linked = [line for line in out.splitlines() if "payload(s) from" in line]
    assert len(linked) == 1, out[-2000:]
    assert linked[0].endswith("/bytecode") == (form == "bytecode"), linked[0]
