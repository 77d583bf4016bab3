"""A signal to every member of a session at once (bai_session_signal; docs/sessions.md,
"Signals"): in each running container of the session on this agent, every process of
user ``work`` gets it - the batch command, what it started, what people run over SSH -
but not SSH's own processes (sshd, and the ``ssh`` clients a command such as mpirun
keeps open to the other members: a signal they do not expect would end them, and with
them the remote side).

    SCRIPT                       what runs in each container
    deliver(api, rows, name, workers)  {container: {processes, at} or {error}}

Which signals one may send: session/signal_names.py (pure; the controller checks them).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    DockerException,
    error_text,
    parallel,
)

# Run in the container as root with the signal's name as $1; prints how many processes
# got it. /proc, bash and coreutils' stat only: every session image has them.
SCRIPT = r"""uid=$(id -u work) || exit 3
n=0
for d in /proc/[0-9]*; do
  [ "${d#/proc/}" = "$$" ] && continue
  # (stderr first: a process gone meanwhile is no error)
  read -r comm 2>/dev/null < "$d/comm" || continue
  case $comm in ssh|sshd|sshd-session|sshd-auth|scp|sftp-server) continue ;; esac
  [ "$(stat -c %u "$d" 2>/dev/null)" = "$uid" ] || continue
  kill -s "$1" "${d#/proc/}" 2>/dev/null && n=$((n + 1))
done
echo "$n"
"""


def deliver(
    api: Any, containers: Sequence[Mapping[str, Any]], name: str, workers: int = 16
) -> dict[str, dict[str, Any]]:
    """Send signal ``name`` in every running container of ``containers`` (rows with
    ``name`` and ``state``), all at once; per container the processes that got it and
    when (epoch seconds), or the error."""
    running = [c for c in containers if c.get("state") == "running"]

    def one(row: Mapping[str, Any]) -> dict[str, Any]:
        exec_id = api.exec_create(str(row["name"]), ["bash", "-c", SCRIPT, "signal", name])
        at = time.time()
        out = api.exec_start(exec_id).decode("utf-8", "replace").strip()
        code = api.exec_inspect(exec_id).get("ExitCode")
        if code != 0 or not out.isdigit():
            return {"error": f"the signal did not go out (exit {code}): {out[-200:]}"}
        return {"processes": int(out), "at": round(at, 3)}

    results = parallel(one, running, workers)
    return {
        str(row["name"]): (
            {"error": error_text(r) if isinstance(r, DockerException) else str(r)}
            if isinstance(r, Exception)
            else r
        )
        for row, r in zip(running, results)
    }
