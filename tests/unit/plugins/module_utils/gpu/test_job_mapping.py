"""dcgm-exporter's job mapping on a GPU agent (gpu/job_mapping.py, docs/metrics.md): one
file per GPU index holding the ids of the sessions that hold it, made from the engine's
containers after each create and removal: the pure parts over listed containers (the
module's part: test_module_session_containers.py)."""

from __future__ import annotations

import os

from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_GPU_DEVICES,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.gpu import job_mapping


def listed(sid, devices, state="running"):
    return {"Labels": {LABEL_SESSION_ID: sid, LABEL_GPU_DEVICES: devices}, "State": state}


def files(folder):
    return {n: (folder / n).read_text() for n in sorted(os.listdir(folder))}


def test_the_mapping_names_each_held_gpu_s_sessions_and_not_a_stopped_one():
    found = job_mapping.mapping(
        [
            listed("s-a", "0,1"),
            listed("s-b", "1"),  # a GPU two virtual agents' sessions share
            listed("s-c", "2", state="exited"),  # a batch member stopped before its removal
            listed("s-d", ""),
            {"Labels": {LABEL_GPU_DEVICES: "3"}, "State": "running"},  # no session id
        ]
    )
    assert found == {0: ["s-a"], 1: ["s-a", "s-b"]}


def test_sync_writes_what_changed_removes_only_numbered_files_and_makes_no_empty_folder(tmp_path):
    folder = tmp_path / "map"
    assert job_mapping.sync(str(folder), {}) is False and not folder.exists()
    assert job_mapping.sync(str(folder), {0: ["s-a"], 3: ["s-a", "s-b"]}) is True
    assert files(folder) == {"0": "s-a\n", "3": "s-a\ns-b\n"}
    assert oct(os.stat(folder / "0").st_mode & 0o777) == "0o644"
    before = os.stat(folder / "0").st_ino
    (folder / "README").write_text("the operator's")
    assert job_mapping.sync(str(folder), {0: ["s-a"]}) is True
    assert files(folder) == {"0": "s-a\n", "README": "the operator's"}
    assert os.stat(folder / "0").st_ino == before  # unchanged: not rewritten
    assert job_mapping.sync(str(folder), {0: ["s-a"]}) is False
