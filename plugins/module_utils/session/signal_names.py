"""Signals a session's user may send (docs/sessions.md, "Signals"), and the warning
before a session's end (``session_end_signal``, Slurm's ``--signal SIG@SECONDS``). Pure:
the controller checks a request with it before anything reaches an agent.

    SIGNALS                  the signals one may send (names without SIG)
    signal_name(text)        "USR1" from "USR1", "SIGUSR1", "usr1" or "10"; SpecError
    parse_end_signal(text)   "USR1@300" from "SIGUSR1@300" and the like; SpecError
    end_signal_parts(text)   ("USR1", 300) from a parsed end signal
"""

from __future__ import annotations

import signal as _signal
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.session.limits import (
    LIMITS,
    check_number,
)

# What a session's user may want to say to their processes (a checkpoint request, a
# stop, a pause). Not KILL: destroy ends a session.
SIGNALS = ("HUP", "INT", "QUIT", "USR1", "USR2", "ALRM", "TERM", "CONT", "STOP", "TSTP", "WINCH")


def signal_name(text: Any) -> str:
    """The name of a signal one may send (``SIGNALS``), from a name with or without
    SIG, in any case, or its number; SpecError otherwise."""
    raw = str(text).strip().upper()
    if raw.isdigit():
        try:
            raw = _signal.Signals(int(raw)).name
        except ValueError:
            raise SpecError(f"signal {text!r}: no such signal number") from None
    name = raw[3:] if raw.startswith("SIG") else raw
    if name not in SIGNALS:
        raise SpecError(f"signal {text!r}: one of {', '.join(SIGNALS)} (or SIG and the name)")
    return name


def parse_end_signal(text: Any, field: str = "end_signal") -> str:
    """``SIG@SECONDS``: signal SIG that many seconds before the session's lifetime ends,
    in the canonical form ``USR1@300``; SpecError naming ``field`` otherwise."""
    if not isinstance(text, str) or text.count("@") != 1:
        raise SpecError(
            f"{field}: got {text!r}; expected SIG@SECONDS, the signal and how long before "
            f"the end to send it (USR1@300)"
        )
    sig, _at, seconds = text.partition("@")
    try:
        name = signal_name(sig)
    except SpecError as exc:
        raise SpecError(f"{field}: {exc}") from None
    lead = check_number(f"{field} (its SECONDS)", seconds, LIMITS["session_end_signal_s"])
    return f"{name}@{int(lead)}"


def end_signal_parts(text: str) -> tuple[str, int]:
    """The signal and its lead in seconds of a parsed end signal (``USR1@300``)."""
    name, _at, seconds = text.partition("@")
    return name, int(seconds)
