"""A controller-side store of module payloads (AnsiballZ), kept from one playbook run to
the next (the callback bai.cluster.payload_cache uses it): those of this collection's
modules and of ansible-core's own (ansible.builtin).

Ansible builds a module's payload once per run, in ``ansiballz_cache`` under its per-run
temporary folder, and removes the folder when the run ends. ``link`` points that cache at
the payloads kept for this code (before any task runs); ``keep`` copies in what the run
built (after the last task). A payload is kept under a key of the collection's module and
module_utils sources and the ansible-core and Python versions: it is never used for code
it was not built from (ansible-core's modules import only ansible-core's module_utils, and
this collection's only those and its own). Other collections' payloads are left to
Ansible: their code is not part of the key.

Each payload is also kept in a variant with bytecode (payload_bytecode), in the key's
BYTECODE folder; the callback links those in for runs whose modules all run on the
controller itself.

Ansible loads a cached payload with pickle, so the store is trusted only when it is this
user's own and nobody else may write it (mode 0700, checked on every use, never followed
through a link); otherwise nothing is linked or kept and the run builds its payloads as
usual.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ansible_collections.bai.cluster.plugins.plugin_utils import payload_bytecode

# Ansible's name for a cached payload: the module's Python name, then compression and
# extensions (ansible.executor.module_common._find_module_utils). Those kept: this
# collection's modules and ansible-core's (ansible.legacy names, which a playbook's own
# library/ may take, are not).
OWN_PREFIX = "ansible_collections.bai.cluster.plugins.modules."
KEPT_PREFIXES = (OWN_PREFIX, "ansible.modules.")
# A payload being written, and the lock Ansible takes to write one.
_PASSING = ("-part", ".lock")
# The folder, in a key's, of the payloads with bytecode (payload_bytecode).
BYTECODE = "bytecode"
# How many keys (versions of the code) the store keeps, the newest by use.
KEEP_KEYS = 3


def code_key(collection_root: Path, ansible_version: str) -> str:
    """The key of the payloads this code builds: every module and module_utils source of
    the collection (names and content), the ansible-core and the Python version."""
    digest = hashlib.sha256(f"{ansible_version}\0{sys.version}\0".encode())
    for sub in ("plugins/modules", "plugins/module_utils"):
        base = collection_root / sub
        for path in sorted(base.rglob("*.py")):
            digest.update(str(path.relative_to(collection_root)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:32]


def _own_private_dir(path: Path) -> bool:
    """A real folder (not a link) of this user's that no one else may write or read."""
    st = os.lstat(path)
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077


class Untrusted(Exception):
    """The store is there, but it is a link or others may write or read it: not used."""


def store_dir(root: Path, key: str) -> Path:
    """The folder of ``key`` in the store at ``root`` (and its BYTECODE folder), made
    (mode 0700) if need be; raises Untrusted when the store or a folder is not this user's
    own private folder, OSError when it cannot be made."""
    folder = root / key
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.mkdir(mode=0o700, exist_ok=True)
    (folder / BYTECODE).mkdir(mode=0o700, exist_ok=True)
    for path in (root, folder, folder / BYTECODE):
        if not _own_private_dir(path):
            raise Untrusted(f"{path} is not this user's own private folder (mode 0700)")
    return folder


def _payloads(folder: Path) -> Iterable[Path]:
    """The finished payloads of the modules kept (KEPT_PREFIXES) in ``folder``: regular
    files only (in a run's cache, a link is a payload it took from the store)."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    return [
        Path(entry.path)
        for entry in entries
        if entry.name.startswith(KEPT_PREFIXES)
        and not entry.name.endswith(_PASSING)
        and entry.is_file(follow_symlinks=False)
    ]


def link(kept: Path, run_cache: Path) -> int:
    """Point the run's payload cache at the payloads kept for this code; how many."""
    run_cache.mkdir(mode=0o700, exist_ok=True)
    linked = 0
    for payload in _payloads(kept):
        st = os.lstat(payload)
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            continue
        try:
            os.symlink(payload, run_cache / payload.name)
        except FileExistsError:
            continue
        linked += 1
    os.utime(kept)  # the newest key by use, for prune
    return linked


def _write(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all."""
    fd, part = tempfile.mkstemp(dir=path.parent, prefix=".part-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(part, path)
    except OSError:
        Path(part).unlink(missing_ok=True)
        raise


def keep(run_cache: Path, kept: Path) -> int:
    """Copy the payloads this run built into the store, each whole or not at all, and
    their variants with bytecode into its BYTECODE folder (when the payload is in the form
    payload_bytecode knows); how many payloads."""
    copied = 0
    for payload in _payloads(run_cache):
        try:
            data = payload.read_bytes()
            _write(kept / payload.name, data)
        except OSError:
            continue
        copied += 1
        try:
            _write(kept / BYTECODE / payload.name, payload_bytecode.with_bytecode(data))
        except (OSError, payload_bytecode.UnknownForm):
            continue
    return copied


def prune(root: Path, keep_keys: int = KEEP_KEYS) -> list[str]:
    """Remove all but the ``keep_keys`` keys used last; the keys removed."""
    try:
        folders = [e for e in os.scandir(root) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    folders.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime, reverse=True)
    gone = []
    for entry in folders[keep_keys:]:
        shutil.rmtree(entry.path, ignore_errors=True)
        gone.append(entry.name)
    return gone
