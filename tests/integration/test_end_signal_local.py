"""The warning before a lifetime ends (docs/sessions.md, "Lifetimes") on this machine's
engine: session_end_signal (bai-cluster session create --signal SIG@SECONDS) and the
deadline every container is told.

Two sessions of two containers, each with a 600 s lifetime: ``it-warn`` asks for USR1
540 s before its end (due at once: 600 <= 540 + 90), ``it-calm`` for USR1 60 s before
(not due for another 7 minutes). Every member runs a bash loop as user work that traps
USR1. One reconcile (what the housekeeping pass runs every minute) signals every member
of it-warn within a second of each other and none of it-calm; the next one sends nothing
again. Each container, and an SSH login into it, has BACKENDAI_SESSION_DEADLINE: the
deadline the ledger fixed when it placed the session, 600 s after.
"""

from __future__ import annotations

import time

import pytest
from usr1_trap import TRAP, arrivals, members, run_in

pytestmark = pytest.mark.integration

LOCAL = "inventories/local"


def arm(found: dict) -> None:
    for container in found.values():
        container.exec_run(["bash", "-c", TRAP], user="work", detach=True)
    deadline = time.monotonic() + 20
    while not all(run_in(c, "test -e /tmp/armed")[0] == 0 for c in found.values()):
        assert time.monotonic() < deadline, "the trap loops did not start"
        time.sleep(0.3)


def reconcile(run_playbook) -> dict:
    done = run_playbook("session_reconcile.yml", inventory=LOCAL)
    assert done.rc == 0, done
    return done.stats["bai_reconcile"]


def test_the_end_signal_reaches_every_member_once_and_the_deadline_is_in_every_container(
    run_playbook, docker_client
):
    sessions = {"it-warn": "USR1@540", "it-calm": "SIGUSR1@60"}
    try:
        placed = {}
        for name, signal in sessions.items():
            before = time.time()
            extra = {
                "session_name": name,
                "session_size": 2,
                "session_resources": {"cpu": 0.25, "mem": "256m"},
                "session_lifetime_s": 600,
                "session_end_signal": signal,
            }
            made = run_playbook("session_create.yml", extra_vars=extra, inventory=LOCAL)
            assert made.rc == 0, made
            placed[name] = (before, time.time())
        found = {name: members(docker_client, name) for name in sessions}
        assert all(sorted(f) == ["main1", "sub1"] for f in found.values()), found

        for name, (before, after) in placed.items():
            seen = {
                host: run_in(c, "printenv BACKENDAI_SESSION_DEADLINE")
                for host, c in found[name].items()
            }
            seen["ssh sub1"] = run_in(
                found[name]["main1"],
                "ssh -o BatchMode=yes sub1 printenv BACKENDAI_SESSION_DEADLINE",
            )
            (deadline,) = {out for _code, out in seen.values()}
            assert all(code == 0 for code, _out in seen.values()), seen
            # Fixed by the ledger when it placed the session, 600 s on, in whole seconds.
            assert before + 600 - 1 <= int(deadline) <= after + 600 + 1, (deadline, before)
            labels = {c.labels["ai.backend.cluster.deadline"] for c in found[name].values()}
            assert labels == {deadline}

        for name in sessions:
            arm(found[name])
        done = reconcile(run_playbook)
        assert done["end_signals"] == {"it-warn": "USR1"}, done
        assert done["end_signal_failed"] == {} and done["lifetime_up"] == [], done

        got = arrivals(found["it-warn"], "it-warn")
        skew = max(got.values()) - min(got.values())
        print(f"\nthe end signal reached it-warn's 2 members within {1000 * skew:.0f} ms")
        assert skew < 1.0, got
        for host, container in found["it-calm"].items():
            assert run_in(container, "test -e /tmp/got-usr1")[0] != 0, f"it-calm {host} got USR1"

        # Sent once: the next pass sends nothing, and no member got a second one.
        again = reconcile(run_playbook)
        assert again["end_signals"] == {} and again["end_signal_failed"] == {}, again
        for host, container in found["it-warn"].items():
            assert run_in(container, "wc -l < /tmp/got-usr1") == (0, "1"), host
    finally:
        for name in sessions:
            run_playbook("session_destroy.yml", extra_vars={"session_name": name}, inventory=LOCAL)
