"""Unit tests of plugins/module_utils/session/ssh_keys.py: which public keys are accepted, and
the archives that carry keys into a container."""

from __future__ import annotations

import io
import tarfile

from ansible_collections.bai.cluster.plugins.module_utils.session import ssh_keys as sk

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl a@b"


# --- people's keys --------------------------------------------------------------------
def test_public_keys_pass():
    ecdsa = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTY="
    assert sk.public_key_errors([KEY, ecdsa, KEY.rsplit(" ", 1)[0]]) == []
    assert sk.public_key_errors([]) == []


def test_bad_keys_are_named_by_position_without_echoing_them():
    private = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
    problems = sk.public_key_errors([KEY, private, "ssh-ed25519", KEY + "\nssh-rsa AAAA", 5])
    assert [p.split(":", maxsplit=1)[0] for p in problems] == ["[1]", "[2]", "[3]", "[4]"]
    assert "private key" in problems[0]
    assert "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ" not in " ".join(problems)
    assert sk.public_key_errors(KEY) == ["expected a list of public keys, got str"]


def test_authorized_keys_tar_is_one_root_owned_readable_file():
    data = sk.authorized_keys_tar([KEY, " " + KEY + " "])
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        (member,) = tar.getmembers()
        assert member.name == "authorized_keys2"
        assert (member.uid, member.gid, member.mode) == (0, 0, 0o644)
        assert tar.extractfile(member).read().decode() == f"{KEY}\n{KEY}\n"


def test_the_session_keys_are_a_root_only_folder_of_root_only_files():
    keypair = {key: f"{key} text" for key in sk.SESSION_KEY_FILES.values()}
    with tarfile.open(fileobj=io.BytesIO(sk.session_tar(keypair))) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == ["session", *sorted(f"session/{n}" for n in sk.SESSION_KEY_FILES)]
        assert members["session"].isdir() and members["session"].mode == 0o700
        for name, key in sk.SESSION_KEY_FILES.items():
            member = members[f"session/{name}"]
            assert (member.uid, member.gid, member.mode) == (0, 0, 0o600)
            assert tar.extractfile(member).read().decode() == f"{key} text"


def test_the_public_key_test_accepts_one_key_line_only():
    assert sk.is_public_key(KEY) and sk.is_public_key(f"  {KEY}  ")
    assert not sk.is_public_key(f"{KEY}\n{KEY}") and not sk.is_public_key(None)
