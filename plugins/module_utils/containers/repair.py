"""Starting again what an engine restart left stopped (bai_session_repair; docs/sessions.md,
"After a restart"): the stopped containers of running interactive sessions on this agent,
started as a create's rerun starts them - behind the session isolation table, the overlay
learnt again where the engine lost it, until sshd listens in each - then each session's
SSH mesh checked from its master.

Reconcile says what to start (bai_session_ledger's ``stopped`` and ``recheck``); a
session's trouble is its own outcome, never another session's.

    start_stopped(host, docker, agent, rows, ...)   {session: Outcome} for this agent's rows
    recheck(api, rows, ...)                         {session: Outcome} of the mesh checks
    merge(into, checked)                            the two put together

What a reconcile says of the repairs, over every agent's results, is controller-side
(plugin_utils/repair_outcome.py).

An outcome: ``started`` (container names), ``mesh`` (the check's lines) and ``error``
(absent when all went well).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Failure
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_BATCH,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.containers import mesh, readiness
from ansible_collections.bai.cluster.plugins.module_utils.containers.share import Host
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    DockerException,
    error_text,
    parallel,
)
from ansible_collections.bai.cluster.plugins.module_utils.network import isolation

# Container states a start brings back (as the ledger's reconcile picks them).
STARTABLE = ("exited", "created")
# A mesh check right after the starts may meet an overlay still settling: tried this
# many times, this far apart.
MESH_TRIES = 3
MESH_PAUSE_S = 5.0

Outcomes = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class _Start:
    session: str
    name: str
    cid: str
    image: str
    at: readiness.Where


def start_stopped(
    host: Host,
    docker: Any,
    agent: str,
    rows: Sequence[Mapping[str, Any]],
    *,
    ssh_timeout: float,
    workers: int,
) -> Outcomes:
    """Start the containers ``rows`` name (``session``, ``session_id``, ``containers``)
    on this agent, all at once, and wait until sshd listens in each."""
    out: Outcomes = {str(r["session"]): {"started": []} for r in rows}
    unguarded = isolation.table_problem(host, agent)
    todo: list[_Start] = []
    for row in rows:
        try:
            if unguarded:
                raise Failure(unguarded)
            todo += _stopped_here(docker.api, agent, row)
        except (Failure, DockerException) as exc:
            out[str(row["session"])]["error"] = f"not started: {_said(exc)}"
    if host.check_mode:
        for item in todo:
            out[item.session]["started"].append(item.name)
        return out
    since = int(time.time())
    results = parallel(
        lambda t: readiness.start_on(docker, host.warn, t.at, t.cid, t.image), todo, workers
    )
    begun: dict[str, list[tuple[str, str, int | None]]] = {}
    for item, result in zip(todo, results):
        if isinstance(result, Exception):
            _fail(out[item.session], f"{item.name} did not start: {_said(result)}")
        else:
            out[item.session]["started"].append(item.name)
            begun.setdefault(item.session, []).append((item.name, item.cid, since))
    for session, targets in begun.items():
        try:
            readiness.wait_ssh_on(docker.api, agent, ssh_timeout, targets, since)
        except (Failure, DockerException) as exc:
            _fail(out[session], _said(exc))
    return out


def _stopped_here(api: Any, agent: str, row: Mapping[str, Any]) -> list[_Start]:
    """The named containers of the session that are stopped here (those running now are
    left alone); Failure for one that is gone, another session's or a batch session's."""
    session, sid = str(row["session"]), str(row["session_id"])
    found = {
        c["Names"][0].lstrip("/"): c
        for c in api.containers(all=True, filters={"label": [f"{LABEL_SESSION_ID}={sid}"]})
    }
    todo = []
    for name in row.get("containers") or ():
        item = found.get(name)
        if item is None:
            raise Failure(f"container {name} of session {session} ({sid}) is not on {agent}")
        if (item.get("Labels") or {}).get(LABEL_BATCH):
            raise Failure(f"{name} belongs to a batch session, which never starts again")
        if item.get("State") not in STARTABLE:
            continue
        network = str((item.get("HostConfig") or {}).get("NetworkMode") or "")
        at = readiness.Where(agent, session, sid, network)
        todo.append(_Start(session, name, str(item["Id"]), str(item.get("Image") or ""), at))
    return todo


def recheck(
    api: Any,
    rows: Sequence[Mapping[str, Any]],
    *,
    tries: int = MESH_TRIES,
    pause_s: float = MESH_PAUSE_S,
) -> Outcomes:
    """From each row's ``master`` container, one SSH login to each of its ``hosts``."""
    out: Outcomes = {}
    for row in rows:
        session = str(row["session"])
        for attempt in range(tries):
            try:
                out[session] = {
                    "mesh": mesh.check_from(api, row["master"], row["master"], row["hosts"])
                }
                break
            except (Failure, DockerException) as exc:
                if attempt == tries - 1:
                    out[session] = {"mesh": [], "error": _said(exc)}
                else:
                    time.sleep(pause_s)
    return out


def merge(into: Outcomes, checked: Outcomes) -> Outcomes:
    """The mesh checks' outcomes added to the starts' (errors of both kept)."""
    for session, outcome in checked.items():
        entry = into.setdefault(session, {"started": []})
        entry["mesh"] = outcome["mesh"]
        if outcome.get("error"):
            _fail(entry, outcome["error"])
    return into


def _fail(outcome: dict[str, Any], text: str) -> None:
    outcome["error"] = f"{outcome['error']}; {text}" if outcome.get("error") else text


def _said(exc: Exception) -> str:
    return error_text(exc) if isinstance(exc, DockerException) else str(exc)
