# Copyright: the bai.cluster authors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Callback ``bai.cluster.vars_files_cache``: the collection's own vars files read once
per playbook run, not once per task."""

from __future__ import annotations

DOCUMENTATION = r"""
name: vars_files_cache
author: bai-cluster developers (@bai-cluster)
version_added: 1.0.0
type: aggregate
short_description: Reads the collection's play vars files once per playbook run
description:
  - Ansible reads a play's C(vars_files) anew each time it works out a task's variables
    (it keeps only vaulted ones), so a session playbook, whose plays all name
    C(playbooks/vars/session.yml), parsed that file about 85 times a create - some 0.09 s
    of the controller's main process on a 2-container create.
  - At the start of a playbook this callback reads, once, each vars file that a play of
    the playbook names by a plain path (no template, not a first-found list) and that lies
    in this collection's C(playbooks) folder, and keeps it in Ansible's file cache as
    Ansible keeps C(group_vars) files, so the later reads find it there. Those files are
    part of the collection and never change while a playbook runs.
  - Any other vars file is read as Ansible reads it (anew each time), so a playbook that
    writes its own vars file while it runs sees what it wrote. Vars files named from
    included or imported task files are not looked at (only plays name them).
  - Nothing else changes; a file that cannot be found or read is left to the play, which
    reports it as before.
requirements:
  - enabled in callbacks_enabled (this repository's ansible.cfg does)
"""

from pathlib import Path

from ansible_collections.bai.cluster.plugins.plugin_utils.callbacks import RunCallback

# plugins/callback/vars_files_cache.py -> the collection's playbooks.
PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"


class CallbackModule(RunCallback):
    """Keeps the collection's play vars files in the loader's cache at the playbook start."""

    CALLBACK_NAME = "bai.cluster.vars_files_cache"

    def v2_playbook_on_start(self, playbook):
        try:
            kept = keep(playbook)
        except Exception as exc:  # an odd playbook object: the files are read as usual
            self._display.vvv(f"bai.cluster.vars_files_cache: {exc}")
            return
        if kept:
            names = ", ".join(str(path.resolve().relative_to(PLAYBOOKS)) for path in kept)
            self._display.vvv(f"bai.cluster.vars_files_cache: kept {names}")


def keep(playbook) -> list[Path]:
    """Read the collection's vars files that the playbook's plays name into the
    playbook's loader, cached as Ansible caches group_vars; the files kept."""
    loader = playbook._loader  # pylint: disable=protected-access
    kept: list[Path] = []
    for play in playbook.get_plays():
        for name in play.get_vars_files() or []:
            if not isinstance(name, str) or "{" in name:
                continue
            try:
                found = Path(loader.path_dwim_relative_stack(play.get_search_path(), "vars", name))
            except Exception:  # not found: the play says so, as before
                continue
            if found in kept or not found.resolve().is_relative_to(PLAYBOOKS):
                continue
            # The very arguments of Ansible's own vars_files read (VariableManager.get_vars),
            # so that the cached data is what that read would have parsed.
            loader.load_from_file(str(found), cache="all", unsafe=True, trusted_as_template=True)
            kept.append(found)
    return kept
