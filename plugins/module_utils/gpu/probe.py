"""The real host as ``detect`` (gpu/facts.py) reads it: ``HostProbe``, the only impure
part of GPU detection (``os``, ``grp``, ``subprocess``), read-only. gpu/facts.py imports
it, so callers keep ``from ...gpu.facts import HostProbe, detect``.
"""

from __future__ import annotations

import errno
import grp
import os
import shutil
import subprocess
import time
from typing import Any


class HostProbe:
    """The host, read-only, in the shape ``detect`` expects. Commands run with a
    timeout (a GPU in a bad state can make nvidia-smi hang) and the C locale.

    In a module, pass the module (``HostProbe(timeout, module=module)``): commands then
    run through ``module.run_command``, under coreutils' ``timeout`` (run_command has no
    timeout of its own). Without one (the unit tests, scripts), or on a host without a
    ``timeout`` program, they run through ``subprocess``. Both ways answer the same:
    ``(rc, stdout, stderr)``; 124 and "did not answer" when the command ran out of time,
    127 when it could not be started."""

    def __init__(self, timeout: int = 30, module: Any = None) -> None:
        self.timeout = timeout
        self.module = module

    def which(self, name: str) -> str | None:
        return shutil.which(name)

    def run(self, argv: list[str]) -> tuple[int, str, str]:
        if self.module is not None:
            timeout_bin = self.module.get_bin_path("timeout")
            if timeout_bin:
                return self._run_module(timeout_bin, argv)
        return self._run_local(argv)

    def _timed_out(self, argv: list[str]) -> tuple[int, str, str]:
        return 124, "", f"{argv[0]} did not answer within {self.timeout} s"

    def _run_module(self, timeout_bin: str, argv: list[str]) -> tuple[int, str, str]:
        # timeout(1) sends TERM after self.timeout seconds and KILL one second later (which
        # kills timeout too); it exits 124 when TERM was enough, and 126/127 when argv
        # cannot be started ("timeout: failed to run command 'ARGV0': REASON").
        started = time.monotonic()
        try:
            rc, out, err = self.module.run_command(
                [timeout_bin, "--kill-after=1", str(self.timeout), *argv],
                environ_update={"LC_ALL": "C"},
                expand_user_and_vars=False,
                handle_exceptions=False,
            )
        except OSError as exc:
            return 127, "", f"{argv[0]}: {exc}"
        if rc in (124, 137, -9) and time.monotonic() - started >= self.timeout:
            return self._timed_out(argv)
        if rc in (126, 127) and not out and "failed to run command" in err:
            reason = err.strip().rsplit(": ", 1)[-1]
            code = next((n for n in sorted(errno.errorcode) if os.strerror(n) == reason), None)
            error = OSError(code, reason, argv[0]) if code else reason
            return 127, "", f"{argv[0]}: {error}"
        return rc, out, err

    def _run_local(self, argv: list[str]) -> tuple[int, str, str]:
        try:
            # Outside a module there is no run_command to use (see the class docstring).
            done = subprocess.run(  # pylint: disable=ansible-bad-function
                argv,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
                env={**os.environ, "LC_ALL": "C"},
            )
        except subprocess.TimeoutExpired:
            return self._timed_out(argv)
        except OSError as exc:
            return 127, "", f"{argv[0]}: {exc}"
        return done.returncode, done.stdout, done.stderr

    def listdir(self, path: str) -> list[str]:
        try:
            return os.listdir(path)
        except OSError:
            return []

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def read(self, path: str) -> str | None:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return None

    def realpath(self, path: str) -> str:
        return os.path.realpath(path)

    def gid(self, name: str) -> int | None:
        try:
            return grp.getgrnam(name).gr_gid
        except KeyError:
            return None

    def in_container(self) -> bool:
        return os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv")
