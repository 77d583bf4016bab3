# Copyright: the bai.cluster authors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Callback ``bai.cluster.payload_cache``: module payloads kept from one playbook run to
the next (plugins/plugin_utils/payload_store.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: payload_cache
author: bai-cluster developers (@bai-cluster)
version_added: 1.0.0
type: aggregate
short_description: Keeps module payloads between playbook runs
description:
  - Before a module runs, Ansible builds its payload (AnsiballZ) on the controller - it
    parses every file the module imports to find what to ship - once per module and per
    run, and forgets it when the run ends, at 0.3 to 0.7 s of the controller's CPU per
    module in every playbook run.
  - This callback keeps the payloads of this collection's modules (bai.cluster.*) and
    ansible-core's (ansible.builtin.*) in a folder of the controller user's, under a key
    made of the collection's module and module_utils sources (their content), the
    ansible-core version and the Python version, so a payload is never used for code it
    was not built from. At the start of a playbook it points Ansible's per-run payload
    cache at the payloads kept for this key; at the end it keeps those the run built.
  - Each payload is also kept with the bytecode of its Python files, compiled by the
    controller's Python. Runs whose every inventory host is the controller itself (the
    C(local) connection) without pipelining use that variant, which their modules import
    without compiling it (about 0.15 s less per module run); other runs use the plain
    payloads (a Python that reads its script through a pipe reads it a byte at a time, so
    a larger payload costs more there than the bytecode saves).
  - The folder must be the user's own (mode 0700). One that others may read or write, or
    a link, is not used (with a warning), one that cannot be made is passed over (said at
    C(-vvv)), and the run builds its payloads as usual. The three keys used last are kept.
  - Other collections' payloads are left to Ansible (their code is not in the key), and
    so are ad-hoc commands' (C(ansible)).
requirements:
  - enabled in callbacks_enabled (this repository's ansible.cfg does)
options:
  cache_dir:
    description:
      - The folder that keeps the payloads; C(off) or an empty value turns the cache off.
    default: ~/.cache/bai-cluster/payloads
    env:
      - name: BAI_PAYLOAD_CACHE
    ini:
      - section: bai_cluster
        key: payload_cache
    type: str
"""

import os
from pathlib import Path

from ansible import constants as C
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.loader import connection_loader
from ansible.release import __version__ as ansible_version
from ansible_collections.bai.cluster.plugins.plugin_utils import payload_store
from ansible_collections.bai.cluster.plugins.plugin_utils.callbacks import RunCallback

# plugins/callback/payload_cache.py -> the collection's root.
COLLECTION_ROOT = Path(__file__).resolve().parents[2]


class CallbackModule(RunCallback):
    """Links the kept payloads in at the start of a playbook, keeps the new ones at its
    end (plugins/plugin_utils/payload_store.py)."""

    CALLBACK_NAME = "bai.cluster.payload_cache"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kept: Path | None = None
        self._root: Path | None = None
        self._key = ""
        self._linked = False

    @property
    def _run_cache(self) -> Path:
        # Where ansible-core 2.19+ caches a run's payloads (module_common._find_module_utils).
        return Path(C.DEFAULT_LOCAL_TMP) / "ansiballz_cache"  # type: ignore[attr-defined]

    def v2_playbook_on_start(self, playbook):
        setting = (self.get_option("cache_dir") or "").strip()
        if setting in ("", "off"):
            return
        try:
            self._root = Path(os.path.expanduser(setting))
            self._key = payload_store.code_key(COLLECTION_ROOT, ansible_version)
            self._kept = payload_store.store_dir(self._root, self._key)
        except payload_store.Untrusted as exc:
            self._kept = None
            self._display.warning(f"bai.cluster.payload_cache: {exc}; payloads are built anew")
            return
        except OSError as exc:
            self._kept = None
            self._display.vvv(f"bai.cluster.payload_cache: not used ({exc})")

    def v2_playbook_on_play_start(self, play):
        # Once, before the first play's tasks: the inventory is known now.
        if self._kept is None or self._linked:
            return
        self._linked = True
        kept = self._kept / payload_store.BYTECODE if _all_on_controller(play) else self._kept
        try:
            linked = payload_store.link(kept, self._run_cache)
        except OSError as exc:
            self._display.vvv(f"bai.cluster.payload_cache: nothing linked ({exc})")
            return
        self._display.vvv(f"bai.cluster.payload_cache: {linked} payload(s) from {kept}")

    def v2_playbook_on_stats(self, stats):
        if self._kept is None or self._root is None:
            return
        try:
            # Sources edited while the playbook ran: what it built may be of either version.
            if payload_store.code_key(COLLECTION_ROOT, ansible_version) != self._key:
                self._display.vvv("bai.cluster.payload_cache: the code changed; nothing kept")
                return
            kept = payload_store.keep(self._run_cache, self._kept)
            payload_store.prune(self._root)
        except OSError as exc:
            self._display.vvv(f"bai.cluster.payload_cache: nothing kept ({exc})")
            return
        self._display.vvv(f"bai.cluster.payload_cache: {kept} new payload(s) kept")


LOCAL = ("local", "ansible.builtin.local")


def _all_on_controller(play) -> bool:
    """Whether every host of the inventory runs its modules on this controller from a file:
    the local connection without pipelining (payload_bytecode says why both). An inventory
    whose variables cannot be read here says no (the plain payloads always work)."""
    try:
        all_vars = play.get_variable_manager().get_vars(play=play)
        hostvars = all_vars["hostvars"]
        connection_loader.get("local", class_only=True)  # its options' definitions
        for name in all_vars["groups"].get("all", []):
            host = hostvars[name]
            if host.get("ansible_connection") not in LOCAL:
                return False
            pipelining = host.get("ansible_pipelining")
            variables = {} if pipelining is None else {"ansible_pipelining": pipelining}
            value = C.config.get_config_value(
                "pipelining", plugin_type="connection", plugin_name="local", variables=variables
            )
            if boolean(value, strict=False):
                return False
    except Exception:  # a template error, an odd inventory: the plain form
        return False
    return True
