"""bai_cli.runner: what one ansible-runner run writes to disk, and that it goes away.

One real ansible-runner run of a tiny localhost playbook (about 2 s, no Docker): a
no_log task makes a secret in memory, like bai_session_keypair does. While it runs, the
playbook itself lists its private data dir and records what it sees; afterwards the
test looks at a kept copy and at the temp folder.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import textwrap
from pathlib import Path

import pytest

from bai_cli import runner

PLAYBOOK = textwrap.dedent(
    """\
    - name: Runner probe
      hosts: localhost
      connection: local
      gather_facts: false
      vars:
        ansible_python_interpreter: "{{ ansible_playbook_python }}"
      tasks:
        - name: Make a secret in memory (never printed)
          ansible.builtin.set_fact:
            probe_secret: "PROBE-PRIVATE-{{ 999999999 | random(seed=probe_marker) }}-KEY"
          no_log: true

        - name: Look at the private data dir while running
          ansible.builtin.find:
            paths: "{{ lookup('env', 'AWX_ISOLATED_DATA_DIR') | dirname | dirname }}"
            recurse: true
            hidden: true
          register: probe_files

        - name: Stat the extravars file
          ansible.builtin.stat:
            path: "{{ lookup('env', 'AWX_ISOLATED_DATA_DIR') | dirname | dirname }}/env/extravars"
          register: probe_extravars

        - name: Record what was seen (set_stats)
          ansible.builtin.set_stats:
            data:
              probe:
                files: "{{ probe_files.files | map(attribute='path') | list }}"
                extravars_mode: "{{ probe_extravars.stat.mode }}"
                marker: "{{ probe_marker }}"
                secret_length: "{{ probe_secret | length }}"
            aggregate: false
            per_host: false

        - name: Fail when asked to
          ansible.builtin.fail:
            msg: "failing on purpose"
          when: probe_fail | default(false) | bool
    """
)


@pytest.fixture
def temp_root(tmp_path, monkeypatch):
    """tempfile's folder for this test only, so what the runner leaves can be seen."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


@pytest.fixture
def playbook(tmp_path):
    path = tmp_path / "probe.yml"
    path.write_text(PLAYBOOK)
    return path


def all_text(folder: Path) -> str:
    return "\n".join(
        p.read_text(errors="replace") for p in sorted(folder.rglob("*")) if p.is_file()
    )


def test_run_keeps_secrets_and_extravars_off_disk(playbook, temp_root, tmp_path):
    keep = tmp_path / "kept"
    events = []
    marker = "extravar-value-7c1e"
    result = runner.run_playbook(
        str(playbook), {"probe_marker": marker}, on_event=events.append, keep_dir=str(keep)
    )
    assert result.ok, result.output_tail
    probe = result.stats["probe"]
    assert probe["marker"] == marker  # the extravars reached the play
    assert probe["extravars_mode"] == "0600"
    # While running: no job_events/*.json files, nothing in env/ but extravars.
    seen = [Path(p) for p in probe["files"]]
    assert not [p for p in seen if p.parent.name == "job_events" and "partial" not in p.name]
    assert [p.name for p in seen if p.parent.name == "env"] == ["extravars"]
    # Events came to the handler, the no_log one censored.
    secret_events = [
        e for e in events if (e.get("event_data") or {}).get("task", "").startswith("Make a secret")
    ]
    assert any(
        "censored" in (e["event_data"].get("res") or {})
        for e in secret_events
        if e["event"] == "runner_on_ok"
    )
    assert "PROBE-PRIVATE-" not in json.dumps(events)
    # The kept copy: no secret anywhere, the extravars only in the 0600 file.
    (kept,) = keep.iterdir()
    text = all_text(kept)
    assert "PROBE-PRIVATE-" not in text
    # Neither on the command line nor in the environment ansible-playbook ran with.
    command = json.loads((next(kept.glob("artifacts/*/command"))).read_text())
    assert marker not in json.dumps(command)
    assert "-e" in command["command"] and any(
        arg.endswith("/env/extravars") for arg in command["command"]
    )
    mode = stat.S_IMODE(os.stat(kept / "env" / "extravars").st_mode)
    assert mode == 0o600
    # The run's own folder is gone.
    assert list(temp_root.iterdir()) == []


def test_failed_run_reports_the_task_and_cleans_up(playbook, temp_root):
    result = runner.run_playbook(str(playbook), {"probe_marker": "m", "probe_fail": True})
    assert not result.ok and result.rc != 0
    assert [(f.task, f.msg) for f in result.fatal] == [("Fail when asked to", "failing on purpose")]
    assert result.counts["failures"] == {"localhost": 1}
    assert list(temp_root.iterdir()) == []


def test_missing_playbook_leaves_nothing(temp_root):
    with pytest.raises(FileNotFoundError):
        runner.run_playbook("playbooks/no-such-playbook.yml")
    assert list(temp_root.iterdir()) == []


def test_inventory_paths_resolve_from_cwd_then_repo(tmp_path, monkeypatch):
    root = runner.repo_root()
    monkeypatch.chdir(tmp_path)
    assert runner.resolve_inventory("inventories/local", root) == str(root / "inventories/local")
    (tmp_path / "mine").mkdir()
    assert runner.resolve_inventory("mine", root) == str(tmp_path / "mine")
    assert runner.resolve_inventory(None, root) is None
    assert runner.resolve_inventory("h1,h2,", root) == "h1,h2,"


def test_event_failure_reads_msg_and_loop_items():
    failure = runner.event_failure(
        {
            "event": "runner_on_failed",
            "event_data": {
                "task": "Remove",
                "host": "localhost",
                "ignore_errors": False,
                "res": {"results": [{"failed": True, "msg": "a\n  b"}, {"failed": False}]},
            },
        }
    )
    assert (failure.task, failure.msg, failure.ignored) == ("Remove", "a b", False)
    assert runner.event_failure({"event": "runner_on_ok", "event_data": {}}) is None
