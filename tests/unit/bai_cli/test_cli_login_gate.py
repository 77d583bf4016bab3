"""The login host's gate (bai_cli/login/gate.py): who the caller is comes from sudo and the
user database, and what a user (not an administrator) may ask is checked before anything
runs, with the owner made theirs."""

from __future__ import annotations

import grp
import os
import pwd
import re

import pytest

from bai_cli.login import gate

ME = pwd.getpwuid(os.getuid())
MY_GROUP = grp.getgrgid(ME.pw_gid).gr_name
SUDO = {"SUDO_UID": str(ME.pw_uid), "SUDO_USER": ME.pw_name}
ALICE = gate.Caller("alice", 1001, admin=False)
ADMIN = gate.Caller("root", 0, admin=True)
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDz7 alice@login"


def test_the_caller_is_who_sudo_names_and_their_groups_say_what_they_may_do():
    uid = os.geteuid()
    assert gate.caller(SUDO, MY_GROUP, "no-such-group", uid) == gate.Caller(
        ME.pw_name, ME.pw_uid, admin=False
    )
    assert gate.caller(SUDO, "no-such-group", MY_GROUP, uid).admin
    with pytest.raises(gate.Refused, match="not in group bai-users"):
        gate.caller(SUDO, "bai-users", "bai-admins", uid)


@pytest.mark.parametrize(
    ("environ", "said"),
    [
        ({}, "run bai-cluster as yourself"),
        ({"SUDO_USER": ME.pw_name}, "run bai-cluster as yourself"),
        ({"SUDO_UID": "x1", "SUDO_USER": ME.pw_name}, "run bai-cluster as yourself"),
        ({"SUDO_UID": str(ME.pw_uid), "SUDO_USER": "someone-else"}, "but user id"),
        ({"SUDO_UID": "4000000000", "SUDO_USER": "ghost"}, "has no account"),
    ],
)
def test_a_caller_sudo_does_not_vouch_for_is_refused(environ, said):
    with pytest.raises(gate.Refused, match=said):
        gate.caller(environ, MY_GROUP, MY_GROUP, os.geteuid())


def test_only_the_service_account_runs_the_gate():
    with pytest.raises(gate.Refused, match="service account"):
        gate.caller(SUDO, MY_GROUP, MY_GROUP, os.geteuid() + 1)


@pytest.mark.parametrize(
    ("argv", "run"),
    [
        (
            ["session", "create", "s1", "--size", "2"],
            ["session", "create", "s1", "--size", "2", "--owner", "alice"],
        ),
        (
            ["session", "create", "s1", "--owner", "alice"],
            ["session", "create", "s1", "--owner", "alice"],
        ),
        (
            ["session", "run", "j1", "--size", "2", "--", "python", "train.py", "--owner", "x"],
            [
                "session",
                "run",
                "j1",
                "--size",
                "2",
                "--owner",
                "alice",
                "--",
                "python",
                "train.py",
                "--owner",
                "x",
            ],
        ),
        (["session", "list"], ["session", "list", "--owner", "alice"]),
        (
            ["session", "list", "--json", "-v"],
            ["session", "list", "--json", "-v", "--owner", "alice"],
        ),
        (["session", "show", "s1"], ["session", "show", "s1", "--owner", "alice"]),
        (
            ["session", "logs", "s1", "--member", "sub1"],
            ["session", "logs", "s1", "--member", "sub1", "--owner", "alice"],
        ),
        (["session", "destroy", "s1"], ["session", "destroy", "s1", "--owner", "alice"]),
        (
            ["session", "signal", "s1", "USR1"],
            ["session", "signal", "s1", "USR1", "--owner", "alice"],
        ),
        (
            ["session", "destroy", "s1", "--owner", "alice"],
            ["session", "destroy", "s1", "--owner", "alice"],
        ),
        (
            ["session", "create", "s1", "--authorized-key", KEY],
            ["session", "create", "s1", "--authorized-key", KEY, "--owner", "alice"],
        ),
    ],
)
def test_a_user_may_use_their_own_sessions(argv, run):
    assert gate.screen(argv, ALICE) == run


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["agent", "drain", "agent1"], "bai-cluster agent is for the cluster's administrators"),
        (["site"], "bai-cluster site is for"),
        (["lab", "up"], "bai-cluster lab is for"),
        (["session", "reconcile"], "session reconcile is for the cluster's administrators"),
        (["session", "ssh", "s1"], "session ssh is for"),
        (["session", "env", "s1"], "session env is for"),
        (["session", "create", "s1", "--owner", "bob"], "--owner bob: you act as alice only"),
        (["session", "list", "--owner", "bob"], "--owner bob"),
        (["session", "destroy", "s1", "--owner", "bob"], "--owner bob"),
        (["session", "show", "s1", "--owner", "bob"], "--owner bob"),
        (["-i", "inventories/local", "session", "list"], "-i/--inventory"),
        (["session", "list", "--inventory", "/tmp/mine"], "-i/--inventory"),
        (["session", "list", "--inv", "/tmp/mine"], "-i/--inventory"),
        (["session", "create", "s1", "-vvv"], "-v at most"),
        (["-vv", "session", "list"], "-v at most"),
        (["session", "list", "--keep-runner-dir", "/tmp/x"], "--keep-runner-dir"),
        (["session", "create", "s1", "--authorized-key", "/srv/keys/id.pub"], "a public key line"),
        (["session", "create", "s1", "--authorized-key", KEY + "\nssh-rsa AAAA x"], "key line"),
        (["session", "create"], "the following arguments are required: name"),
        (["session", "fly"], "invalid choice: 'fly'"),
    ],
)
def test_what_a_user_may_not_ask_is_refused(argv, said):
    with pytest.raises(gate.Refused, match=re.escape(said)):
        gate.screen(argv, ALICE)


def test_an_administrator_asks_as_the_service_account_would():
    argv = ["-i", "inventories/local", "agent", "drain", "agent1", "-vvv"]
    assert gate.screen(argv, ADMIN) == argv
