"""plugins/callback/in_process_imports.py: which in-process modules a playbook run imports
once in the controller's main process. Real ansible-playbook runs of a tiny playbook (no
Docker, about 2 s each): its keys task always runs in-process, its ledger task (a file
ledger) only on an inventory whose hosts all use the local connection."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml
from playbook_run import ansible_playbook

REPO = Path(__file__).resolve().parents[4]
PLAYBOOK = textwrap.dedent(
    """\
    - name: Probe
      hosts: localhost
      gather_facts: false
      tasks:
        - name: In a block, with a rescue
          block:
            - name: Keys (always in process)
              bai.cluster.bai_session_keypair:
                comment: probe
              no_log: true
          rescue:
            - name: The ledger's identity (in process on the controller itself)
              bai.cluster.bai_session_ledger:
                state: identity
                store: file
                path: "{{ probe_ledger }}"
        - name: The ledger's identity again
          bai.cluster.bai_session_ledger:
            state: identity
            store: file
            path: "{{ probe_ledger }}"
    """
)


def run(tmp_path: Path, other_connection: str) -> str:
    local = {
        "ansible_connection": "local",
        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
    }
    inventory = {
        "all": {
            "hosts": {"localhost": local},
            "children": {"agents": {"hosts": {"far": {"ansible_connection": other_connection}}}},
        }
    }
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "probe.yml").write_text(PLAYBOOK)
    done = ansible_playbook(
        [
            "-vvv",
            "-i",
            str(tmp_path / "inventory.yml"),
            str(tmp_path / "probe.yml"),
            "-e",
            f"probe_ledger={tmp_path / 'ledger.json'}",
        ],
        tmp_path,
        env={"ANSIBLE_CALLBACKS_ENABLED": "bai.cluster.in_process_imports"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return done.stdout


@pytest.mark.parametrize(
    ("other_connection", "imported"),
    [
        ("local", "bai_session_keypair, bai_session_ledger imported"),
        ("ssh", "bai_session_keypair imported"),  # the ledger would be shipped elsewhere
    ],
)
def test_the_playbook_s_in_process_modules_are_imported_once(tmp_path, other_connection, imported):
    out = run(tmp_path, other_connection)
    lines = [line for line in out.splitlines() if "bai.cluster.in_process_imports:" in line]
    assert lines == [f"bai.cluster.in_process_imports: {imported}"], lines
