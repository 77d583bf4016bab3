"""The service side of a login host: ``bai-cluster-login``, run through sudo as the
cluster's service account, names the caller and screens the request (gate.py), logs it
to the system log, runs it as ``bai-cluster`` would, and logs its result.

Its settings are root's (``/etc/bai-cluster/login.json``, written by the operator or the
login host's role; neither the caller nor the service account may change them):

    {"users_group": "bai-users", "admins_group": "bai-admins", "service_user": "bai-cluster",
     "inventory": "/var/lib/bai-cluster/inventory"}

Every request runs with that inventory (an administrator's own ``-i`` comes after it and
wins; a user may not give one).

A refused request changes nothing and exits 2; the system log (facility auth) has one line
per request: who (sudo's name for the caller), what (the command line, quoted) and the
outcome (refused: why, or the exit code).
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import stat
import sys
import syslog
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from ..errors import EXIT_BAD_INPUT
from . import gate

SETTINGS = Path("/etc/bai-cluster/login.json")


@dataclass(frozen=True)
class Settings:
    """Who may ask (the two groups) and as whom requests run (the service account)."""

    users_group: str = "bai-users"
    admins_group: str = "bai-admins"
    service_user: str = "bai-cluster"
    inventory: str = ""  # the cluster's inventory ("": ansible.cfg's)


def load_settings(path: Path = SETTINGS, owner_uid: int = 0) -> Settings:
    """The settings file: a regular file of ``owner_uid`` (root) that nobody else may
    write (gate.Refused otherwise, or when it names an unknown setting)."""
    try:
        st = os.lstat(path)
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise gate.Refused(f"the login host's settings are missing ({exc})") from None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != owner_uid or st.st_mode & 0o022:
        raise gate.Refused(f"{path} must be a file of root's that only root may write")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise gate.Refused(f"{path} is not JSON: {exc}") from None
    known = {f.name for f in fields(Settings)}
    if not isinstance(data, dict) or set(data) - known:
        raise gate.Refused(f"{path} takes an object with {', '.join(sorted(known))} only")
    return Settings(**{key: str(value) for key, value in data.items()})


def log_line(name: str, argv: Sequence[str], outcome: str) -> str:
    """The system log's line for one request: every value quoted, so a request cannot
    forge a line of its own."""
    return f"user={name!r} request={shlex.join(argv)!r} outcome={outcome!r}"


def to_syslog(line: str) -> None:
    syslog.openlog("bai-cluster", syslog.LOG_PID, syslog.LOG_AUTH)
    syslog.syslog(syslog.LOG_INFO, line)


def _at_home(service_user: str) -> None:
    """Work from the service account's home, with HOME set to it: nothing the caller's
    current folder holds (an ansible.cfg, say) is read, and Ansible's and the payload
    cache's folders are the account's own, whatever sudo's policy does with HOME."""
    home = pwd.getpwnam(service_user).pw_dir
    os.environ["HOME"] = home
    os.chdir(home)


def main(
    argv: Sequence[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    settings: Path = SETTINGS,
    settings_owner: int = 0,
    run: Callable[[list[str]], int] | None = None,
    log: Callable[[str], None] = to_syslog,
) -> int:
    """``bai-cluster-login ARGS...``: ARGS as for ``bai-cluster``, for the caller sudo
    names; the exit code of the request, or 2 when it is refused."""
    argv = list(sys.argv[1:] if argv is None else argv)
    environ = os.environ if environ is None else environ
    claimed = environ.get("SUDO_USER", "") or "?"
    try:
        config = load_settings(settings, settings_owner)
        try:
            service_uid = pwd.getpwnam(config.service_user).pw_uid
        except KeyError:
            raise gate.Refused(f"the service account {config.service_user} is missing") from None
        who = gate.caller(environ, config.users_group, config.admins_group, service_uid)
        todo = gate.screen(argv, who)
    except gate.Refused as exc:
        log(log_line(claimed, argv, f"refused: {exc}"))
        print(f"bai-cluster: refused: {exc}; nothing was changed", file=sys.stderr)
        return EXIT_BAD_INPUT
    if config.inventory:
        todo = ["-i", config.inventory, *todo]
    log(log_line(who.name, todo, "started"))
    if run is None:
        from ..__main__ import main as cli

        _at_home(config.service_user)
        run = cli
    code = run(todo)
    log(log_line(who.name, todo, f"exit {code}"))
    return code
