"""A batch session's containers on one engine (module_utils/jobs/job.py says what it means):
start the command, read the members and main1's status file, stop them, keep their output.

Every function takes docker-py's APIClient (``api``); the unit tests give a stand-in.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tarfile
import time
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Failure
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_BATCH,
    LABEL_HOST,
    LABEL_RESTART_COUNT,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    APIError,
    NotFound,
    parallel,
)
from ansible_collections.bai.cluster.plugins.module_utils.jobs import attempts, job
from ansible_collections.bai.cluster.plugins.module_utils.session import kinds

DEFAULT_LOG_DIR = "/var/lib/bai-cluster/logs"
# Kept output older than this is removed when another session's output is kept.
LOG_KEEP_DAYS = 30


def batch_rows(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows (docker_api.container_row) of a batch session's containers."""
    return [r for r in rows if (r.get("labels") or {}).get(LABEL_BATCH)]


def read_file(api: Any, cid: str, path: str) -> Optional[bytes]:
    """A file of a container (running or stopped), or None when it is not there."""
    try:
        stream, _stat = api.get_archive(cid, path)
    except NotFound:
        return None
    data = b"".join(stream)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = next((m for m in tar.getmembers() if m.isfile()), None)
        if member is None:
            return None
        handle = tar.extractfile(member)
        return handle.read() if handle else None


def status(api: Any, cid: str) -> dict[str, Any]:
    """A runner's status file, parsed (job.parse_status); {} before it wrote one."""
    data = read_file(api, cid, f"{job.DIR}/{job.STATUS}")
    return job.parse_status(data.decode("utf-8", "replace")) if data else {}


def members(
    api: Any,
    rows: Sequence[Mapping[str, Any]],
    agent: str,
    known: Optional[Mapping[str, Mapping[str, Any]]] = None,
) -> list[job.Member]:
    """The members among ``rows`` as their engine reports them now; a stopped one's
    status file is read unless ``known`` (container id -> parsed status) has it."""
    found = []
    for row in rows:
        try:
            inspect = api.inspect_container(row["id"])
            running = (inspect.get("State") or {}).get("Running")
            if running:
                own: Mapping[str, Any] = {}
            elif known is not None and row["id"] in known:
                own = known[row["id"]]
            else:
                own = status(api, row["id"])
            found.append(job.member_of(inspect, agent, own))
        except NotFound:
            labels = row.get("labels") or {}
            found.append(
                job.Member(
                    host=str(labels.get(LABEL_HOST) or row["name"]),
                    main=labels.get(LABEL_BATCH) == kinds.MAIN,
                    agent=agent,
                )
            )
    return found


def main_row(rows: Sequence[Mapping[str, Any]]) -> Optional[Mapping[str, Any]]:
    return next((r for r in rows if (r.get("labels") or {}).get(LABEL_BATCH) == kinds.MAIN), None)


def report(api: Any, rows: Sequence[Mapping[str, Any]], agent: str) -> dict[str, Any]:
    """What this engine knows of a batch session: its members here and, with main1 here,
    the status file (the controller puts the agents' reports together: job.result)."""
    main = main_row(rows)
    main_status = status(api, main["id"]) if main else None
    known = {main["id"]: main_status} if main and main_status is not None else {}
    return {
        "members": [m.__dict__ for m in members(api, rows, agent, known)],
        "status": main_status,
    }


def start(api: Any, rows: Sequence[Mapping[str, Any]], wait_s: float = 10.0) -> bool:
    """Start the command in main1 (``job/go``); False when it had started already.
    Returns once main1's runner has recorded the start."""
    main = main_row(rows)
    if main is None:
        raise Failure("main1 of the batch session is not on this agent")
    if status(api, main["id"]).get("started") is not None:
        return False
    state = (api.inspect_container(main["id"]).get("State") or {}).get("Status")
    if state != "running":
        raise Failure(f"{main['name']} is {state}, not running: the command cannot start")
    if not api.put_archive(main["id"], "/opt/bai", job.go_tar()):
        raise Failure(f"could not start the command in {main['name']}")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if status(api, main["id"]).get("started") is not None:
            return True
        time.sleep(0.1)
    raise Failure(f"the command did not start in {main['name']} within {wait_s:.0f} s")


def stop(api: Any, rows: Sequence[Mapping[str, Any]], grace_s: int, workers: int = 8) -> list[str]:
    """Stop the running members (SIGTERM: main1's runner stops the command, SIGKILL after
    the grace period); main1 first, so that the command ends before its members go.
    Returns the hosts that were running."""
    live = [r for r in rows if r.get("state") in ("running", "restarting", "paused")]
    timeout = int(grace_s) + 5

    def halt(row: Mapping[str, Any]) -> None:
        with contextlib.suppress(NotFound):
            api.stop(row["id"], timeout=timeout)

    first = [r for r in live if r is main_row(rows)]
    for group in (first, [r for r in live if r not in first]):
        errors = [e for e in parallel(halt, group, workers) if isinstance(e, APIError)]
        if errors:
            raise Failure(f"could not stop the batch session's containers: {errors[0]}")
    return [str((r.get("labels") or {}).get(LABEL_HOST) or r["name"]) for r in live]


def output(api: Any, row: Mapping[str, Any]) -> bytes:
    """What a member printed: main1 of a batch session its command's output (stdout;
    sshd and the toolkit write to stderr), any other container stdout and stderr."""
    main = (row.get("labels") or {}).get(LABEL_BATCH) == kinds.MAIN
    return api.logs(row["id"], stdout=True, stderr=not main)


def log_folder(log_dir: str, session: str, session_id: str) -> str:
    return os.path.join(log_dir, f"{session}-{session_id}")


def keep_logs(
    api: Any,
    rows: Sequence[Mapping[str, Any]],
    *,
    session: str,
    log_dir: str,
    cap: int,
) -> list[str]:
    """Write each member's output (its last ``cap`` bytes) to
    LOG_DIR/SESSION-SESSION_ID/HOST.log (root only); returns the files."""
    written = []
    for row in rows:
        labels = row.get("labels") or {}
        folder = log_folder(log_dir, session, str(labels.get(LABEL_SESSION_ID) or ""))
        os.makedirs(folder, mode=0o700, exist_ok=True)
        os.chmod(log_dir, 0o700)
        try:
            data = job.keep_tail(output(api, row), cap)
        except NotFound:
            continue
        attempt = labels.get(LABEL_RESTART_COUNT)
        name = attempts.kept_name(str(labels.get(LABEL_HOST) or row["name"]), _count(attempt))
        path = os.path.join(folder, name)
        fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(path + ".tmp", path)
        written.append(path)
    return written


def prune_logs(
    log_dir: str, keep_days: int = LOG_KEEP_DAYS, now: Optional[float] = None
) -> list[str]:
    """Remove kept output older than ``keep_days``; returns the folders removed."""
    cutoff = (now or time.time()) - keep_days * 86400
    removed: list[str] = []
    try:
        names = os.listdir(log_dir)
    except OSError:
        return removed
    for name in names:
        path = os.path.join(log_dir, name)
        try:
            if os.path.isdir(path) and os.path.getmtime(path) < cutoff:
                shutil.rmtree(path)
                removed.append(path)
        except OSError:
            continue
    return removed


def _count(text: Any) -> Optional[int]:
    return int(text) if str(text or "").isdigit() else None


def kept_output(
    log_dir: str, session: str, session_id: str, host: str, attempt: Optional[int] = None
) -> Optional[bytes]:
    """A member's kept output (of ``attempt``, for a batch session that restarted), or
    None."""
    name = attempts.kept_name(host, attempt)
    path = os.path.join(log_folder(log_dir, session, session_id), name)
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None
