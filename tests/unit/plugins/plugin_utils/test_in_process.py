"""plugins/plugin_utils/in_process.py: when a module runs in the controller's process
(HereFirstAction only where its host is the controller itself), and the module shim's
run_command, get_bin_path and warnings. Real ansible-playbook runs of both paths are the
integration tests: inventories/local (in this process) and the lab (shipped)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from ansible_collections.bai.cluster.plugins.plugin_utils.in_process import (
    HereFirstAction,
    _Done,
    _Module,
)

HERE = sys.executable


class _Templar:
    def template(self, value):
        return value.replace("{{ ansible_playbook_python }}", HERE)


def action(transport="local", become=False, delegate_to=None) -> HereFirstAction:
    """A HereFirstAction with only what _here reads (no task is run)."""
    made = HereFirstAction.__new__(HereFirstAction)
    made._connection = SimpleNamespace(transport=transport)
    made._play_context = SimpleNamespace(become=become)
    made._task = SimpleNamespace(delegate_to=delegate_to)
    made._templar = _Templar()
    return made


@pytest.mark.parametrize(
    ("transport", "become", "interpreter", "here"),
    [
        ("local", False, HERE, True),
        ("local", False, "{{ ansible_playbook_python }}", True),
        ("local", True, HERE, False),  # become: another user, shipped
        ("ssh", False, HERE, False),
        ("community.docker.docker", False, HERE, False),
        ("local", False, "/usr/bin/python3-elsewhere", False),  # another Python
        ("local", False, None, False),  # not said: shipped, as discovery decides
    ],
)
def test_here_only_for_the_controller_itself(transport, become, interpreter, here):
    task_vars = {} if interpreter is None else {"ansible_python_interpreter": interpreter}
    assert action(transport, become)._here(task_vars) is here


def test_a_delegated_task_reads_the_delegated_host_s_interpreter():
    task_vars = {
        "ansible_python_interpreter": "/usr/bin/python3-elsewhere",
        "ansible_delegated_vars": {"ledger": {"ansible_python_interpreter": HERE}},
    }
    assert action(delegate_to="ledger")._here(task_vars) is True
    assert action(delegate_to="other")._here(task_vars) is False


def test_shim_run_command_get_bin_path_and_warnings():
    module = _Module({}, check_mode=False)
    assert module.run_command(["sh", "-c", 'echo "$X"'], environ_update={"X": "y"}) == (
        0,
        "y\n",
        "",
    )
    assert module.get_bin_path("sh")
    assert module.get_bin_path("no-such-program-here") is None
    with pytest.raises(OSError):
        module.run_command(["/no/such/program"], handle_exceptions=False)
    with pytest.raises(_Done) as failed:
        module.run_command(["/no/such/program"])
    assert failed.value.result["failed"]
    module.warn("careful")
    with pytest.raises(_Done) as done:
        module.exit_json(answer=1)
    assert done.value.result == {"answer": 1, "warnings": ["careful"]}


def test_shim_get_bin_path_looks_in_the_sbin_folders_as_ansible_does(monkeypatch):
    """nft lives in /usr/sbin, which a user's PATH may lack: AnsibleModule.get_bin_path
    looks there too, and so must the shim."""
    sbin = Path("/usr/sbin")
    program = next(p for p in sorted(sbin.iterdir()) if p.is_file() and os.access(p, os.X_OK))
    monkeypatch.setenv("PATH", "/nonexistent")
    assert _Module({}, check_mode=False).get_bin_path(program.name) in (
        str(program),
        f"/sbin/{program.name}",
    )
