"""A login host's two sides (bai_cli/login/): the user's (their key files read as them)
and the service's (settings that only root may write, a line in the system log per
request, refusals that run nothing)."""

from __future__ import annotations

import grp
import json
import os
import pwd
from pathlib import Path

import pytest

from bai_cli.login import gate, service, user

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDz7 alice@login"
ME = pwd.getpwuid(os.geteuid())
MY_GROUP = grp.getgrgid(ME.pw_gid).gr_name


def a_home(tmp_path: Path, key: str | None = KEY) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    if key:
        (home / ".ssh" / "id_ed25519.pub").write_text(key + "\n")
    return home


def test_the_users_key_files_are_read_as_the_user(tmp_path):
    home = a_home(tmp_path)
    (home / "other.pub").write_text("ssh-rsa AAAAB3 other\n")
    assert user.with_own_keys(["session", "create", "s1"], home) == [
        "session",
        "create",
        "s1",
        "--authorized-key",
        KEY,
    ]
    assert user.with_own_keys(["session", "run", "j1", "--", "python", "x.py"], home) == [
        "session",
        "run",
        "j1",
        "--authorized-key",
        KEY,
        "--",
        "python",
        "x.py",
    ]
    assert user.with_own_keys(
        ["session", "create", "s1", "--authorized-key", str(home / "other.pub")], home
    ) == ["session", "create", "s1", "--authorized-key", "ssh-rsa AAAAB3 other"]
    assert user.with_own_keys(
        ["session", "create", "s1", "--authorized-key=~/other.pub"], home
    ) == ["session", "create", "s1", "--authorized-key=ssh-rsa AAAAB3 other"]
    # Not a .pub file: left as given (the service side refuses anything but a key line).
    (home / "secret").write_text("PRIVATE")
    assert user.with_own_keys(
        ["session", "create", "s1", "--authorized-key", str(home / "secret")], home
    )[-1] == str(home / "secret")
    # Other commands, or no key: nothing added.
    assert user.with_own_keys(["session", "list"], home) == ["session", "list"]
    assert user.with_own_keys(["session", "create", "s1"], a_home(tmp_path / "b", None)) == [
        "session",
        "create",
        "s1",
    ]


def settings_file(tmp_path: Path, data: object, mode: int = 0o644) -> Path:
    path = tmp_path / "login.json"
    path.write_text(json.dumps(data))
    os.chmod(path, mode)
    return path


def test_the_settings_are_roots_only(tmp_path):
    good = {"users_group": "u", "admins_group": "a", "service_user": "s", "inventory": "/i"}
    path = settings_file(tmp_path, good)
    assert service.load_settings(path, os.geteuid()) == service.Settings("u", "a", "s", "/i")
    with pytest.raises(gate.Refused, match="only root may write"):
        service.load_settings(path, os.geteuid() + 1)
    os.chmod(path, 0o664)
    with pytest.raises(gate.Refused, match="only root may write"):
        service.load_settings(path, os.geteuid())
    with pytest.raises(gate.Refused, match="takes an object with"):
        service.load_settings(settings_file(tmp_path, {"sudoers": "x"}), os.geteuid())
    with pytest.raises(gate.Refused, match="settings are missing"):
        service.load_settings(tmp_path / "none.json", os.geteuid())


def run_service(tmp_path: Path, argv: list[str], users: str, admins: str):
    settings = settings_file(
        tmp_path,
        {
            "users_group": users,
            "admins_group": admins,
            "service_user": ME.pw_name,
            "inventory": "/srv/cluster/hosts.yml",
        },
    )
    ran: list[list[str]] = []
    logged: list[str] = []

    def run(todo: list[str]) -> int:
        ran.append(todo)
        return 0

    code = service.main(
        argv,
        environ={"SUDO_UID": str(ME.pw_uid), "SUDO_USER": ME.pw_name},
        settings=settings,
        settings_owner=os.geteuid(),
        run=run,
        log=logged.append,
    )
    return code, ran, logged


def test_a_users_request_runs_as_theirs_with_the_clusters_inventory_and_is_logged(tmp_path):
    code, ran, logged = run_service(tmp_path, ["session", "create", "s1"], MY_GROUP, "admins")
    assert code == 0
    assert ran == [
        ["-i", "/srv/cluster/hosts.yml", "session", "create", "s1", "--owner", ME.pw_name]
    ]
    assert logged == [
        service.log_line(ME.pw_name, ran[0], "started"),
        service.log_line(ME.pw_name, ran[0], "exit 0"),
    ]


def test_a_refused_request_runs_nothing_and_is_logged(tmp_path, capsys):
    code, ran, logged = run_service(tmp_path, ["agent", "drain", "a1"], MY_GROUP, "admins")
    assert (code, ran) == (2, [])
    assert "refused: bai-cluster agent is for the cluster's administrators" in logged[0]
    assert "nothing was changed" in capsys.readouterr().err
    code, ran, logged = run_service(tmp_path, ["session", "list"], "users", "admins")
    assert (code, ran) == (2, []) and "not in group users" in logged[0]


def test_the_log_line_quotes_what_the_user_typed():
    line = service.log_line("alice", ["session", "run", "j", "--", "echo", "x\nuser='root'"], "ok")
    assert "\n" not in line and line.count("user=") == 2  # the second is inside the quotes
    assert line.startswith("user='alice' request=")


def test_the_user_side_asks_sudo_only_for_a_member_with_a_request_that_parses(
    tmp_path, monkeypatch, capsys
):
    """Before it changes identity: a request that does not parse ends with argparse's
    message, a user in neither group is told so; a member's request goes to sudo."""
    execs: list[list[str]] = []
    monkeypatch.setattr(user.os, "execvp", lambda path, argv: execs.append(argv))
    monkeypatch.setattr(user.Path, "home", lambda: a_home(tmp_path))
    member = {"users_group": MY_GROUP, "admins_group": "a", "service_user": "s"}
    stranger = {"users_group": "nobody-here", "admins_group": "nor-here", "service_user": "s"}
    argv = ["--as", "svc", "--gate", "/opt/gate", "--"]

    with pytest.raises(SystemExit) as ended:
        user.main([*argv, "session", "create"])  # no name
    assert ended.value.code == 2 and execs == []
    assert "the following arguments are required: name" in capsys.readouterr().err

    path = settings_file(tmp_path, stranger)
    assert user.not_a_member(path, os.geteuid()).startswith(f"user {ME.pw_name} may not use")
    assert user.not_a_member(path, os.geteuid() + 1) == ""  # not root's: the gate says

    assert user.not_a_member(settings_file(tmp_path, member), os.geteuid()) == ""
    user.main([*argv, "session", "create", "s1"], settings=tmp_path / "none.json")
    sudo = ["sudo", "-n", "-u", "svc", "/opt/gate"]
    assert execs == [[*sudo, "session", "create", "s1", "--authorized-key", KEY]]
