"""Making a session's containers on an agent (not starting them): the session's bridge
when this call is to make it, each container's environment, host config (limits,
confinement, GPUs, RDMA devices, mounts, the master's ports: sshd and apps) and labels,
and the files copied in before the first start (session keys, job runner, authorized keys).

    ensure_network(share)                 the session's bridge (O(network_spec))
    environment(share, kernel, image_env) a container's variables
    make(share, kernel, env, archive)     create one container; its id
"""

from __future__ import annotations

from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Failure
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_AGENT_ID,
    LABEL_APPS,
    LABEL_DEADLINE,
    LABEL_RESTART_COUNT,
)
from ansible_collections.bai.cluster.plugins.module_utils.containers.share import Share
from ansible_collections.bai.cluster.plugins.module_utils.jobs import job
from ansible_collections.bai.cluster.plugins.module_utils.network import session_network
from ansible_collections.bai.cluster.plugins.module_utils.network.rdma import device_mappings
from ansible_collections.bai.cluster.plugins.module_utils.session import apps, kinds
from ansible_collections.bai.cluster.plugins.module_utils.session.env import cluster_env
from ansible_collections.bai.cluster.plugins.module_utils.session.model import (
    PlannedKernel,
    nano_cpus,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.security import host_security
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import SSH_PORT
from ansible_collections.bai.cluster.plugins.module_utils.session.ssh_keys import (
    authorized_keys_tar,
)


def ensure_network(share: Share) -> dict | None:
    """The session's bridge, when this call is to make it (O(network_spec))."""
    req = share.req
    spec = req.network_spec
    if not spec or not req.network:
        return None
    params = {
        **spec,
        "session": req.session,
        "session_id": req.session_id,
        "name": req.network,
    }
    made = session_network.present(share.docker.api, params, share.module.check_mode)
    share.network_made = bool(made["changed"]) and not share.module.check_mode
    return made


def environment(share: Share, kernel: PlannedKernel, image_vars: dict[str, str]) -> dict[str, str]:
    req = share.req
    toolkit = cluster_env(
        req.kernels,
        kernel,
        session_name=req.session,
        session_id=req.session_id,
        kernel_id=kernel.kernel_id,
        mode=req.mode,
        user_env={str(k): str(v) for k, v in req.env.items()},
        image_env=image_vars,
        deadline=kernel.labels.get(LABEL_DEADLINE),
        restart_count=kernel.labels.get(LABEL_RESTART_COUNT),
    )
    return {**image_vars, **toolkit, **share.gpus.get(kernel.hostname, ({}, {}))[1]}


def gpu_host_options(share: Share, kernel: PlannedKernel, docker: Any) -> dict:
    """create_host_config keyword arguments that give ``kernel`` exactly its GPUs."""
    options = dict(share.gpus.get(kernel.hostname, ({}, {}))[0])
    if options.get("device_requests"):
        options["device_requests"] = [
            docker.types.DeviceRequest(**request) for request in options["device_requests"]
        ]
    return options


def host_config(share: Share, kernel: PlannedKernel, docker: Any) -> Any:
    """The container's host config: limits, confinement, devices, mounts, its port."""
    req, cfg = share.req, share.cfg
    master = kernel.rank == 0
    binds = [
        f"{share.sources[m['src']]}:{m['dst']}:{'ro' if m.get('readonly') else 'rw'}"
        for m in req.mounts
    ]
    extra = gpu_host_options(share, kernel, docker)
    if share.rdma:
        extra["devices"] = list(extra.get("devices") or []) + device_mappings(share.rdma)
    confinement = host_security(
        share.caps,
        no_new_privileges=cfg.no_new_privileges,
        pids_limit=cfg.pids_limit,
        devices=bool(list(kernel.gpu_devices) or share.rdma),
    )
    return share.docker.api.create_host_config(
        network_mode=req.network or None,
        init=True,
        nano_cpus=nano_cpus(kernel.resources),
        mem_limit=kernel.resources.mem,
        memswap_limit=kernel.resources.mem,
        shm_size=kernel.resources.shm_size,
        # A batch session's containers end with its command and never start again.
        restart_policy={"Name": "no" if req.job else cfg.restart_policy},
        ulimits=[docker.types.Ulimit(**u) for u in share.ulimits],
        binds=binds or None,
        port_bindings=(
            {port: (share.publish_address, share.port_range) for port in master_ports(share)}
            if master
            else None
        ),
        **confinement,
        **extra,
    )


def master_ports(share: Share) -> list[int]:
    """The ports main1 publishes (on the agent's publish address, in its port range):
    its sshd's and its apps' (session/apps.py), each reached only through the app proxy."""
    return [SSH_PORT, *(app.port for app in share.main_apps)]


def make(share: Share, kernel: PlannedKernel, env: dict[str, str], archive: bytes) -> str:
    """Create ``kernel``'s container (recorded in share.created) and copy its files in."""
    import docker

    req = share.req
    api = share.docker.api
    master = kernel.rank == 0
    network = req.network
    config = host_config(share, kernel, docker)
    networking = None
    if network:
        networking = api.create_networking_config(
            {network: api.create_endpoint_config(aliases=[kernel.hostname])}
        )
    created = api.create_container(
        kernel.image,
        name=kernel.container_name,
        hostname=kernel.hostname,
        environment=[f"{key}={value}" for key, value in env.items()],
        labels={
            **kernel.labels,
            LABEL_AGENT_ID: share.identity,
            **share.ledger_label,
            **({LABEL_APPS: apps.render_label(req.apps)} if master and req.apps else {}),
        },
        host_config=config,
        networking_config=networking,
        ports=master_ports(share) if master else None,
        # A batch session: the job runner, which starts the image's entrypoint beside it.
        entrypoint=[job.RUNNER] if req.job else None,
        command=[kinds.MAIN if master else kinds.MEMBER] if req.job else None,
        detach=True,
        use_config_proxy=False,
    )
    cid = created["Id"]
    with share.lock:
        share.created.append(cid)
    if not api.put_archive(cid, "/opt/bai", archive):
        raise Failure(f"could not copy the session keys into {kernel.container_name}")
    if req.job and not api.put_archive(cid, "/opt/bai", job_runner(share, kernel)):
        raise Failure(f"could not copy the job runner into {kernel.container_name}")
    # People's public keys (option authorized_keys), beside the session key.
    if req.authorized_keys and not api.put_archive(
        cid, "/home/work/.ssh", authorized_keys_tar(req.authorized_keys)
    ):
        raise Failure(f"could not copy authorized_keys into {kernel.container_name}")
    return cid


def job_runner(share: Share, kernel: PlannedKernel) -> bytes:
    """A batch session's runner for ``kernel`` (job.runner_tar): main1 runs the
    command in the first data folder and watches every member; a member watches
    main1."""
    req = share.req
    spec = req.job or {}
    hosts = [k.hostname for k in sorted(req.kernels, key=lambda k: k.rank)]
    main = kernel.rank == 0
    return job.runner_tar(
        main=main,
        command=str(spec.get("command") or ""),
        workdir=str(req.mounts[0]["dst"]) if req.mounts else "/home/work",
        peers=hosts[1:] if main else hosts[:1],
        grace_s=int(spec.get("grace_s") or job.DEFAULT_GRACE_S),
    )
