"""Signals (docs/sessions.md, "Signals") on this machine's engine: playbooks/session_signal.yml
(bai-cluster session signal) sends one to every member of a session at once.

Each member of a three-container session runs a bash loop as user work that traps USR1
and writes when it got it; main1 also keeps an SSH login to sub1 open (an ssh client in
main1, sshd's processes in sub1, a remote command that ignores USR1), as mpirun would.
USR1 must reach every member's loop within a second of each other, and spare SSH's own
processes: the login stays up and ``ssh sub2`` still works.
"""

from __future__ import annotations

import time

import pytest
from usr1_trap import TRAP_ONCE, arrivals, members, run_in

pytestmark = pytest.mark.integration

LOCAL = "inventories/local"
NAME = "it-sig"


def test_a_signal_reaches_every_member_at_once_and_spares_ssh(run_playbook, docker_client):
    extra = {
        "session_name": NAME,
        "session_size": 3,
        "session_resources": {"cpu": 0.5, "mem": "256m"},
    }
    made = run_playbook("session_create.yml", extra_vars=extra, inventory=LOCAL)
    try:
        assert made.rc == 0, made
        found = members(docker_client, NAME)
        assert sorted(found) == ["main1", "sub1", "sub2"], found
        for container in found.values():
            container.exec_run(["bash", "-c", TRAP_ONCE], user="work", detach=True)
        # Its remote command ignores USR1: the login ends only if the ssh client got it.
        login = "ssh -o BatchMode=yes sub1 \"trap '' USR1; sleep 120\" >/dev/null 2>&1 &"
        found["main1"].exec_run(["bash", "-c", login], user="work", detach=True)
        deadline = time.monotonic() + 20
        while (
            not all(run_in(c, "test -e /tmp/armed")[0] == 0 for c in found.values())
            or run_in(found["main1"], "pgrep -x ssh")[0] != 0
        ):
            assert time.monotonic() < deadline, "the loops or the SSH login did not start"
            time.sleep(0.5)

        sent = run_playbook(
            "session_signal.yml",
            extra_vars={"session_name": NAME, "session_signal": "SIGUSR1"},
            inventory=LOCAL,
        )
        assert sent.rc == 0, (sent, sent.stats)
        stats = sent.stats["bai_session_signal"]
        assert stats["signal"] == "SIGUSR1" and sorted(stats["members"]) == [
            f"bai-{NAME}-{h}" for h in ("main1", "sub1", "sub2")
        ], stats
        assert all(m["processes"] >= 1 for m in stats["members"].values()), stats

        got = arrivals(found, NAME)
        skew = max(got.values()) - min(got.values())
        print(f"\nUSR1 reached the 3 members within {1000 * skew:.0f} ms of each other")
        assert skew < 1.0, got

        # SSH's own processes were spared: the open login and a new one both work.
        assert run_in(found["main1"], "pgrep -x ssh")[0] == 0
        assert run_in(found["main1"], "ssh -o BatchMode=yes sub2 hostname") == (0, "sub2")
    finally:
        run_playbook("session_destroy.yml", extra_vars={"session_name": NAME}, inventory=LOCAL)
