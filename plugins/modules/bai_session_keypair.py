#!/usr/bin/python
"""Ansible module bai_session_keypair: fresh SSH keys for one cluster session."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bai_session_keypair
short_description: Generate a cluster session's SSH user keypair and host keypair
description:
  - Generates two fresh ed25519 keypairs in memory on the controller, never reused
    between sessions (CONTRACT 3.5) - the session's user key (the same in every
    container, for C(ssh sub1) as user C(work)) and the session's host key (the same in
    every container, so C(known_hosts) can be prepared and host keys are verified).
  - Uses the C(cryptography) package; falls back to C(ssh-keygen) in a private (0700)
    temporary folder that is removed before the module returns.
  - Writes nothing anywhere, so it never reports a change.
  - B(The task calling this module must set C(no_log) to C(true)); the result holds private
    keys. Pass RV(keypair) to M(bai_session_containers), whose C(keypair) option is
    C(no_log), and do not print it.
version_added: "0.1.0"
author: bai-cluster maintainers
options:
  comment:
    description: Comment of the public keys (usually the session name).
    type: str
    default: bai-session
attributes:
  check_mode:
    support: full
    description:
      - Generates keys in check mode too (nothing is written), so later tasks can be checked.
  diff_mode:
    support: none
  idempotent:
    support: none
    description: Every run returns new keys, by design; it never changes the system.
requirements:
  - cryptography (preferred) or the ssh-keygen program
"""

EXAMPLES = r"""
- name: Generate the session keys
  bai_session_keypair:
    comment: "{{ session_name }}"
  register: session_keys
  no_log: true
"""

RETURN = r"""
keypair:
  description:
    - C(private_key), C(public_key) (the user key, OpenSSH format) and C(host_private_key),
      C(host_public_key). Secret - never print it.
  returned: success
  type: dict
fingerprints:
  description: SHA256 fingerprints of the two public keys (not secret).
  returned: success
  type: dict
backend:
  description: C(cryptography) or C(ssh-keygen).
  returned: success
  type: str
"""

import base64  # noqa: E402
import hashlib  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

try:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    HAS_CRYPTOGRAPHY = True
except ImportError:  # pragma: no cover - the fallback is exercised where it is missing
    HAS_CRYPTOGRAPHY = False


def _with_cryptography(comment: str) -> tuple[str, str]:
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    return private, f"{public} {comment}\n"


def _with_ssh_keygen(module: AnsibleModule, comment: str) -> tuple[str, str]:
    program = shutil.which("ssh-keygen")
    if program is None:
        module.fail_json(
            msg="neither the Python 'cryptography' package nor ssh-keygen is available on "
            "the controller; install one (pip install cryptography, or apt-get install "
            "openssh-client)"
        )
    folder = tempfile.mkdtemp(prefix="bai-keys-")
    try:
        os.chmod(folder, 0o700)
        path = os.path.join(folder, "key")
        subprocess.run(
            [program, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        with open(path) as handle:
            private = handle.read()
        with open(path + ".pub") as handle:
            public = handle.read()
    except (OSError, subprocess.CalledProcessError) as exc:
        module.fail_json(msg=f"ssh-keygen failed: {exc}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return private, public if public.endswith("\n") else public + "\n"


def fingerprint(public: str) -> str:
    blob = base64.b64decode(public.split()[1])
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


ARGUMENT_SPEC = {"comment": {"type": "str", "default": "bai-session"}}


def run(module: AnsibleModule) -> dict:
    """The module's work; ``module`` needs only params and fail_json (see main())."""
    comment = module.params["comment"]
    if HAS_CRYPTOGRAPHY:
        backend = "cryptography"
        user = _with_cryptography(comment)
        host = _with_cryptography(f"{comment}-host")
    else:
        backend = "ssh-keygen"
        user = _with_ssh_keygen(module, comment)
        host = _with_ssh_keygen(module, f"{comment}-host")
    return {
        "changed": False,
        "backend": backend,
        "keypair": {
            "private_key": user[0],
            "public_key": user[1],
            "host_private_key": host[0],
            "host_public_key": host[1],
        },
        "fingerprints": {"user": fingerprint(user[1]), "host": fingerprint(host[1])},
    }


def main() -> None:
    # Normally run in the controller's process by plugins/action/bai_session_keypair.py;
    # this entry point serves a play that ships the module to a host.
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
