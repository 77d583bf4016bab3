"""Docker SDK helpers shared by the bai_* modules.

Runs on agents with Debian 12's python3-docker 5.0.3 as well as with docker SDK 7.x in
the controller venv, so it uses only the low-level ``docker.APIClient`` calls both have
(no high-level ``docker.from_env().containers`` API, whose network arguments changed in
7.0). Pure session logic lives in the other module_utils files; this one talks to Docker.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Mapping
from typing import Any, Callable

from ansible_collections.bai.cluster.plugins.module_utils.common.labels import LABEL_SESSION
from ansible_collections.bai.cluster.plugins.module_utils.engine.common import (
    error_text,  # the modules import it from here, beside the SDK's errors
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.container_row import ContainerRow

try:
    import docker
    from docker.errors import APIError, DockerException, NotFound

    HAS_DOCKER = True
    DOCKER_IMPORT_ERROR = None
except ImportError:  # pragma: no cover - reported through fail_json by the modules
    HAS_DOCKER = False
    DOCKER_IMPORT_ERROR = traceback.format_exc()

    class DockerException(Exception):  # type: ignore[no-redef]
        """Stand-in so ``except`` clauses still parse without the SDK."""

    APIError = NotFound = DockerException


def require_docker(module: Any) -> None:
    """fail_json with an actionable message when the docker SDK is missing."""
    if not HAS_DOCKER:
        module.fail_json(
            msg=(
                "the Python docker SDK is not installed for the interpreter running this "
                "module (Debian: apt-get install python3-docker; pip: pip install docker)"
            ),
            exception=DOCKER_IMPORT_ERROR,
        )


class Docker:
    """One low-level API client per thread: the SDK's requests session is not meant to
    be shared by threads, and the modules create containers from a thread pool. The
    API version is negotiated once and reused by the other threads' clients."""

    def __init__(self, docker_host: str | None = None, timeout: int = 60) -> None:
        kwargs = docker.utils.kwargs_from_env()
        if docker_host:
            kwargs["base_url"] = docker_host
        self._kwargs = kwargs
        self._timeout = timeout
        self._local = threading.local()
        self._version = "auto"
        self.api  # connect now so connection errors surface in one place  # noqa: B018

    @property
    def api(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            client = docker.APIClient(version=self._version, timeout=self._timeout, **self._kwargs)
            self._version = client.api_version
            self._local.client = client
        return client


def connect(module: Any) -> Docker:
    """A ``Docker`` for the module's docker_host/docker_timeout, or fail_json."""
    require_docker(module)
    host = module.params.get("docker_host")
    try:
        return Docker(host, module.params.get("docker_timeout") or 60)
    except DockerException as exc:
        where = host or "the local engine (DOCKER_HOST or /var/run/docker.sock)"
        module.fail_json(
            msg=f"cannot reach Docker at {where}: {error_text(exc)}; is dockerd running "
            f"and may this user use it?"
        )
    raise AssertionError("unreachable")  # pragma: no cover


# --- Containers -----------------------------------------------------------------------
def last_exit_code(api: Any, cid: str, state: dict[str, Any], since: int) -> str:
    """The exit code of the container's last stop after ``since`` (Unix seconds).

    A stopped or restarting container's ``State`` holds it; once its restart policy has
    started it again, ``State.ExitCode`` is back to 0 and only the last ``die`` event
    still has it. "unknown" when neither does.
    """
    if not state.get("Running") or state.get("Restarting"):
        return str(state.get("ExitCode", "unknown"))
    try:
        events = api.events(
            since=since,
            until=int(time.time()) + 1,
            filters={"container": cid, "event": "die"},
            decode=True,
        )
        codes = [e.get("Actor", {}).get("Attributes", {}).get("exitCode") for e in events]
    except DockerException:
        codes = []
    return next((str(code) for code in reversed(codes) if code is not None), "unknown")


def container_row(item: Mapping[str, Any], agent: str | None = None) -> dict[str, Any]:
    """The fields the modules return for one entry of ``api.containers()``."""
    return ContainerRow.of_engine(item, agent).to_dict()


def session_rows(api: Any) -> list[ContainerRow]:
    """Every session container on the engine, in any state: one list serves every agent
    slot of the engine (admission and the reads choose their slot's)."""
    return [
        ContainerRow.of_engine(item)
        for item in api.containers(all=True, filters={"label": [LABEL_SESSION]})
    ]


def session_containers(
    api: Any, session: str | None = None, agent: str | None = None
) -> list[dict[str, Any]]:
    """Containers of one session (``session`` given) or of every session, any state."""
    label = LABEL_SESSION if session is None else f"{LABEL_SESSION}={session}"
    items = api.containers(all=True, filters={"label": [label]})
    return sorted((container_row(item, agent) for item in items), key=lambda c: c["name"])


def image_env(api: Any, ref: str) -> list[str] | None:
    """The image's ``Config.Env`` (a list, maybe empty), or None if it is not here."""
    config = image_config(api, ref)
    return None if config is None else list(config.get("Env") or [])


def image_config(api: Any, ref: str) -> dict[str, Any] | None:
    """The image's ``Config`` (Env, Labels, ...), or None if it is not here."""
    try:
        info = api.inspect_image(ref)
    except NotFound:  # ImageNotFound is a NotFound; older engines answer a plain 404
        return None
    return dict(info.get("Config") or info.get("ContainerConfig") or {})


def remove_containers(docker_: Docker, ids: list[str], workers: int = 8) -> list[tuple[str, str]]:
    """Remove containers (force, with anonymous volumes) in parallel; returns the
    (id, error) pairs that failed. Already-gone containers count as removed."""

    def remove(cid: str) -> str | None:
        try:
            docker_.api.remove_container(cid, force=True, v=True)
        except APIError as exc:  # NotFound is an APIError (all are one stand-in without the SDK)
            if isinstance(exc, NotFound):
                return None
            if getattr(exc, "status_code", None) == 409 and "already in progress" in str(exc):
                return None
            return error_text(exc)
        return None

    return [(cid, err) for cid, err in zip(ids, parallel(remove, ids, workers)) if err]


def parallel(func: Callable[[Any], Any], items: list[Any], workers: int = 8) -> list[Any]:
    """``[func(item) for item in items]`` on a thread pool, in order; exceptions are
    returned in place of results so the caller can clean up before failing."""
    from concurrent.futures import ThreadPoolExecutor

    if not items:
        return []

    def guarded(item: Any) -> Any:
        try:
            return func(item)
        except Exception as exc:
            return exc

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(items)))) as pool:
        return list(pool.map(guarded, items))


# --- Networks -------------------------------------------------------------------------
def find_network(api: Any, name: str) -> dict[str, Any] | None:
    """The network called exactly ``name`` (the name filter matches substrings)."""
    for item in api.networks(names=[name]):
        if item.get("Name") == name:
            return item
    return None


def in_swarm(api: Any) -> bool:
    """Whether the engine is an active member of a swarm (overlays may exist elsewhere)."""
    return ((api.info().get("Swarm") or {}).get("LocalNodeState")) == "active"


def engine_subnets(api: Any) -> list[str]:
    """Every subnet the engine's networks use (IPv4 and IPv6)."""
    subnets = []
    for item in api.networks():
        for config in (item.get("IPAM") or {}).get("Config") or []:
            if config.get("Subnet"):
                subnets.append(config["Subnet"])
    return subnets
