"""Signals across agents, on the embedded lab: playbooks/session_signal.yml sends USR1 to
a session that spans agent1 and agent2; each member's bash loop (user work) traps it and
writes when it got it. Every agent sends at once: the members' times must lie within a
second of each other (the figure is printed for the notes)."""

from __future__ import annotations

import time

import pytest
from labtools import in_session, spanning_session, sweep

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NAME = "it-sig-lab"
TRAP = (
    "trap 'date +%s.%N > /tmp/got-usr1; exit 0' USR1; : > /tmp/armed; while :; do sleep 0.1; done"
)


def test_a_signal_reaches_members_on_both_agents_within_a_second(lab, run_playbook):
    sweep(lab, NAME)
    made = run_playbook("session_create.yml", extra_vars=spanning_session(NAME))
    try:
        assert made.rc == 0, made
        where = {c["host"]: c["agent"] for c in made.stats["bai_session"]["containers"]}
        assert len(set(where.values())) == 2, where
        for host, agent in where.items():
            node, name = lab[agent], f"bai-{NAME}-{host}"
            node.exec_run(["docker", "exec", "-d", "-u", "work", name, "bash", "-c", TRAP])
        deadline = time.monotonic() + 20
        for host, agent in where.items():
            while in_session(lab[agent], f"bai-{NAME}-{host}", "test -e /tmp/armed")[0] != 0:
                assert time.monotonic() < deadline, f"{host}: the loop did not start"
                time.sleep(0.5)
        sent = run_playbook(
            "session_signal.yml", extra_vars={"session_name": NAME, "session_signal": "USR1"}
        )
        assert sent.rc == 0, (sent, sent.stats)
        got = {}
        for host, agent in where.items():
            while (answer := in_session(lab[agent], f"bai-{NAME}-{host}", "cat /tmp/got-usr1"))[
                0
            ] != 0:
                assert time.monotonic() < deadline + 10, f"{host} never got USR1"
                time.sleep(0.2)
            got[host] = float(answer[1])
        skew = max(got.values()) - min(got.values())
        print(f"\nUSR1 reached {len(got)} members on 2 agents within {1000 * skew:.0f} ms")
        assert skew < 1.0, got
    finally:
        run_playbook("session_destroy.yml", extra_vars={"session_name": NAME})
        sweep(lab, NAME)
