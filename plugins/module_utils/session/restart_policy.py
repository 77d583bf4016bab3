"""A batch session's gang restarts (docs/sessions.md, "Restarts"): what the request asks
(``session_restarts``, ``session_restart_on``) and which ends it restarts for. Pure: the
controller checks the request with it before anything reaches an agent, and the session
ledger asks it, when a batch session ends, whether the gang starts again
(scheduling/steps/restarts.py).

    parse_restart_policy(given, type)   (restarts, restart_on) from a request; SpecError
    parse_preemptible(given, type, restarts)  whether it may be preempted; SpecError
    restart_reason(end, restart_on)     why an end restarts the gang, or "" when it does not
    restart_cause(end, restart_on)      the same, with the cause in one word (for metrics)

The ends that count, with restarts left:

- ``lost``: an agent that held a member did not answer;
- ``preempted``: a forced drain of one of its agents stopped it (it starts elsewhere);
- ``failed`` because a member was gone while the command ran (its container removed, its
  engine stopped), or was killed by a signal (exit 128+N) or by the OOM killer;
- ``failed`` with an exit code the request names (``restart_on``, Slurm's RequeueExit).

Never: ``succeeded``, ``cancelled`` (a destroy, Ctrl-C) or ``timeout`` (its lifetime was
up), nor a failure with any other exit code, nor an end marked ``final`` (a destroy forced
by hand, which ends the session whatever it came to).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.common.parse import type_name
from ansible_collections.bai.cluster.plugins.module_utils.session.job_end import JobEnd
from ansible_collections.bai.cluster.plugins.module_utils.session.limits import (
    check_number,
)

# How many exit codes one request may name.
MAX_RESTART_CODES = 32
_BATCH = "batch"


def parse_restart_policy(
    given: Mapping[str, Any], session_type: str
) -> tuple[int, tuple[int, ...]]:
    """``restarts`` (0-100) and ``restart_on`` (exit codes 1-255: a list, or a string
    "3,75") from a request's fields; SpecError when they are not that, or are given for
    a session that is not a batch session."""
    restarts = int(check_number("session_restarts", given.get("restarts", 0)))
    raw = given.get("restart_on", [])
    if isinstance(raw, str):
        raw = [part for part in raw.replace(" ", "").split(",") if part]
    if not isinstance(raw, (list, tuple)):
        raise SpecError(
            f"restart_on: got {type_name(raw)} {raw!r}; expected a list of exit codes 1-255"
        )
    if len(raw) > MAX_RESTART_CODES:
        raise SpecError(f"restart_on: {len(raw)} exit codes; at most {MAX_RESTART_CODES}")
    codes = sorted({_exit_code(code) for code in raw})
    if (restarts or codes) and session_type != _BATCH:
        raise SpecError(
            "restarts: only a batch session (one that runs a command to its end) "
            "restarts; an interactive session lives until it is destroyed"
        )
    if codes and not restarts:
        raise SpecError("restart_on: names exit codes, but restarts is 0 (how many times?)")
    return restarts, tuple(codes)


# The words a request may give for "yes" and "no" (Ansible passes -e values as strings).
_TRUE = ("true", "yes", "1")
_FALSE = ("false", "no", "0", "")


def parse_preemptible(given: Mapping[str, Any], session_type: str, restarts: int) -> bool:
    """``preemptible``: whether a queued session of a higher priority may stop this one
    (scheduling/queue/preemption.py). Only a batch session with restarts, which comes back
    through them, may be; SpecError otherwise."""
    raw = given.get("preemptible", False)
    text = str(raw).strip().lower()
    if isinstance(raw, bool):
        value = raw
    elif isinstance(raw, str) and text in _TRUE + _FALSE:
        value = text in _TRUE
    else:
        raise SpecError(f"preemptible: got {type_name(raw)} {raw!r}; expected true or false")
    if value and (session_type != _BATCH or restarts < 1):
        raise SpecError(
            "preemptible: only a batch session with restarts (session_restarts of 1 or "
            "more) may be preempted: it comes back through its restarts"
        )
    return value


def _exit_code(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise SpecError(f"restart_on: got {type_name(value)} {value!r}; expected exit codes 1-255")
    text = str(value).strip()
    if not text.isdigit() or not 1 <= int(text) <= 255:
        raise SpecError(f"restart_on: got {value!r}; an exit code is a whole number 1-255")
    return int(text)


# Why a gang restarted, in one word (metrics count restarts by it, docs/metrics.md).
RESTART_CAUSES = ("lost", "preempted", "gone", "oom", "signal", "exit_code")


def restart_reason(end: JobEnd, restart_on: tuple[int, ...] | list[int] = ()) -> str:
    """Why the end ``end`` (its state, exit_code, signal, failed member) restarts a
    batch session's gang, in a few words; "" when it does not count."""
    return restart_cause(end, restart_on)[1]


def restart_cause(end: JobEnd, restart_on: tuple[int, ...] | list[int] = ()) -> tuple[str, str]:
    """(one word of :data:`RESTART_CAUSES`, a few words) for an end that restarts the
    gang; ("", "") when it does not count."""
    state = end.state
    if end.final:  # a destroy forced by hand
        return "", ""
    if state == "lost":
        return "lost", "an agent did not answer"
    if state == "preempted":
        return "preempted", "a drain stopped it"
    if state != "failed":
        return "", ""
    host = end.failed_member("host") or "a member"
    if end.failed_member("why") == "gone while the command ran":
        return "gone", f"{host} was gone while the command ran"
    if end.failed_member("oom_killed"):
        return "oom", f"{host} was killed for memory (OOM)"
    signal = end.failed_member("signal") or end.signal
    if signal:
        return "signal", f"killed by {signal}"
    code = end.exit_code
    if isinstance(code, int) and code in restart_on:
        return "exit_code", f"the command exited {code}, which restart_on names"
    return "", ""
