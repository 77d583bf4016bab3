"""The store of module payloads kept between playbook runs (plugins/plugin_utils/payload_store.py):
keyed by the code, trusted only when private, linked in and kept whole, pruned to the newest."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from ansible_collections.bai.cluster.plugins.plugin_utils import payload_store as ps

OWN = ps.OWN_PREFIX + "bai_session_ledger-ZIP_DEFLATED-none"
BUILTIN = "ansible.modules.command-ZIP_DEFLATED-none"
OTHER = "ansible_collections.community.docker.plugins.modules.docker_container-ZIP_DEFLATED-none"
LEGACY = "ansible.legacy.command-ZIP_DEFLATED-none"


def run_cache(tmp_path: Path, run: str) -> Path:
    """A run's payload cache inside its temporary folder (which Ansible made)."""
    (tmp_path / run).mkdir()
    return tmp_path / run / "ansiballz_cache"


def collection(tmp_path: Path) -> Path:
    root = tmp_path / "collection"
    (root / "plugins/modules").mkdir(parents=True)
    (root / "plugins/module_utils/common").mkdir(parents=True)
    (root / "plugins/modules/bai_x.py").write_text("X = 1\n")
    (root / "plugins/module_utils/common/util.py").write_text("Y = 2\n")
    (root / "plugins/filter").mkdir()
    (root / "plugins/filter/f.py").write_text("Z = 3\n")
    return root


def test_the_key_follows_the_modules_code_and_the_ansible_version_only(tmp_path):
    root = collection(tmp_path)
    first = ps.code_key(root, "2.21.5")
    assert first == ps.code_key(root, "2.21.5")
    assert first != ps.code_key(root, "2.21.6")
    # A filter plugin is not shipped in a payload: the key stays.
    (root / "plugins/filter/f.py").write_text("Z = 4\n")
    assert ps.code_key(root, "2.21.5") == first
    (root / "plugins/module_utils/common/util.py").write_text("Y = 3\n")
    changed = ps.code_key(root, "2.21.5")
    assert changed != first
    # A file moved to another name changes the key too (names are part of it).
    (root / "plugins/module_utils/common/util.py").rename(root / "plugins/module_utils/u.py")
    assert ps.code_key(root, "2.21.5") != changed


def test_a_store_is_made_private_and_refused_when_others_may_write_it(tmp_path):
    store = tmp_path / "store"
    kept = ps.store_dir(store, "k1")
    assert kept == store / "k1"
    assert oct(os.stat(store).st_mode & 0o777) == oct(0o700)
    assert oct(os.stat(kept).st_mode & 0o777) == oct(0o700)
    os.chmod(kept, 0o755)
    with pytest.raises(ps.Untrusted, match="k1 is not this user's own private folder"):
        ps.store_dir(store, "k1")
    os.chmod(kept, 0o700)
    os.chmod(store, 0o777)
    with pytest.raises(ps.Untrusted):
        ps.store_dir(store, "k1")
    os.chmod(store, 0o700)
    # A link in place of the store is never followed.
    os.symlink(store, tmp_path / "link")
    with pytest.raises(ps.Untrusted, match="link is not"):
        ps.store_dir(tmp_path / "link", "k1")
    # A store that cannot be made: the OSError says why (the run builds its payloads).
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError):
        ps.store_dir(tmp_path / "file" / "store", "k1")


def test_a_run_keeps_what_it_built_and_the_next_run_links_it(tmp_path):
    kept = ps.store_dir(tmp_path / "store", "k")
    run1 = run_cache(tmp_path, "run1")
    # Nothing kept yet: nothing linked (the folder is made for Ansible).
    assert ps.link(kept, run1) == 0 and run1.is_dir()
    (run1 / OWN).write_bytes(b"payload")
    (run1 / (OWN + ".lock")).write_bytes(b"")
    (run1 / (OWN + "-part")).write_bytes(b"half")
    (run1 / BUILTIN).write_bytes(b"ansible-core's")
    (run1 / OTHER).write_bytes(b"another collection's: not in the key")
    (run1 / LEGACY).write_bytes(b"maybe a playbook's library/: not in the key")
    assert ps.keep(run1, kept) == 2
    assert sorted(p.name for p in kept.iterdir() if p.is_file()) == sorted([OWN, BUILTIN])
    # Not in the form of Ansible's cache: no variant with bytecode.
    assert list((kept / ps.BYTECODE).iterdir()) == []
    assert oct(os.stat(kept / OWN).st_mode & 0o777) == oct(0o600)

    run2 = run_cache(tmp_path, "run2")
    assert ps.link(kept, run2) == 2
    assert (run2 / OWN).is_symlink() and (run2 / OWN).read_bytes() == b"payload"
    # What the run used from the store is not kept again (a link, not a payload it built).
    assert ps.keep(run2, kept) == 0


def test_a_payload_others_may_read_or_write_is_not_linked(tmp_path):
    kept = ps.store_dir(tmp_path / "store", "k")
    (kept / OWN).write_bytes(b"payload")
    os.chmod(kept / OWN, 0o666)
    assert ps.link(kept, run_cache(tmp_path, "run")) == 0


def test_prune_keeps_the_newest_keys_by_use(tmp_path):
    store = tmp_path / "store"
    for i, key in enumerate(["a", "b", "c", "d"]):
        folder = ps.store_dir(store, key)
        stamp = time.time() - 100 + i
        os.utime(folder, (stamp, stamp))
    # Using "a" makes it the newest.
    ps.link(store / "a", run_cache(tmp_path, "run"))
    assert sorted(ps.prune(store, keep_keys=2)) == ["b", "c"]
    assert sorted(p.name for p in store.iterdir()) == ["a", "d"]
