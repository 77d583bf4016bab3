"""Verify roles/submit_host on a systemd host: real users submit sessions as themselves.

The node is a login host (converge.yml): alice and bob are in bai-users, carol in neither
group, dora in bai-admins (prepare.yml). They run /usr/local/bin/bai-cluster as
themselves (runuser); it goes through sudo to the service account, which reaches the
cluster - the node's own engine, over SSH as root - with the inventory in its home
(login-inventory/: alice may hold one session at a time). Everything below is read from
the node: the engine's labels, the users' own commands, journald.
"""

from __future__ import annotations

import json
import re
import time

import pytest

BAI = "/usr/local/bin/bai-cluster"
HOME = "/var/lib/bai-cluster-login"
OWNER = "ai.backend.cluster.owner"
SESSION = "ai.backend.cluster.session"
SMALL = ["-n", "1", "--cpu", "1", "--mem", "256m"]


def as_user(host, user: str, *args: str):
    """bai-cluster ARGS as USER, the way they would type it."""
    return host.run("runuser -u %s -- " + " ".join(["%s"] * (len(args) + 1)), user, BAI, *args)


def owners(host, prefix: str) -> dict[str, str]:
    """Session name -> owner label of the engine's containers of sessions named PREFIX*."""
    out = host.check_output(
        "docker ps -a --filter label=%s --format '{{json .Labels}}'", f"{OWNER}"
    )
    found = {}
    for line in out.splitlines():
        labels = dict(kv.split("=", 1) for kv in json.loads(line).split(",") if "=" in kv)
        if labels.get(SESSION, "").startswith(prefix):
            found[labels[SESSION]] = labels[OWNER]
    return found


def listed(host, user: str) -> list[dict]:
    result = as_user(host, user, "--json", "session", "list")
    assert result.rc == 0, result.stderr
    return json.loads(result.stdout)


def refused(result, why: str) -> None:
    assert result.rc == 2, (result.rc, result.stdout, result.stderr)
    assert "bai-cluster: refused:" in result.stderr and why in result.stderr, result.stderr
    assert "nothing was changed" in result.stderr, result.stderr


@pytest.fixture(scope="module")
def since(host) -> str:
    """journald's clock at the start: the requests' lines come after it."""
    return host.check_output("date '+%Y-%m-%d %H:%M:%S'")


@pytest.fixture(scope="module")
def alices(host, since) -> str:
    """alice's batch run ends and is gone; then two creates of hers race under her limit
    of one session (login-inventory/): exactly one is made, the other refused. The
    session she holds, by name."""
    ran = as_user(host, "alice", "session", "run", "mol-al-run", *SMALL, "--", "echo", "hi-alice")
    assert ran.rc == 0, (ran.stdout, ran.stderr)
    assert "hi-alice" in ran.stdout, ran.stdout
    assert owners(host, "mol-al-run") == {}
    race = host.run(
        "for s in mol-al-a mol-al-b; do"
        " (runuser -u alice -- %s session create $s -n 1 --cpu 1 --mem 256m >/tmp/$s.out 2>&1;"
        "  echo $? >/tmp/$s.rc) & done; wait; grep . /tmp/mol-al-?.rc /tmp/mol-al-?.out",
        BAI,
    )
    codes = dict(re.findall(r"/tmp/(mol-al-.)\.rc:(\d+)", race.stdout))
    assert sorted(codes.values()) == ["0", "3"], race.stdout
    assert "refused by the owner's limits: owner alice holds 1 session(s)" in race.stdout
    made = next(name for name, code in codes.items() if code == "0")
    assert owners(host, "mol-al-") == {made: "alice"}
    return made


def test_alices_sessions_are_hers_and_her_limit_holds(host, alices):
    assert [(row["name"], row["owner"]) for row in listed(host, "alice")] == [(alices, "alice")]
    again = as_user(host, "alice", "session", "create", "mol-al-c", *SMALL)
    assert again.rc == 3, (again.stdout, again.stderr)
    assert "refused by the owner's limits" in again.stderr + again.stdout


def test_bob_neither_sees_nor_touches_alices_session(host, alices):
    made = as_user(host, "bob", "session", "create", "mol-bob", *SMALL)
    assert made.rc == 0, made.stderr
    assert [row["name"] for row in listed(host, "bob")] == ["mol-bob"]
    assert "mol-bob" not in [row["name"] for row in listed(host, "alice")]
    before = host.check_output("docker ps -q --filter label=%s=%s", SESSION, alices)
    for action in ("show", "logs", "destroy"):
        tried = as_user(host, "bob", "session", action, alices)
        assert tried.rc != 0, (action, tried.stdout)
        said = tried.stderr + tried.stdout
        assert f"session {alices} is held by another owner, not bob" in said, (action, said)
    assert host.check_output("docker ps -q --filter label=%s=%s", SESSION, alices) == before
    gone = as_user(host, "bob", "session", "destroy", "mol-bob")
    assert gone.rc == 0, gone.stderr
    assert owners(host, "mol-bob") == {}


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["session", "create", "mol-x", "--owner", "bob"], "--owner bob: you act as alice only"),
        (["-i", "/tmp/mine.yml", "session", "list"], "-i/--inventory"),
        (["-vvv", "session", "list"], "-vv and more"),
        (["agent", "drain", "sysd-node"], "bai-cluster agent is for the cluster's administrators"),
        (["session", "reconcile"], "session reconcile is for the cluster's administrators"),
    ],
)
def test_alice_is_refused_what_is_not_hers_to_ask(host, args, why):
    refused(as_user(host, "alice", *args), why)


def test_a_user_outside_the_groups_gets_nothing(host):
    refused(as_user(host, "carol", "session", "list"), "user carol may not use this cluster")
    # Past the command, sudo itself: the rule names the two groups only.
    gate = re.search(r"--gate (\S+)", host.file(BAI).content_string).group(1)
    direct = host.run("runuser -u carol -- sudo -n -u bai-cluster %s session list", gate)
    assert direct.rc == 1 and "a password is required" in direct.stderr, direct.stderr


def test_the_key_and_inventory_are_unreadable_to_users(host):
    for user in ("alice", "bob"):
        for path in (f"{HOME}/.ssh/id_ed25519", f"{HOME}/inventory/hosts.yml", HOME):
            tried = host.run("runuser -u %s -- cat %s", user, path)
            assert tried.rc != 0 and "Permission denied" in tried.stderr, (user, path)
    home = host.file(HOME)
    assert (home.user, home.mode) == ("bai-cluster", 0o700), oct(home.mode)
    key = host.file(f"{HOME}/.ssh/id_ed25519")
    assert (key.user, key.mode) == ("bai-cluster", 0o600), oct(key.mode)
    # ansible-runner's folders: the service account's alone, and gone after each request.
    left = host.run("find /tmp -maxdepth 1 -name 'bai-cli-*' -not -user bai-cluster")
    assert left.stdout.strip() == "", left.stdout


def test_an_admin_destroys_anyones_session_and_every_request_is_logged(host, alices, since):
    everyone = {row["name"]: row["owner"] for row in listed(host, "dora")}
    assert everyone.get(alices) == "alice", everyone
    gone = as_user(host, "dora", "session", "destroy", alices)
    assert gone.rc == 0, gone.stderr
    assert owners(host, "mol-al-") == {}
    # journald: a started line and an exit line per request that ran, one per refusal.
    time.sleep(1)
    log = host.check_output("journalctl -t bai-cluster --since %s -o cat", since)
    # (A request holding a key line is quoted with double quotes: the key's are single.)
    made = rf"user='alice' request=.-i {HOME}/inventory session create {alices} .*--owner alice."
    assert re.search(made + " outcome='started'", log), log
    assert re.search(made + " outcome='exit 0'", log), log
    assert re.search(r"user='alice' request=.* --owner alice. outcome='exit 3'", log), log
    gone = f"user='bob' request='-i {HOME}/inventory session destroy {alices} --owner bob'"
    assert re.search(gone + " outcome='exit [1-9]", log), log
    assert "user='alice' request='agent drain sysd-node' outcome=\"refused: bai-cluster" in log
    destroyed = f"user='dora' request='-i {HOME}/inventory session destroy {alices}'"
    assert destroyed + " outcome='exit 0'" in log, log
    assert "user='carol'" not in log  # refused before sudo: carol never reached the gate
