"""A USR1 trap in a session's containers, for the signal tests (test_signal_local,
test_end_signal_local): each member runs a bash loop as user work that writes when it got
USR1 to /tmp/got-usr1, and when each member got it is read back."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

LABEL_SESSION = "ai.backend.cluster.session"
# A trap that keeps looping after USR1 (an end signal may come again) and one that exits.
TRAP = "trap 'date +%s.%N >> /tmp/got-usr1' USR1; : > /tmp/armed; while :; do sleep 0.1; done"
TRAP_ONCE = (
    "trap 'date +%s.%N > /tmp/got-usr1; exit 0' USR1; : > /tmp/armed; while :; do sleep 0.1; done"
)


def run_in(container: Any, command: str) -> tuple[int, str]:
    code, out = container.exec_run(["bash", "-c", command], user="work")
    return code, out.decode(errors="replace").strip()


def members(docker_client: Any, name: str) -> dict[str, Any]:
    """Host (main1, sub1...) -> the running container of session ``name``."""
    found = docker_client.containers.list(filters={"label": f"{LABEL_SESSION}={name}"})
    return {c.labels["ai.backend.cluster.host"]: c for c in found}


def arrivals(found: Mapping[str, Any], what: str, seconds: float = 10) -> dict[str, float]:
    """Host -> when its trap got USR1 (the first time), waiting up to ``seconds`` for
    every member of ``what`` (a session, in messages)."""
    got = {}
    deadline = time.monotonic() + seconds
    for host, container in found.items():
        while (answer := run_in(container, "head -n1 /tmp/got-usr1"))[0] != 0 or not answer[1]:
            assert time.monotonic() < deadline, f"{host} of {what} never got USR1"
            time.sleep(0.2)
        got[host] = float(answer[1])
    return got
