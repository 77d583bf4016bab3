"""plugins/callback/vars_files_cache.py: which play vars files a playbook run reads once.
Real ansible-playbook runs of a tiny playbook (no Docker, about 2 s): the collection's
playbooks/vars/session.yml is kept, and its values are what every play sees; a vars file
of the user's is read as Ansible reads it, so a task that rewrites it is seen by the
next play."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from playbook_run import ansible_playbook

REPO = Path(__file__).resolve().parents[4]
SESSION_VARS = REPO / "playbooks" / "vars" / "session.yml"

# One play of the probe playbook: it reads the collection's vars file and the user's
# (``mine``), then says what it saw, tagged TAG.
PLAY = textwrap.dedent(
    """\
    - name: {name}
      hosts: localhost
      gather_facts: false
      vars_files: [{session}, {mine}]
      tasks:
        - name: Say what this play saw
          ansible.builtin.debug:
            msg: "{tag} {{{{ {{'mode': session_mode, 'mine': probe_value}} | to_json }}}}"
    """
)

# The first play's last task: the user's vars file rewritten before the second play.
REWRITE_MINE = """\
    - name: Rewrite the user's vars file
      ansible.builtin.copy:
        dest: {mine}
        content: "probe_value: second\\n"
        mode: "0600"
"""


def playbook(mine: Path) -> str:
    """Play First (which then rewrites ``mine``) and play Second, over the same files."""
    first = PLAY.format(name="First", tag="FIRST", session=SESSION_VARS, mine=mine)
    second = PLAY.format(name="Second", tag="SECOND", session=SESSION_VARS, mine=mine)
    return first + REWRITE_MINE.format(mine=mine) + "\n" + second


def run(tmp_path: Path) -> str:
    mine = tmp_path / "mine.yml"
    mine.write_text("probe_value: first\n")
    (tmp_path / "probe.yml").write_text(playbook(mine))
    interpreter = f"ansible_python_interpreter={sys.executable}"
    done = ansible_playbook(
        ["-vvv", "-i", "localhost,", "-c", "local", "-e", interpreter, str(tmp_path / "probe.yml")],
        tmp_path,
        env={"ANSIBLE_CALLBACKS_ENABLED": "bai.cluster.vars_files_cache"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return done.stdout


def seen(out: str, play: str) -> dict:
    """What the play's debug task said (``msg: 'PLAY {...}'``)."""
    (line,) = [line for line in out.splitlines() if f"msg: '{play} " in line]
    return json.loads(line.split(f"msg: '{play} ", 1)[1].rstrip("'"))


def test_the_collection_s_vars_file_is_kept_and_a_user_s_is_read_anew(tmp_path):
    out = run(tmp_path)
    lines = [line for line in out.splitlines() if "bai.cluster.vars_files_cache:" in line]
    assert lines == ["bai.cluster.vars_files_cache: kept vars/session.yml"], lines
    # The kept file's values in every play; the user's file as it is when each task reads it.
    assert seen(out, "FIRST") == {"mode": "single-node", "mine": "first"}
    assert seen(out, "SECOND") == {"mode": "single-node", "mine": "second"}
