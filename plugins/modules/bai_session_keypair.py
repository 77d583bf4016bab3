#!/usr/bin/python
"""Ansible module bai_session_keypair: fresh SSH keys for one cluster session."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bai_session_keypair
short_description: Generate a cluster session's SSH user keypair and host keypair
description:
  - Generates two fresh ed25519 keypairs in memory on the controller, never reused
    between sessions (docs/ssh.md) - the session's user key (the same in every
    container, for C(ssh sub1) as user C(work)) and the session's host key (the same in
    every container, so C(known_hosts) can be prepared and host keys are verified).
  - Uses the C(cryptography) package; falls back to C(ssh-keygen) in a private (0700)
    temporary folder that is removed before the module returns.
  - Writes nothing anywhere, so it never reports a change.
  - B(The task calling this module must set C(no_log) to C(true)); the result holds private
    keys. Pass RV(keypair) to M(bai.cluster.bai_session_containers), whose C(keypair)
    option is C(no_log), and do not print it.
version_added: "0.1.0"
author: bai-cluster developers (@bai-cluster)
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
    description: Writes nothing, so there is no diff to show.
  idempotent:
    support: full
    description:
      - Changes nothing and never reports a change; every run returns new keys, by design.
extends_documentation_fragment:
  - bai.cluster.attributes
requirements:
  - cryptography (preferred) or the ssh-keygen program
"""

EXAMPLES = r"""
- name: Generate the session keys
  bai.cluster.bai_session_keypair:
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
  contains:
    private_key:
      description: The session's user private key (OpenSSH format). Secret.
      type: str
    public_key:
      description: The session's user public key, one OpenSSH line ending in the comment.
      type: str
    host_private_key:
      description: The session's host private key (OpenSSH format). Secret.
      type: str
    host_public_key:
      description: The session's host public key, one OpenSSH line (comment C(<comment>-host)).
      type: str
fingerprints:
  description: SHA256 fingerprints of the two public keys (not secret).
  returned: success
  type: dict
  contains:
    user:
      description: Fingerprint of RV(keypair.public_key).
      type: str
      sample: SHA256:Xo5uJ0l9lq0h0m6zK3m8Vb0o0P5cI6o0yXbq4d2m3Yw
    host:
      description: Fingerprint of RV(keypair.host_public_key).
      type: str
backend:
  description: C(cryptography) or C(ssh-keygen).
  returned: success
  type: str
  sample: cryptography
"""

import base64
import hashlib
import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

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
        # ssh-keygen writes the keys to files; its stdout and stderr never hold them.
        argv = [program, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path]
        rc, _out, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(msg=f"ssh-keygen failed (rc {rc}): {err.strip()}")
        with open(path) as handle:
            private = handle.read()
        with open(path + ".pub") as handle:
            public = handle.read()
    except OSError as exc:
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
    """The module's work; ``module`` needs only params, fail_json and run_command (see
    main() and plugins/plugin_utils/in_process.py's stand-in)."""
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
