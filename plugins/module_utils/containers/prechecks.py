"""What is checked before anything of a session is made on an agent: what exists there
already, the images, mount sources, network and keys, the GPUs the plan gave, the
publish address, and the agent's own resource limits.

    sort_existing(share)           kernels to create, containers to start and to keep
    precheck(share, create)        images, mounts, network, keys; the images' ENV
    check_mounts(share)            the mount policy, here on the agent
    gpu_setup(share, create, facts) each container's GPU options and variables
    find_publish_address(share)    where the master's port is published
    limits_ceiling()               the agent's hard limits when it cannot raise them
    file_kind(path)                directory, file, socket, ...
"""

from __future__ import annotations

import os
import stat
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.addresses import read_addresses
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    Failure,
    GpuError,
    SpecError,
)
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_KERNEL_ID,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.containers.share import Share
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    find_network,
    image_config,
    in_swarm,
    session_containers,
)
from ansible_collections.bai.cluster.plugins.module_utils.gpu.alloc import format_device_label
from ansible_collections.bai.cluster.plugins.module_utils.gpu.common import VENDOR_NONE
from ansible_collections.bai.cluster.plugins.module_utils.gpu.options import (
    docker_gpu_options,
    gpu_env,
)
from ansible_collections.bai.cluster.plugins.module_utils.session import apps
from ansible_collections.bai.cluster.plugins.module_utils.session.env import parse_image_env
from ansible_collections.bai.cluster.plugins.module_utils.session.model import PlannedKernel
from ansible_collections.bai.cluster.plugins.module_utils.session.mounts import (
    data_roots,
    resolved_source_error,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.security import publish_address
from ansible_collections.bai.cluster.plugins.module_utils.session.ssh_keys import SESSION_KEY_FILES

Found = list[tuple[PlannedKernel, dict[str, Any]]]


def sort_existing(share: Share) -> tuple[list[PlannedKernel], Found, Found]:
    """(kernels to create, [(kernel, container)] to start, [(kernel, container)] to keep)."""
    req = share.req
    api = share.docker.api
    ours = {c["name"]: c for c in session_containers(api, req.session, req.agent)}
    names = [k.container_name for k in share.mine]
    taken = api.containers(all=True, filters={"name": [f"^/{n}$" for n in names]})
    foreign = sorted({c["Names"][0].lstrip("/") for c in taken} - set(ours) & set(names))
    if foreign:
        raise Failure(
            f"container name(s) {', '.join(foreign)} already used by containers that are "
            f"not part of session {req.session} on agent {req.agent}; remove "
            f"or rename them"
        )
    create: list[PlannedKernel] = []
    start: Found = []
    keep: Found = []
    for kernel in share.mine:
        found = ours.get(kernel.container_name)
        if found is None:
            create.append(kernel)
            continue
        labels = found["labels"]
        if (
            labels.get(LABEL_KERNEL_ID) != kernel.kernel_id
            or labels.get(LABEL_SESSION_ID) != req.session_id
        ):
            raise Failure(
                f"container {found['name']} on agent {req.agent} belongs to another "
                f"instance of session {req.session} (session id "
                f"{labels.get(LABEL_SESSION_ID)}); nothing was changed; destroy that "
                f"session first"
            )
        if req.job and found["state"] in ("exited", "dead"):
            raise Failure(
                f"batch session {req.session} has ended ({found['name']} on agent "
                f"{req.agent} is {found['state']}): it does not start again; destroy "
                f"it (its output is kept: bai-cluster session logs) and run it anew"
            )
        (keep if found["state"] == "running" else start).append((kernel, found))
    return create, start, keep


def precheck(share: Share, create: list[PlannedKernel]) -> dict[str, dict[str, str]]:
    """Images, mount sources, network, keys: all checked before anything is made.
    Returns the ENV of each image needed."""
    req = share.req
    api = share.docker.api
    agent = req.agent
    problems, envs = [], {}
    for image in dict.fromkeys(k.image for k in create):
        found = image_config(api, image)
        if found is None:
            problems.append(
                f"image {image} not on agent {agent} (no registry is used: build it with "
                f"playbooks/image_build.yml or load it with docker save/load)"
            )
            continue
        envs[image] = parse_image_env(list(found.get("Env") or []))
        try:
            label = (found.get("Labels") or {}).get(apps.SERVICE_PORTS_LABEL)
            share.image_apps[image] = apps.parse_service_ports(label)
        except SpecError as exc:
            problems.append(f"image {image}: {exc}")
    problems += check_mounts(share)
    network = req.network
    if (
        network
        and not req.network_spec
        and not share.module.check_mode
        and find_network(api, network) is None
        and not in_swarm(api)
    ):
        # A swarm worker sees an attachable overlay only once a container joins it
        # (Docker asks the managers at create time), so only a plain engine can tell.
        problems.append(
            f"network {network} does not exist on agent {agent}; create it first "
            f"(bai_session_network)"
        )
    keypair = req.keypair or {}
    missing = [key for key in SESSION_KEY_FILES.values() if not keypair.get(key)]
    if missing:
        problems.append(
            f"keypair: {', '.join(missing)} missing; pass bai_session_keypair's keypair "
            f"to create containers"
        )
    _refuse_creating(share, problems)
    return envs


def _refuse_creating(share: Share, problems: list[str]) -> None:
    if problems:
        raise Failure(
            f"cannot create session {share.req.session} on agent {share.req.agent}: "
            + "; ".join(problems)
            + "; nothing was created"
        )


def check_mounts(share: Share) -> list[str]:
    """The mount policy, here on the agent: each source exists, and lies under a data
    root as given and once resolved. Fills share.sources (src -> resolved path)."""
    agent = share.req.agent
    problems = []
    try:
        roots = [os.path.realpath(root) for root in data_roots(share.cfg.data_roots)]
    except SpecError as exc:
        return [f"{exc} (agent {agent})"]
    for i, mount in enumerate(share.req.mounts):
        src = str(mount.get("src") or "")
        where = f"mounts[{i}].src"
        if not src.startswith("/") or not os.path.lexists(src):
            problems.append(
                f"{where}: {src} does not exist on agent {agent}; create the data "
                f"folder there first"
            )
            continue
        real = os.path.realpath(src)
        problem = resolved_source_error(src, real, file_kind(real), roots, where)
        if problem:
            problems.append(problem)
        else:
            share.sources[src] = real
    return problems


def gpu_setup(share: Share, create: list[PlannedKernel], facts: dict) -> None:
    """Check, before anything is made, that this agent has the devices the plan gave
    the containers (``facts``: what ``detect`` found here), and work out each one's
    Docker options and GPU variables (share.gpus)."""
    vendor = str(facts.get("vendor") or VENDOR_NONE) if facts.get("count") else VENDOR_NONE
    agent = share.req.agent
    problems = []
    for kernel in create:
        devices = list(kernel.gpu_devices)  # as many as it asks for (PlannedKernel)
        options = {}
        if devices and vendor == VENDOR_NONE:
            why = facts.get("problem") or "no NVIDIA or AMD GPU was detected"
            problems.append(
                f"{kernel.hostname} was given GPU device(s) "
                f"{format_device_label(devices)} but {why} on agent {agent} (GPUs "
                f"declared in bai_agent_resources.gpu alone only count for placement); "
                f"converge the agent with site.yml (role gpu_runtime) or fix its driver"
            )
            continue
        if devices:
            try:
                options = docker_gpu_options(facts, devices, method=share.cfg.gpu_method)
            except GpuError as exc:
                problems.append(f"{kernel.hostname}: {exc}")
                continue
        share.gpus[kernel.hostname] = (options, gpu_env(vendor, len(devices)))
    _refuse_creating(share, problems)


def find_publish_address(share: Share) -> str:
    """O(publish_address), else this agent's address in O(publish_network)."""
    explicit, network = share.cfg.publish_address, share.cfg.publish_network
    addresses: list[str] = []
    if network and not explicit:
        rc, out, err = share.module.run_command(["ip", "-o", "-4", "addr", "show"])
        if rc != 0:
            raise Failure(
                f"cannot read the addresses of agent {share.req.agent} (ip addr: "
                f"{err.strip()}); set publish_address; nothing was created"
            )
        addresses = read_addresses(out)
    try:
        return publish_address(explicit, network, addresses)
    except SpecError as exc:
        raise Failure(f"agent {share.req.agent}: {exc}; nothing was created") from None


def limits_ceiling() -> dict[str, int] | None:
    """This agent's own hard limits (bytes for memlock, -1 for none) when it cannot raise
    them - CAP_SYS_RESOURCE (bit 24) missing from the bounding set, as on some VMs and in
    unprivileged Docker-in-Docker nodes; then the engine cannot grant more either. None
    when it can."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            bounding = next(line for line in status if line.startswith("CapBnd:"))
    except (OSError, StopIteration):
        return None
    if int(bounding.split()[1], 16) & (1 << 24):
        return None
    import resource

    def hard(kind: int) -> int:
        value = resource.getrlimit(kind)[1]
        return -1 if value == resource.RLIM_INFINITY else value

    return {"memlock": hard(resource.RLIMIT_MEMLOCK), "nofile": hard(resource.RLIMIT_NOFILE)}


def file_kind(path: str) -> str:
    """What ``path`` is on this agent: directory, file, socket, device, ..."""
    mode = os.stat(path).st_mode
    for test, kind in (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISREG, "file"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISFIFO, "named pipe"),
    ):
        if test(mode):
            return kind
    return "special file"
