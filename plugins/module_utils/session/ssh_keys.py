"""SSH keys in session containers: which public keys are accepted, and the in-memory
archives that carry keys into a container (``put_archive``: no key touches the agent's
disk outside the container).

    is_public_key(value)         one OpenSSH public key line (the ssh_public_key test)
    public_key_errors(keys)      what is wrong with a list of people's public keys
    session_tar(files)           the session's keys, for /opt/bai/session (root, 0700/0600)
    authorized_keys_tar(keys)    people's keys, for ~work/.ssh/authorized_keys2 (root, 0644)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.archives import root_tar

# An OpenSSH public key line: type, base64 blob, optional comment. No options prefix
# (command=..., from=...) and no line breaks: one key per entry.
PUBLIC_KEY_RE = re.compile(
    r"^(ssh-(ed25519|rsa|dss)|ecdsa-sha2-nistp(256|384|521)|sk-(ssh-ed25519|ecdsa-sha2-nistp256)@openssh\.com)"
    r" [A-Za-z0-9+/]+={0,2}( [^\r\n]*)?$"
)
# Where people's keys go in a session container: sshd reads ~/.ssh/authorized_keys and
# ~/.ssh/authorized_keys2 by default (AuthorizedKeysFile), and the session image's
# entrypoint rewrites authorized_keys (the session key) when it installs the keys.
PEOPLE_KEYS_FILE = "authorized_keys2"
# The session's key files in /opt/bai/session -> their key in bai_session_keypair's result.
SESSION_KEY_FILES = {
    "id_cluster": "private_key",
    "id_cluster.pub": "public_key",
    "host_key": "host_private_key",
    "host_key.pub": "host_public_key",
}


def is_public_key(value: Any) -> bool:
    """True when ``value`` is a string holding one OpenSSH public key line."""
    return isinstance(value, str) and PUBLIC_KEY_RE.match(value.strip()) is not None


def public_key_errors(keys: Any) -> list[str]:
    """One line per entry of ``keys`` that is not a single OpenSSH public key (empty = fine).
    Never echoes a whole entry: a private key pasted by mistake must not reach a log."""
    if not isinstance(keys, (list, tuple)):
        return [f"expected a list of public keys, got {type(keys).__name__}"]
    problems = []
    for i, key in enumerate(keys):
        if not isinstance(key, str):
            problems.append(f"[{i}]: expected a string, got {type(key).__name__}")
        elif "PRIVATE KEY" in key:
            problems.append(f"[{i}]: is a private key; pass the public key (the .pub file)")
        elif not is_public_key(key):
            problems.append(
                f"[{i}]: not one OpenSSH public key line (TYPE BASE64 [COMMENT], e.g. "
                f"'ssh-ed25519 AAAA... user@host'; starts with {key.strip()[:12]!r})"
            )
    return problems


def session_tar(keypair: Mapping[str, str], folder: str = "session") -> bytes:
    """The session's keys (bai_session_keypair's result: ``SESSION_KEY_FILES``' values)
    as ``folder/`` (0700) holding one file each (0600), all root-owned."""
    files = {name: keypair[key].encode() for name, key in SESSION_KEY_FILES.items()}
    return root_tar(files, mode=0o600, folder=folder)


def authorized_keys_tar(keys: Iterable[str], name: str = PEOPLE_KEYS_FILE) -> bytes:
    """One file ``name`` holding ``keys`` (one per line), for ``/home/work/.ssh``:
    root-owned, 0644 (sshd reads it as the user; StrictModes accepts a root-owned file
    that only root can write)."""
    data = "".join(f"{key.strip()}\n" for key in keys).encode()
    return root_tar({name: data}, mode=0o644)
