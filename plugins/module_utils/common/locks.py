"""One exclusive file lock (``flock``), for the modules that serialise work on a host: the
session ledger (its file) and admission (an agent's engine). The kernel drops the lock when
the process dies, so a killed run blocks nobody."""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Busy


@contextmanager
def locked(path: str, timeout: float) -> Iterator[None]:
    """Hold an exclusive flock on ``path`` (made 0600 if missing; its folder 0700)."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise Busy(path) from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)  # releases the lock
