"""The gate of a login host (login/service.py runs it): what a user who is not an
administrator may ask ``bai-cluster`` to do, and as whom.

On a login host, users run ``bai-cluster`` as themselves; it re-executes through one sudo
rule as the service account that holds the cluster's SSH key and inventory, and this gate
runs first there. Who the caller is comes from sudo (``SUDO_UID``, which the caller cannot
set), never from an argument; the request is parsed by the same parser as any
``bai-cluster`` command line and checked before anything runs:

- members of the admin group may do everything, as the service account may;
- members of the users group may create, run, list, show, read the logs of, signal,
  open the apps of (``session app``) and destroy sessions, and only as themselves:
  ``--owner`` is theirs (or refused), and the options that reach the inventory or
  Ansible (``-i``, ``-vv`` and more, which print the modules' arguments,
  ``--keep-runner-dir``) are refused, as are ``agent``, ``site``, ``lab`` and the other
  session commands;
- anyone else gets nothing.

Every request of a user names them as the owner (``--owner``): create and run make the
session theirs, list shows theirs only, and show, logs and destroy act on a session only
when it is theirs - the session ledger and the agents' labels refuse another owner's,
changing nothing.

    caller(environ, users_group, admins_group, service_uid)   who asks (Caller), or Refused
    screen(argv, who)                                          the argv to run, or Refused
"""

from __future__ import annotations

import argparse
import contextlib
import grp
import io
import os
import pwd
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# What a member of the users group may ask, of the session commands.
USER_SESSION_ACTIONS = frozenset(
    {"create", "run", "list", "show", "explain", "logs", "signal", "destroy", "app"}
)
# The actions whose request names an owner: the caller's own name, always (all of them).
OWNED_ACTIONS = USER_SESSION_ACTIONS
# An OpenSSH public key line (TYPE BASE64 [COMMENT]): the caller's shim reads key files as
# the caller; a path here would be read as the service account.
_KEY_LINE = re.compile(r"^(ssh-|ecdsa-|sk-)[A-Za-z0-9@.-]+ [A-Za-z0-9+/]+={0,3}( [^\n]*)?$")


class Refused(Exception):
    """The request is not run: the message says why (exit code 2, nothing changed)."""


@dataclass(frozen=True)
class Caller:
    """Who asks: the login name sudo vouches for, and whether they administer the cluster."""

    name: str
    uid: int
    admin: bool


def caller(
    environ: Mapping[str, str], users_group: str, admins_group: str, service_uid: int
) -> Caller:
    """The caller sudo names, checked against the user database; Refused unless this runs
    as the service account, through sudo, for a member of one of the two groups."""
    if os.geteuid() != service_uid:
        raise Refused("this command runs as the cluster's service account, through sudo only")
    uid_text, name = environ.get("SUDO_UID", ""), environ.get("SUDO_USER", "")
    if not uid_text.isdigit() or not name:
        raise Refused("run bai-cluster as yourself: it asks sudo to act for you")
    try:
        entry = pwd.getpwuid(int(uid_text))
    except KeyError:
        raise Refused(f"user id {uid_text} has no account on this host") from None
    if entry.pw_name != name:
        raise Refused(f"sudo names user {name!r}, but user id {uid_text} is {entry.pw_name!r}")
    groups = set()
    for gid in os.getgrouplist(entry.pw_name, entry.pw_gid):
        with contextlib.suppress(KeyError):
            groups.add(grp.getgrgid(gid).gr_name)
    if admins_group in groups:
        return Caller(entry.pw_name, entry.pw_uid, admin=True)
    if users_group in groups:
        return Caller(entry.pw_name, entry.pw_uid, admin=False)
    raise Refused(
        f"user {entry.pw_name} may not use this cluster (not in group {users_group}); "
        f"ask its administrators"
    )


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    """The request as ``bai-cluster`` reads it; Refused with argparse's message when it
    does not parse."""
    from ..__main__ import build_parser, split_remote

    own, _remote = split_remote(argv)
    parser = build_parser()
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            return parser.parse_args(own)
    except SystemExit:
        said = errors.getvalue().strip().splitlines()
        raise Refused(said[-1] if said else "the request does not parse") from None


def screen(argv: Sequence[str], who: Caller) -> list[str]:
    """The argv to run for ``who``: an admin's as given; a user's checked (Refused) and
    made theirs (``--owner`` set to their name where a request names an owner)."""
    argv = list(argv)
    if who.admin:
        return argv
    args = _parse(argv)
    if args.command != "session":
        raise Refused(f"bai-cluster {args.command} is for the cluster's administrators")
    if args.action not in USER_SESSION_ACTIONS:
        raise Refused(
            f"bai-cluster session {args.action} is for the cluster's administrators; you "
            f"may: {', '.join(sorted(USER_SESSION_ACTIONS))}"
        )
    if getattr(args, "inventory", None) is not None:
        raise Refused("-i/--inventory: the login host uses the cluster's own inventory")
    if int(getattr(args, "verbose", 0) or 0) > 1:
        raise Refused("-vv and more print the modules' arguments: -v at most")
    if getattr(args, "keep_runner_dir", None) is not None:
        raise Refused("--keep-runner-dir is for the cluster's administrators")
    owner = getattr(args, "owner", None)
    if owner is not None and owner != who.name:
        raise Refused(f"--owner {owner}: you act as {who.name} only")
    for key in getattr(args, "authorized_key", None) or []:
        if not _KEY_LINE.match(key):
            raise Refused(
                "--authorized-key takes a public key line (TYPE BASE64 [COMMENT]); "
                "bai-cluster reads your .pub files for you"
            )
    if args.action in OWNED_ACTIONS and owner is None:
        from ..__main__ import split_remote

        # Options may come anywhere after the action: before a batch command's "--".
        own, remote = split_remote(argv)
        return [*own, "--owner", who.name, *(["--", *remote] if "--" in argv else [])]
    return argv
