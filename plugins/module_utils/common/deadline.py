"""Waiting for something, with a deadline: the one poll loop of the modules that wait
(sshd in new containers, a port HAProxy opens or closes)."""

from __future__ import annotations

import time
from typing import Callable


def poll_until(
    done: Callable[[], bool],
    timeout: float,
    expired: Callable[[], BaseException],
    interval: float = 0.1,
) -> None:
    """Call ``done`` until it returns True, ``interval`` seconds apart; once ``timeout``
    seconds have passed (checked after each try that said no), raise ``expired()``."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise expired()
        time.sleep(interval)
