"""``bai-cluster`` on a login host, as the user who runs it: the user's own public keys
are read here, as the user (the service account may not read their home), then the
request goes through sudo to the service side (service.py), which checks all of it again:
nothing here is a guard. A request that does not parse (and ``--help``) ends here.

- ``--authorized-key FILE.pub`` becomes the key line the file holds;
- ``session create`` and ``session run`` without ``--authorized-key`` get the user's
  first key of ~/.ssh/id_ed25519.pub, id_ecdsa.pub, id_rsa.pub (the app proxy lets them
  in with it).

The login host's role installs ``bai-cluster`` as a script that runs
``python -m bai_cli.login.user --as SERVICE_USER --gate PATH -- ARGS...``.
"""

from __future__ import annotations

import argparse
import contextlib
import grp
import io
import os
import pwd
import sys
from collections.abc import Sequence
from pathlib import Path

from ..errors import EXIT_BAD_INPUT
from .gate import Refused
from .service import SETTINGS

KEY_FILES = ("id_ed25519.pub", "id_ecdsa.pub", "id_rsa.pub")
OPTION = "--authorized-key"


def _action(argv: Sequence[str]) -> str:
    """``session ACTION``'s action, or "" (also when the request does not parse: the
    service side says why)."""
    from ..__main__ import build_parser, split_remote

    own, _remote = split_remote(argv)
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            args = build_parser().parse_args(own)
    except SystemExit:
        return ""
    return str(getattr(args, "action", "")) if args.command == "session" else ""


def _key_line(value: str, home: Path) -> str:
    """The key line of a .pub file the user names, else ``value`` as given."""
    path = home / value[2:] if value.startswith("~/") else Path(value)
    if value.endswith(".pub") and path.is_file():
        return path.read_text(encoding="utf-8").strip()
    return value


def with_own_keys(argv: Sequence[str], home: Path) -> list[str]:
    """``argv`` with the user's key files read (see the module's docstring)."""
    from ..__main__ import split_remote

    head, remote = split_remote(argv)
    given = False
    for i, token in enumerate(head):
        if token == OPTION and i + 1 < len(head):
            head[i + 1] = _key_line(head[i + 1], home)
            given = True
        elif token.startswith(OPTION + "="):
            head[i] = OPTION + "=" + _key_line(token[len(OPTION) + 1 :], home)
            given = True
    if not given and _action(head) in ("create", "run"):
        for name in KEY_FILES:
            found = home / ".ssh" / name
            if found.is_file():
                head += [OPTION, found.read_text(encoding="utf-8").strip()]
                break
    return head + (["--", *remote] if "--" in argv else [])


def not_a_member(settings: Path, owner_uid: int = 0) -> str:
    """Why sudo will refuse this user (in neither of the login host's groups), said
    before asking it; "" when it will not, or when the settings cannot be read (the gate
    then says what is wrong)."""
    from .service import load_settings

    try:
        config = load_settings(settings, owner_uid)
    except Refused:
        return ""
    me = pwd.getpwuid(os.getuid())
    names = set()
    for gid in os.getgrouplist(me.pw_name, me.pw_gid):
        with contextlib.suppress(KeyError):
            names.add(grp.getgrgid(gid).gr_name)
    if {config.users_group, config.admins_group} & names:
        return ""
    return (
        f"user {me.pw_name} may not use this cluster (not in group {config.users_group}); "
        f"ask its administrators"
    )


def main(argv: Sequence[str] | None = None, settings: Path = SETTINGS) -> int:
    parser = argparse.ArgumentParser(prog="bai-cluster")
    parser.add_argument("--as", dest="service_user", required=True)
    parser.add_argument("--gate", required=True)
    parser.add_argument("request", nargs=argparse.REMAINDER)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    request = args.request[1:] if args.request[:1] == ["--"] else args.request
    # A request that does not parse ends here, as the user, with argparse's message (and
    # --help is answered here); the service side checks everything again.
    from ..__main__ import build_parser, split_remote

    build_parser().parse_args(split_remote(request)[0])
    refusal = not_a_member(settings)
    if refusal:
        print(f"bai-cluster: refused: {refusal}; nothing was changed", file=sys.stderr)
        return EXIT_BAD_INPUT
    request = with_own_keys(request, Path.home())
    os.execvp("sudo", ["sudo", "-n", "-u", args.service_user, args.gate, *request])
    return 1  # pragma: no cover - execvp does not return


if __name__ == "__main__":
    sys.exit(main())
