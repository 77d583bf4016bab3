"""Batch sessions (docs/sessions.md, "Batch sessions"): a command run to its end across the
session's containers, and what its end was.

A batch session's containers run :data:`RUNNER` as their entrypoint; it starts the
session image's own (/opt/bai/entrypoint.sh: the keys, then sshd) beside itself. It
waits in main1 until the toolkit writes ``go`` (every container is up and the SSH mesh
check passed), runs the command there as user ``work`` in a login shell with
``pipefail``, in the first data folder, and exits with its exit code: main1's container
stops when the command ends. Gang semantics, with no controller in the loop: every other
member stops once main1 is gone (:data:`POLL_S` x :data:`MISSES` after it), and main1
stops the command (SIGTERM, then SIGKILL after the grace period) as soon as a member is
gone for as long. A SIGTERM to main1 (``docker stop``: destroy, Ctrl-C) stops the command
the same way and is recorded as ``cancelled``.

Pure, apart from :func:`runner_tar`'s tar: the module reads the containers and the status
file; :func:`result` says what they mean.

    runner_tar(...)            the files copied into each container before it starts
    parse_status(text)         main1's status file: started, ended, exit, lost, cancelled
    member_of(inspect)         a container's inspect -> Member
    result(members, status)    -> Result (state, exit code, signal, the member that failed)
    keep_tail(data, cap)       what is kept of a member's output
"""

from __future__ import annotations

import signal as _signal
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Optional

from ansible_collections.bai.cluster.plugins.module_utils.common.archives import root_tar
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_BATCH,
    LABEL_HOST,
    LABEL_SESSION,
    LABEL_SESSION_ID,
    LABEL_SIZE,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.kinds import MAIN

# Where the runner and its files live in the container (root only), under /opt/bai.
FOLDER = "job"
DIR = "/opt/bai/" + FOLDER
RUNNER = DIR + "/run"
GO = "go"
STATUS = "status"

# Gang checks: every POLL_S seconds each member looks up main1's name, and main1 every
# member's, on the session network (Docker's DNS answers only for running containers);
# MISSES misses in a row mean gone. So a member stops at most about POLL_S x (MISSES + 1)
# seconds after main1, and the command is stopped as long after a member dies.
POLL_S = 2
MISSES = 3
# SIGTERM to the command, then SIGKILL after this many seconds (session_stop_grace_s).
DEFAULT_GRACE_S = 10
# What `session logs` finds after the session is gone: the last bytes of each member.
DEFAULT_LOG_MAX_BYTES = 1024 * 1024

# States. STARTING: the containers are up, the command not yet started; RUNNING; ENDING:
# the command ended, members are still stopping. The others are terminal.
STARTING = "starting"
RUNNING = "running"
ENDING = "ending"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
LOST = "lost"
# Ended by its lifetime (session_lifetime_s): reconcile stopped it.
TIMEOUT = "timeout"
# Stopped by the toolkit for the cluster's sake: a forced drain of an agent it used.
PREEMPTED = "preempted"
TERMINAL = (SUCCEEDED, FAILED, CANCELLED, LOST, TIMEOUT, PREEMPTED)
# Container states in which a member has not stopped.
_LIVE = ("created", "running", "restarting", "paused", "removing")

RUNNER_SCRIPT = r"""#!/bin/bash
# The job runner of a batch session's container (bai.cluster, module_utils/jobs/job.py). The
# container's entrypoint (as root, under docker-init): `run main` in main1, `run member`
# elsewhere. It starts the image's entrypoint (sshd) beside itself.
set -u
dir=/opt/bai/job
# shellcheck disable=SC1091
. "$dir/settings"
role=${1:-member}
mapfile -t peers < "$dir/peers"
# The session image's own entrypoint: the keys, ~work/.ssh/environment, then sshd in the
# foreground of that child (its log on stderr, as in an interactive session).
/opt/bai/entrypoint.sh &
stop=""
trap 'stop=${stop:-signal}' TERM INT HUP
record() { printf '%s=%s\n' "$1" "$2" >> "$dir/status"; }
# The kernel's OOM kills in this container's memory cgroup (v2, else v1), recorded as the
# runner exits: Docker's OOMKilled flag misses a process killed beside the init.
oom_kills() {
  local file key value
  for file in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do
    [ -r "$file" ] || continue
    while read -r key value; do
      [ "$key" = oom_kill ] && { echo "$value"; return; }
    done < "$file"
  done
  echo 0
}
trap 'record oom_kills "$(oom_kills)"' EXIT
gone() { ! getent hosts "$1" > /dev/null 2>&1; }
nap() { sleep "$1" & wait $!; }

if [ "$role" != main ]; then
  # A member lives as long as main1: it stops once main1 is gone, seen gone $misses times
  # in a row (after it was seen once), or when it is stopped.
  seen=0 miss=0
  while [ -z "$stop" ]; do
    if gone "${peers[0]}"; then
      [ "$seen" = 1 ] && miss=$((miss + 1))
    else
      seen=1 miss=0
    fi
    [ "$miss" -ge "$misses" ] && exit 0
    nap "$poll_s"
  done
  exit 143
fi

until [ -e "$dir/go" ] || [ -n "$stop" ]; do nap 0.2; done
if [ -n "$stop" ]; then
  record cancelled before-start; record ended "$(date +%s.%N)"; exit 143
fi
workdir=$(cat "$dir/workdir")
[ -d "$workdir" ] || workdir=/home/work
cd "$workdir" || exit 126
record started "$(date +%s.%N)"
# The environment an SSH login gets (the entrypoint wrote it), in a login shell as work,
# in its own process group (setsid), so that stopping it reaches every process it started.
mapfile -t vars < /home/work/.ssh/environment
setsid setpriv --reuid="$(id -u work)" --regid="$(id -g work)" --init-groups \
  env -i "${vars[@]}" HOME=/home/work USER=work LOGNAME=work SHELL=/bin/bash \
  bash -l -o pipefail -c "$(cat "$dir/command")" < /dev/null 2>&1 &
pid=$!

terminate() {
  kill -TERM -- "-$pid" 2> /dev/null
  for ((i = 0; i < grace_s * 5; i++)); do
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.2
  done
  kill -KILL -- "-$pid" 2> /dev/null
}

declare -A miss=()
lost=""
while kill -0 "$pid" 2> /dev/null && [ -z "$stop" ] && [ -z "$lost" ]; do
  for p in "${peers[@]}"; do
    if gone "$p"; then miss[$p]=$((${miss[$p]:-0} + 1)); else miss[$p]=0; fi
    if [ "${miss[$p]}" -ge "$misses" ]; then lost=$p; break; fi
  done
  [ -n "$lost" ] || nap "$poll_s"
done
if [ -n "$lost" ]; then
  record lost "$lost"
  printf 'bai-job: %s is gone: stopping the command (the session fails fast)\n' "$lost"
fi
[ -n "$stop" ] && record cancelled "$stop"
[ -n "$lost$stop" ] && terminate
while :; do
  wait "$pid"; code=$?
  kill -0 "$pid" 2> /dev/null || break
  # A signal interrupted the wait: the command still runs.
  record cancelled "${stop:-signal}"; terminate
done
record exit "$code"
record ended "$(date +%s.%N)"
exit "$code"
"""


def runner_tar(
    *, main: bool, command: str, workdir: str, peers: Sequence[str], grace_s: int
) -> bytes:
    """The runner and its files, as ``job/`` for /opt/bai (root only): ``peers`` are the
    hosts this container watches (main1: every other member; a member: main1)."""
    files = {
        "run": RUNNER_SCRIPT.encode(),
        "settings": f"poll_s={POLL_S}\nmisses={MISSES}\ngrace_s={int(grace_s)}\n".encode(),
        "peers": "".join(f"{p}\n" for p in peers).encode(),
        "command": (command if main else "").encode(),
        "workdir": f"{workdir}\n".encode(),
    }
    return root_tar(files, mode=0o600, folder=FOLDER, modes={"run": 0o700})


def go_tar() -> bytes:
    """``job/go``: what starts the command in main1."""
    return root_tar({GO: b""}, mode=0o600, folder=FOLDER)


def parse_status(text: str) -> dict[str, Any]:
    """A runner's status file (``key=value`` lines): main1's started, ended (epoch
    seconds), exit, lost (the member that was gone), cancelled (why); every member's
    oom_kills (the kernel's OOM kills in its container)."""
    found: dict[str, Any] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key in ("started", "ended"):
            try:
                found[key] = float(value)
            except ValueError:
                continue
        elif key in ("exit", "oom_kills"):
            try:
                found[key] = int(value)
            except ValueError:
                continue
        elif key in ("lost", "cancelled"):
            found.setdefault(key, value)
    return found


@dataclass(frozen=True)
class Member:
    """One container of a batch session, as its engine reports it."""

    host: str
    main: bool
    agent: str = ""
    state: str = "missing"
    exit_code: Optional[int] = None
    oom_killed: bool = False
    finished_at: Optional[float] = None

    @property
    def live(self) -> bool:
        return self.state in _LIVE


def _epoch(text: Any) -> Optional[float]:
    """Docker's RFC 3339 time (nanoseconds, Z) as epoch seconds; None for its zero time."""
    if not isinstance(text, str) or not text or text.startswith("0001-"):
        return None
    head, _dot, rest = text.rstrip("Z").partition(".")
    digits = "".join(ch for ch in rest if ch.isdigit())[:6]
    try:
        moment = datetime.fromisoformat(head + "+00:00")
    except ValueError:
        return None
    return moment.timestamp() + (int(digits.ljust(6, "0")) / 1e6 if digits else 0.0)


def member_of(
    inspect: Mapping[str, Any], agent: str = "", status: Optional[Mapping[str, Any]] = None
) -> Member:
    """A container's ``docker inspect`` (and its runner's status file) as a :class:`Member`."""
    labels = (inspect.get("Config") or {}).get("Labels") or {}
    state = inspect.get("State") or {}
    stopped = state.get("Status") not in _LIVE
    return Member(
        host=str(labels.get(LABEL_HOST) or inspect.get("Name", "").lstrip("/")),
        main=labels.get(LABEL_BATCH) == MAIN,
        agent=agent,
        state=str(state.get("Status") or "missing"),
        exit_code=int(state.get("ExitCode", 0)) if stopped else None,
        oom_killed=bool(state.get("OOMKilled")) or bool((status or {}).get("oom_kills")),
        finished_at=_epoch(state.get("FinishedAt")) if stopped else None,
    )


def signal_name(code: Optional[int]) -> Optional[str]:
    """The signal an exit code says killed a process (128 + N, as shells report it)."""
    if code is None or not 128 < code <= 128 + 64:
        return None
    try:
        return _signal.Signals(code - 128).name
    except ValueError:
        return f"signal {code - 128}"


@dataclass(frozen=True)
class Result:
    """What a batch session's command came to (:func:`result`)."""

    state: str
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    failed: Optional[dict[str, Any]] = None  # the first member that failed
    started: Optional[float] = None
    ended: Optional[float] = None
    reason: str = ""

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "terminal": self.terminal}


def _failure(member: Member, why: str) -> dict[str, Any]:
    return {
        "host": member.host,
        "agent": member.agent,
        "exit_code": member.exit_code,
        "signal": signal_name(member.exit_code),
        "oom_killed": member.oom_killed,
        "why": why,
    }


def _describe(member: Member) -> str:
    code = member.exit_code
    what = "removed" if member.state == "missing" else f"exit {code}"
    sig = signal_name(code)
    if sig:
        what += f", {sig}"
    if member.oom_killed:
        what += ", killed for memory (OOM)"
    return f"{member.host} ({what})"


def result(
    members: Sequence[Member],
    status: Mapping[str, Any],
    *,
    unanswered: Sequence[str] = (),
    cancelled: bool = False,
) -> Result:
    """The state of a batch session from its members (every container, as its engine
    reports it; a container that is gone is a Member of state ``missing``), main1's
    status file (:func:`parse_status`) and the agents that did not answer.

    Terminal only once every member has stopped. Then: cancelled (main1 was stopped, or
    ``cancelled``: a destroy before the end); failed, naming the member main1 saw gone
    first, else main1 itself when the command failed - or a member the kernel killed for
    memory, when main1 was not; succeeded when the command exited 0. An agent that did
    not answer makes it lost: its members cannot be seen to have stopped.
    """
    started, ended = status.get("started"), status.get("ended")
    main = next((m for m in members if m.main), None)
    if unanswered:
        return Result(
            LOST,
            started=started,
            reason=f"agent(s) {', '.join(sorted(unanswered))} did not answer",
        )
    live = [m for m in members if m.live]
    if main is not None and main.live:
        state = RUNNING if started is not None else STARTING
        return Result(state, started=started, reason="")
    if live:
        return Result(
            ENDING,
            started=started,
            ended=ended,
            exit_code=status.get("exit"),
            reason=f"waiting for {', '.join(m.host for m in live)} to stop",
        )
    code = status.get("exit", main.exit_code if main is not None else None)
    base = {"exit_code": code, "signal": signal_name(code), "started": started, "ended": ended}
    lost_host = status.get("lost")
    if (cancelled or status.get("cancelled")) and not lost_host:
        when = "before it started" if started is None else "while it ran"
        return Result(CANCELLED, **base, reason=f"stopped {when}")
    if lost_host:
        gone = next((m for m in members if m.host == lost_host), Member(lost_host, False))
        return Result(
            FAILED,
            **base,
            failed=_failure(gone, "gone while the command ran"),
            reason=f"{_describe(gone)} stopped while the command ran; main1 stopped the command",
        )
    if main is None:
        return Result(FAILED, **base, reason="main1 is gone (removed)")
    if started is None:
        return Result(
            FAILED,
            **base,
            failed=_failure(main, "stopped before the command started"),
            reason=f"{_describe(main)} stopped before the command started",
        )
    if code == 0:
        return Result(SUCCEEDED, **base, reason="the command exited 0")
    oom = [m for m in members if m.oom_killed and not m.main]
    first = main if main.oom_killed or not oom else oom[0]
    why = "the command failed" if first is main else "killed for memory while the command ran"
    return Result(
        FAILED,
        **base,
        failed=_failure(first, why),
        reason=f"the command exited {code}"
        + (f" ({base['signal']})" if base["signal"] else "")
        + (f"; first failure: {_describe(first)}" if first is not main or main.oom_killed else ""),
    )


def keep_tail(data: bytes, cap: int = DEFAULT_LOG_MAX_BYTES) -> bytes:
    """What is kept of a member's output: all of it, or its last ``cap`` bytes after a
    line saying how much was left out."""
    if len(data) <= cap:
        return data
    cut = data[-cap:]
    newline = cut.find(b"\n")
    if 0 <= newline < len(cut) - 1:
        cut = cut[newline + 1 :]
    dropped = len(data) - len(cut)
    return f"[bai: the first {dropped} bytes of this output were not kept]\n".encode() + cut


def combine(reports: Sequence[Mapping[str, Any]], unanswered: Sequence[str] = ()) -> dict[str, Any]:
    """Every agent's report of one batch session (``members``, ``status`` - what
    bai_session_job's status, or bai_session_containers' removal, returned) as its
    :class:`Result`, with ``members`` (host -> agent, for the record of its end) and
    ``member_states`` (each member as its engine reported it)."""
    members = [
        Member(**{k: v for k, v in m.items() if k in Member.__dataclass_fields__})
        for report in reports
        for m in report.get("members") or ()
    ]
    status: Mapping[str, Any] = next((r["status"] for r in reports if r.get("status")), {})
    done = result(members, status, unanswered=unanswered).to_dict()
    done["members"] = {m.host: m.agent for m in members}
    done["member_states"] = [asdict(m) for m in members]
    return done


def job_result(registered: Any, unanswered: Sequence[str] = ()) -> dict[str, Any]:
    """The filter bai_job_result: a registered loop (or list) of bai_session_job status
    results, one per agent, put together (:func:`combine`); an item that failed (also
    under ``failed_when: false``: it has no ``members``) or did not answer makes the
    session ``lost``."""
    items = registered.get("results", []) if isinstance(registered, Mapping) else registered
    reports, missing = [], list(unanswered)
    for item in items or ():
        if (
            item.get("failed")
            or item.get("unreachable")
            or item.get("skipped")
            or "members" not in item
        ):
            missing.append(str(item.get("item") or item.get("agent") or "?"))
        else:
            reports.append(item)
    return combine(reports, missing)


def ended_sessions(reads: Sequence[Mapping[str, Any]]) -> list[str]:
    """The filter bai_batch_ended: the batch sessions whose every container (all of them,
    as many as the session has) has stopped, from agents' reads (bai_agent_info results
    with ``containers``): their command ended, nothing of them runs, and session reconcile
    destroys them (keeping their output). A session with a container still starting or
    running, or with a container missing, is not ended."""
    found: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for read in reads:
        for row in read.get("containers") or ():
            labels = row.get("labels") or {}
            if labels.get(LABEL_BATCH):
                key = (str(labels.get(LABEL_SESSION)), str(labels.get(LABEL_SESSION_ID)))
                found.setdefault(key, []).append(row)
    ended = set()
    for (name, _sid), rows in found.items():
        size = int((rows[0].get("labels") or {}).get(LABEL_SIZE) or 0)
        if len(rows) == size and all(r.get("state") in ("exited", "dead") for r in rows):
            ended.add(name)
    return sorted(ended)
