"""Removing a session's containers from an agent: all of them (``absent``, state=absent:
a batch session's stopped and its output kept first), or what a failed create made
(``cleanup``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Failure
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_OWNER,
    LABEL_RESTART_COUNT,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.containers.share import Host, Share
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    DockerException,
    remove_containers,
    session_containers,
)
from ansible_collections.bai.cluster.plugins.module_utils.jobs import job, job_docker
from ansible_collections.bai.cluster.plugins.module_utils.network import session_network


def absent(
    docker_: Any,
    host: Host,
    *,
    session: str,
    session_id: Optional[str],
    agent: Optional[str],
    networks: bool,
    workers: int,
    grace_s: int = job.DEFAULT_GRACE_S,
    log_dir: str = job_docker.DEFAULT_LOG_DIR,
    log_max_bytes: int = job.DEFAULT_LOG_MAX_BYTES,
    stop: bool = False,
    owner: Optional[str] = None,
    before_attempt: Optional[int] = None,
) -> dict[str, Any]:
    """Remove every container of ``session`` (of ``session_id`` when given) on this
    agent, and with ``networks`` the session's networks here. With ``owner``, only a
    session of that owner's (Failure, removing nothing, when another owner holds one of
    its containers here; no networks without a container of it here).

    A batch session's containers are stopped first (main1's runner stops the command:
    SIGTERM, SIGKILL after ``grace_s``), then their output is kept under ``log_dir``
    (the last ``log_max_bytes`` of each) and what they came to is returned (``job``).
    With ``stop`` (a lifetime that is up) any session's containers are stopped first.
    ``before_attempt``: only those of a restarted batch session's earlier attempts."""
    found = session_containers(docker_.api, session, agent)
    if session_id:
        found = [c for c in found if c["labels"].get(LABEL_SESSION_ID) == session_id]
    if before_attempt is not None:  # an earlier attempt's leftovers, not the running one
        found = [c for c in found if _attempt(c) < before_attempt]
        networks = False
    if owner is not None:
        if any(c["labels"].get(LABEL_OWNER, "") != owner for c in found):
            raise Failure(
                f"session {session} on agent {agent} is held by another owner, not {owner}; "
                f"nothing was removed"
            )
        networks = networks and bool(found)
    names = [c["name"] for c in found]
    batch = job_docker.batch_rows(found)
    report: Optional[dict[str, Any]] = None
    if batch and not host.check_mode:
        stopped = job_docker.stop(docker_.api, batch, grace_s, workers)
        report = {**job_docker.report(docker_.api, batch, agent or ""), "stopped": stopped}
        report["kept"] = job_docker.keep_logs(
            docker_.api, batch, session=session, log_dir=log_dir, cap=log_max_bytes
        )
        job_docker.prune_logs(log_dir)
    elif stop and found and not host.check_mode:
        job_docker.stop(docker_.api, found, grace_s, workers)
    if found and not host.check_mode:
        failed = remove_containers(docker_, [c["id"] for c in found], workers)
        if failed:
            raise Failure(
                f"could not remove container(s) of session {session}: "
                + "; ".join(f"{cid}: {err}" for cid, err in failed)
            )
    removed: list[str] = []
    if networks:
        removed = session_network.absent(
            docker_.api, session, None, host.check_mode, local_only=True
        )["removed"]
    done = {"changed": bool(names or removed), "removed": names, "networks_removed": removed}
    if report is not None:
        done["job"] = report
    return done


def cleanup(share: Share) -> list[str]:
    """Remove what this call created; returns the failures, for the message."""
    failed = remove_containers(share.docker, list(share.created), share.cfg.workers)
    problems = [f"{cid[:12]}: {err}" for cid, err in failed]
    if share.network_made and not problems:
        try:
            session_network.absent(share.docker.api, share.req.session, share.req.network)
        except (Failure, DockerException) as exc:
            problems.append(f"network {share.req.network}: {exc}")
    return problems


def _attempt(container: Mapping[str, Any]) -> int:
    count = str(container["labels"].get(LABEL_RESTART_COUNT) or "0")
    return int(count) if count.isdigit() else 0
