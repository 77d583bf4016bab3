"""Starting a session's containers on an agent and waiting until they are ready: each
start (learning a lost swarm overlay again on a worker), then sshd listening in each.

    start(share, cid, image)          start one container
    check_outcomes(share, names, outcomes, what)  Failure naming those that failed
    wait_ssh(share, targets, began)   until every sshd logs that it listens
    poll_interval(containers)         that wait's step
    start_on, wait_ssh_on             the same without a share (bai_session_repair)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from ansible_collections.bai.cluster.plugins.module_utils.common.deadline import poll_until
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Failure
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_SESSION,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.containers.share import Share
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    DockerException,
    error_text,
    last_exit_code,
    remove_containers,
)

SSHD_READY = b"Server listening on"


@dataclass(frozen=True)
class Where:
    """A start's session and agent: the agent for messages, the session network for the
    overlay a swarm worker may have to learn again."""

    agent: str
    session: str
    session_id: str
    network: str


def where(share: Share) -> Where:
    req = share.req
    return Where(req.agent, req.session, req.session_id, req.network or "")


def start(share: Share, cid: str, image: str, attempts: int = 4) -> None:
    """Start a container of this agent's share (:func:`start_on`)."""
    start_on(share.docker, share.module.warn, where(share), cid, image, attempts)


def start_on(
    docker: Any, warn: Callable[[str], None], at: Where, cid: str, image: str, attempts: int = 4
) -> None:
    """Start a container, trying again where the swarm's answer is transient:

    - On a swarm worker, after its engine restarted, Docker 20.10 may have lost the
      session overlay and answer "network ... not found" (or fail to attach): the
      worker then learns the overlay again, as at a first create, from a helper
      container created on it by name (never started, removed once the start went
      through or gave up), and the start is tried again (docs/sessions.md, "After a
      restart").
    - An attach that times out ("context deadline exceeded", after the engine's 20 s)
      asked a manager that has gone: the worker's swarm agent moves to another one
      meanwhile, so the start is tried once more as it is."""
    api = docker.api
    helpers: list[str] = []
    timed_out = 0
    try:
        for attempt in range(attempts):
            try:
                api.start(cid)
                return
            except DockerException as exc:
                text = error_text(exc).lower()
                if attempt == attempts - 1 or not at.network:
                    raise
                if _attach_timed_out(text):
                    timed_out += 1
                    if timed_out > 1:
                        raise
                    warn(
                        f"agent {at.agent}: starting {cid[:12]} timed out asking a swarm "
                        f"manager to attach network {at.network} ({text}); trying again"
                    )
                    continue
                if not _network_lost(text):
                    raise
            if not helpers:
                warn(
                    f"agent {at.agent}: starting {cid[:12]} failed ({text}); "
                    f"asking the managers for network {at.network} again"
                )
                helpers.append(learn_network(api, at, image))
            time.sleep(1.0 + attempt)
    finally:
        remove_containers(docker, helpers)


def _attach_timed_out(text: str) -> bool:
    return "attach" in text and "deadline exceeded" in text


def _network_lost(text: str) -> bool:
    return "network" in text and ("not found" in text or "attaching" in text)


def learn_network(api: Any, at: Where, image: str) -> str:
    """Have this engine ask the managers for the session network: create a container
    attached to it by name; returns its id."""
    network = at.network
    helper = api.create_container(
        image,
        command=["true"],
        labels={LABEL_SESSION: at.session, LABEL_SESSION_ID: at.session_id},
        host_config=api.create_host_config(network_mode=network),
        networking_config=api.create_networking_config({network: api.create_endpoint_config()}),
        use_config_proxy=False,
    )
    return str(helper["Id"])


def check_outcomes(share: Share, names: list[str], outcomes: list, what: str) -> None:
    errors = [
        f"{name}: {error_text(out)}"
        for name, out in zip(names, outcomes)
        if isinstance(out, Exception)
    ]
    if errors:
        raise Failure(
            f"could not {what} session {share.req.session} on agent {share.req.agent}: "
            + "; ".join(errors)
        )


# The sshd wait's step: POLL_PER_CONTAINER_S per container read, at most POLL_MAX_S.
POLL_PER_CONTAINER_S = 0.02
POLL_MAX_S = 0.1


def wait_ssh(share: Share, targets: list[tuple[str, str, Optional[int]]], began: int) -> None:
    """Wait until every (name, id, since) of this agent's share listens (:func:`wait_ssh_on`)."""
    wait_ssh_on(share.docker.api, share.req.agent, share.cfg.ssh_timeout, targets, began)


def wait_ssh_on(
    api: Any,
    agent: str,
    timeout: float,
    targets: list[tuple[str, str, Optional[int]]],
    began: int,
) -> None:
    """Wait until every (name, id, since) logs sshd's 'Server listening on'.

    since is None for a container this run created; began is when this run started them.
    """
    pending = {name: (cid, since) for name, cid, since in targets}

    def ready() -> bool:
        for name, (cid, since) in list(pending.items()):
            if _listens(api, agent, name, cid, since, began):
                del pending[name]
        return not pending

    def expired() -> Failure:
        return Failure(
            f"sshd did not start within {timeout:g}s in "
            f"{', '.join(sorted(pending))} on agent {agent}; raise "
            f"ssh_timeout if the agent is slow, or check the container logs"
        )

    poll_until(ready, timeout, expired, interval=poll_interval(len(targets)))


def poll_interval(containers: int) -> float:
    """How often the sshd wait reads the logs of ``containers`` new containers: sshd
    comes up about 0.1 s after the start, and a step of 0.1 s added half that to every
    create; a log read costs 1-3 ms of the engine's CPU, so a few containers are read
    every 20 ms each, and many no oftener than every 0.1 s (the reads would take the
    CPU the starting containers need)."""
    return min(POLL_MAX_S, POLL_PER_CONTAINER_S * max(1, containers))


def _listens(api: Any, agent: str, name: str, cid: str, since: Optional[int], began: int) -> bool:
    """Whether sshd in container ``cid`` logged that it listens; Failure when the
    container stopped before."""
    kwargs: dict[str, Any] = {"since": since} if since else {}
    logs = api.logs(cid, stdout=True, stderr=True, **kwargs)
    if SSHD_READY in logs:
        return True
    info = api.inspect_container(cid)
    state = info["State"]
    # With a restart policy, a container that exits is started again at once:
    # for a new container, any restart means it stopped before sshd came up.
    if (
        not state.get("Running")
        or state.get("Restarting")
        or (since is None and info.get("RestartCount"))
    ):
        raise Failure(
            f"container {name} on agent {agent} stopped (exit code "
            f"{last_exit_code(api, cid, state, began)}) before sshd came up; its log "
            f"ends: {_tail(logs)}"
        )
    return False


def _tail(logs: bytes, lines: int = 5) -> str:
    text = logs.decode("utf-8", "replace").strip().splitlines()[-lines:]
    return " | ".join(text) if text else "(empty)"
