"""The environment every container of a session gets (docs/environment.md): the
``BACKENDAI_CLUSTER_*`` variables, ``MASTER_ADDR``/``MASTER_PORT`` and ``TF_CONFIG``.
A value set by the user or the image wins over a derived rendezvous variable.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.common.ports import parse_port
from ansible_collections.bai.cluster.plugins.module_utils.session.model import MODES, Kernel

DEFAULT_MASTER_PORT = 29500
# The one BACKENDAI_* variable a user may set: it chooses the rendezvous port.
DIST_MASTER_PORT_VAR = "BACKENDAI_DIST_MASTER_PORT"
# The session network's interface in every container: the containers are attached to the
# session network alone, so it is the first one Docker makes (an overlay's containers also
# get docker_gwbridge, as eth1, for their way out).
SESSION_IFNAME = "eth0"
# Launchers that pick an interface by themselves, told to use the session network's.
IFNAME_VARS = (
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "OMPI_MCA_btl_tcp_if_include",
    "OMPI_MCA_oob_tcp_if_include",
)
# Set by the toolkit from the GPUs a container is given (upstream names); not user input.
GPU_ENV_VARS = ("GPU_COUNT", "N_GPUS")


def parse_image_env(entries: Iterable[str] | None) -> dict[str, str]:
    """Docker's ``Config.Env`` list (``["K=V", ...]``) as a dict; later entries win."""
    env: dict[str, str] = {}
    for entry in entries or ():
        key, _sep, value = entry.partition("=")
        env[key] = value
    return env


def master_port(
    user_env: Mapping[str, str],
    image_env: Mapping[str, str],
    size: int,
) -> int:
    """The rendezvous port: BACKENDAI_DIST_MASTER_PORT (user env over image env) or
    29500. TF_CONFIG gives worker i port P+i, so P+size-1 must still be a port."""
    raw: Any = DEFAULT_MASTER_PORT
    field_name = "MASTER_PORT"
    if DIST_MASTER_PORT_VAR in user_env:
        raw = user_env[DIST_MASTER_PORT_VAR]
        field_name = f"env.{DIST_MASTER_PORT_VAR}"
    elif DIST_MASTER_PORT_VAR in image_env:
        raw = image_env[DIST_MASTER_PORT_VAR]
        field_name = f"{DIST_MASTER_PORT_VAR} (set in the image's ENV)"
    port = parse_port(raw, field_name)
    if port + size - 1 > 65535:
        raise SpecError(
            f"{field_name}: got {raw!r}; with {size} containers TF_CONFIG needs ports "
            f"{port}..{port + size - 1}, so it must be at most {65536 - size}"
        )
    return port


def cluster_env(
    kernels: Sequence[Kernel],
    kernel: Kernel,
    *,
    session_name: str,
    session_id: str,
    kernel_id: str,
    mode: str,
    user_env: Mapping[str, str],
    image_env: Mapping[str, str],
    deadline: str | None = None,
    restart_count: str | None = None,
) -> dict[str, str]:
    """Environment for ``kernel``'s container: ``{**user_env, **toolkit_values}``.

    The caller's final container env is ``{**image_env, **returned}``.

    * BACKENDAI_CLUSTER_* / BACKENDAI_KERNEL_ID / BACKENDAI_SESSION_* always come from
      the toolkit (they override any user or image value).
    * Only when N > 1: MASTER_ADDR (first host), MASTER_PORT (see ``master_port``),
      TF_CONFIG (worker i at P+i, task index = LOCAL_RANK) and IFNAME_VARS (the session
      network's interface, SESSION_IFNAME). Each one is left out of the
      toolkit values if the user or image env already defines it, even as "" - a value
      from user_env then stays in the result, one from image_env reaches the container
      through the caller's merge. TF_CONFIG's P is the effective MASTER_PORT when that
      was preset to a valid port, so the two never disagree.
    * WORLD_SIZE, RANK and LOCAL_RANK are never set (torchrun sets them per process).
    * BACKENDAI_SESSION_DEADLINE: ``deadline`` (epoch seconds), when the session has a
      lifetime.
    * BACKENDAI_SESSION_RESTART_COUNT: ``restart_count``, how many times a batch
      session that may restart (session_restarts) started again before this attempt.
    """
    if mode not in MODES:
        raise SpecError(f"mode: got {mode!r}; allowed: {', '.join(MODES)}")
    hosts = [k.hostname for k in kernels]
    if kernel.hostname not in hosts:
        raise ValueError(f"kernel {kernel.hostname!r} is not one of {hosts}")
    env = dict(user_env)
    env.update(
        {
            "BACKENDAI_CLUSTER_SIZE": str(len(hosts)),
            "BACKENDAI_CLUSTER_HOSTS": ",".join(hosts),
            "BACKENDAI_CLUSTER_REPLICAS": replicas_string(kernels),
            "BACKENDAI_CLUSTER_HOST": kernel.hostname,
            "BACKENDAI_CLUSTER_IDX": str(kernel.idx),
            "BACKENDAI_CLUSTER_ROLE": kernel.role,
            "BACKENDAI_CLUSTER_LOCAL_RANK": str(hosts.index(kernel.hostname)),
            "BACKENDAI_CLUSTER_MODE": mode,
            "BACKENDAI_KERNEL_ID": kernel_id,
            "BACKENDAI_SESSION_ID": session_id,
            "BACKENDAI_SESSION_NAME": session_name,
        }
    )
    if deadline:
        env["BACKENDAI_SESSION_DEADLINE"] = deadline
    if restart_count:
        env["BACKENDAI_SESSION_RESTART_COUNT"] = restart_count
    if len(hosts) > 1:
        env.update(_dist_env(hosts, kernel.hostname, user_env, image_env))
    return env


def replicas_string(kernels: Sequence[Kernel]) -> str:
    """``role:count`` in kernel order, e.g. ``main:1,sub:3``."""
    counts: dict[str, int] = {}
    for kernel in kernels:
        counts[kernel.role] = counts.get(kernel.role, 0) + 1
    return ",".join(f"{role}:{count}" for role, count in counts.items())


def _dist_env(
    hosts: list[str],
    hostname: str,
    user_env: Mapping[str, str],
    image_env: Mapping[str, str],
) -> dict[str, str]:
    """MASTER_ADDR, MASTER_PORT, TF_CONFIG and the interface variables, minus those the
    user or image preset."""
    preset = {**image_env, **user_env}
    port = master_port(user_env, image_env, len(hosts))
    if "MASTER_PORT" in preset:
        port = _valid_port_or(preset["MASTER_PORT"], port, len(hosts))
    tf_config = {
        "cluster": {"worker": [f"{host}:{port + i}" for i, host in enumerate(hosts)]},
        "task": {"type": "worker", "index": hosts.index(hostname)},
    }
    values = {
        "MASTER_ADDR": hosts[0],
        "MASTER_PORT": str(port),
        "TF_CONFIG": json.dumps(tf_config),
        **dict.fromkeys(IFNAME_VARS, SESSION_IFNAME),
    }
    return {key: value for key, value in values.items() if key not in preset}


def _valid_port_or(value: str, fallback: int, size: int) -> int:
    """A preset MASTER_PORT is kept as is; use it for TF_CONFIG only if it is usable."""
    try:
        port = parse_port(value, "MASTER_PORT")
    except SpecError:
        return fallback
    return port if port + size - 1 <= 65535 else fallback
