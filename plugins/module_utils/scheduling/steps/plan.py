"""Planning a create: what ``spec`` means on the agents as they are now.

``plan_session`` combines the spec, the agents' capacity and any containers already
carrying the session's name into the kernels, their placement, labels and network, or
refuses (``SessionConflict``) when the name is taken by something else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    Pending,
    SessionConflict,
    SpecError,
)
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_AGENT,
    LABEL_BATCH,
    LABEL_CPU,
    LABEL_END_SIGNAL,
    LABEL_GPU,
    LABEL_GPU_DEVICES,
    LABEL_HOST,
    LABEL_IDX,
    LABEL_KERNEL_ID,
    LABEL_LIFETIME,
    LABEL_MEM,
    LABEL_MODE,
    LABEL_OWNER,
    LABEL_RESOURCE_GROUP,
    LABEL_ROLE,
    LABEL_SESSION,
    LABEL_SESSION_ID,
    LABEL_SIZE,
    LABEL_SPEC_HASH,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.container_row import (
    ContainerRow,
)
from ansible_collections.bai.cluster.plugins.module_utils.gpu.alloc import (
    format_device_label,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_read import (
    AgentRead,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import (
    AGENT_NUMBERS,
    Agent,
    OutOfService,
    PlacementRequest,
    Stock,
    agent_from_read,
    agent_of,
    assign_gpu_devices,
    place,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.request import (
    TopologyAsk,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.existing import (
    existing_gpu_devices,
    published_ssh_port,
    read_existing,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.kinds import (
    MAIN,
    MEMBER,
    TYPE_BATCH,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import (
    Kernel,
    PlannedKernel,
    SessionSpec,
    format_cpu,
    with_shm,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.naming import (
    container_name,
    kernel_id,
    network_name,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.plan import (
    CREATE,
    EXISTS,
    NetworkPlan,
    SessionPlan,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    expand_kernels,
    spec_hash,
)


def session_labels(spec: SessionSpec, *, session_id: str) -> dict[str, str]:
    """Labels for every object of a session (networks, secrets, containers)."""
    labels = {
        LABEL_SESSION: spec.name,
        LABEL_SESSION_ID: session_id,
        LABEL_SPEC_HASH: spec_hash(spec),
        LABEL_RESOURCE_GROUP: spec.resource_group,
    }
    if spec.owner:
        labels[LABEL_OWNER] = spec.owner
    if spec.lifetime_s:
        labels[LABEL_LIFETIME] = str(spec.lifetime_s)
    if spec.end_signal:
        labels[LABEL_END_SIGNAL] = spec.end_signal
    return labels


def container_labels(
    spec: SessionSpec,
    kernel: Kernel,
    *,
    session_id: str,
    kernel_id: str,
    mode: str,
    gpu_devices: Sequence[int] = (),
    agent: str | None = None,
) -> dict[str, str]:
    """Labels for one container; LABEL_CPU/MEM/GPU are what ``used_from_labels`` reads
    back, so placement needs no state file. ``mode`` is the mode as placed;
    ``gpu_devices`` the agent's GPU device indices the container is given
    (LABEL_GPU_DEVICES, "" for none: placement reads which devices are taken)."""
    labels = session_labels(spec, session_id=session_id)
    labels.update(
        {
            LABEL_ROLE: kernel.role,
            LABEL_IDX: str(kernel.idx),
            LABEL_HOST: kernel.hostname,
            LABEL_KERNEL_ID: kernel_id,
            LABEL_MODE: mode,
            LABEL_SIZE: str(spec.size),
            LABEL_CPU: format_cpu(kernel.resources.cpu),
            LABEL_MEM: str(kernel.resources.mem),
            LABEL_GPU: str(kernel.resources.gpu),
            LABEL_GPU_DEVICES: format_device_label(gpu_devices),
        }
    )
    if agent is not None:
        labels[LABEL_AGENT] = agent
    if spec.type == TYPE_BATCH:
        labels[LABEL_BATCH] = MAIN if kernel.rank == 0 else MEMBER
    return labels


def network_plan(spec: SessionSpec, agents_used: Sequence[str], *, session_id: str) -> NetworkPlan:
    """The session network (docs/networks.md): a bridge when every container is on one
    agent (a size-1 session too: on its own network it reaches no other session, whatever
    the engine's default bridge allows), an attachable overlay when they are spread."""
    return NetworkPlan(
        network_name(spec.name),
        "bridge" if len(agents_used) <= 1 else "overlay",
        session_labels(spec, session_id=session_id),
    )


NOTHING_KNOWN = Stock()


def plan_session(
    spec: SessionSpec,
    agents: Sequence[Agent],
    existing: Sequence[ContainerRow] = (),
    *,
    inventory: Mapping[str, Stock] | None = None,
    out_of_service: Sequence[OutOfService] = (),
    session_id: str | None = None,
    topology: TopologyAsk | None = None,
) -> SessionPlan:
    """Decide what creating ``spec`` means now. Pure: the caller supplies the agents
    (capacity and use), the containers of this session name found on them
    (``existing``: their rows, with agent, name, state, image and labels) and, optionally,
    per agent which images and mount sources it has (``inventory``: agent -> Stock).

    Returns the :class:`SessionPlan` (session/plan.py says what each field means).

    ``session_id``: the id a created session keeps (a batch session's gang starting
    again, scheduling/steps/restarts.py); a fresh one when None. ``topology``: what it
    keeps to of its topology now (a preferred level widened, a restart's last agents).

    Raises ``SessionConflict`` if the name is taken by containers of another spec or
    an incomplete session, ``Pending`` if it does not fit now, ``SpecError`` if an
    image or mount source is missing on a chosen agent.
    """
    kernels = expand_kernels(spec)
    if existing:
        kernel_ids, assignment, mode = read_existing(spec, kernels, existing)
        gpu_devices = existing_gpu_devices(existing)
        action = EXISTS
    else:
        request = PlacementRequest.of(spec, kernels, topology)
        placement = place(request, agents, out_of_service=out_of_service)
        assignment, mode = placement.assignment, placement.mode
        gpu_devices = assign_gpu_devices(kernels, assignment, agents)
        kernel_ids = {k.hostname: kernel_id() for k in kernels}
        if session_id:
            kernel_ids[kernels[0].hostname] = session_id
        _check_inventory(spec, kernels, assignment, inventory or {})
        action = CREATE
    session_id = kernel_ids[kernels[0].hostname]
    used = list(dict.fromkeys(assignment[k.hostname] for k in kernels))
    planned = _planned_kernels(spec, kernels, kernel_ids, assignment, gpu_devices, mode)
    return SessionPlan(
        action=action,
        ready=action == EXISTS and all(c.state == "running" for c in existing),
        ssh_port=published_ssh_port(existing, session_id),
        session_id=session_id,
        mode=mode,
        spec=spec,
        spec_hash=spec_hash(spec),
        network=network_plan(spec, used, session_id=session_id),
        agents=tuple(used),
        kernels=tuple(planned),
    )


def _planned_kernels(
    spec: SessionSpec,
    kernels: Sequence[Kernel],
    kernel_ids: Mapping[str, str],
    assignment: Mapping[str, str],
    gpu_devices: Mapping[str, Sequence[int]],
    mode: str,
) -> list[PlannedKernel]:
    """Each kernel as the plan gives it to its agent: ids, container name, GPUs, labels."""
    session_id = kernel_ids[kernels[0].hostname]
    planned = []
    for kernel in kernels:
        kid = kernel_ids[kernel.hostname]
        devices = tuple(gpu_devices.get(kernel.hostname, ()))
        agent = assignment[kernel.hostname]
        labels = container_labels(
            spec,
            kernel,
            session_id=session_id,
            kernel_id=kid,
            mode=mode,
            gpu_devices=devices,
            agent=agent,
        )
        planned.append(
            PlannedKernel.placed(
                replace(kernel, resources=with_shm(kernel.resources)),
                agent=agent,
                kernel_id=kid,
                container_name=container_name(spec.name, kernel.hostname),
                gpu_devices=devices,
                labels=labels,
            )
        )
    return planned


def placement_failure(name: str, exc: Pending | SessionConflict | SpecError) -> dict[str, Any]:
    """What a module's ``fail_json`` reports when ``plan_session`` refuses session ``name``:
    PENDING (``pending``, and ``permanent`` when waiting cannot help), the name taken by
    another session (``conflict``), or a spec the agents cannot hold. bai_session_plan and
    bai_session_ledger report it alike; plugins/doc_fragments/placement.py documents the
    keys, and bai_cli/errors.py reads them."""
    if isinstance(exc, Pending):
        return {"msg": f"session {name}: {exc}", "pending": True, "permanent": exc.permanent}
    if isinstance(exc, SessionConflict):
        return {"msg": str(exc), "conflict": True}
    return {"msg": f"session {name}: {exc}; nothing was created"}


def _check_inventory(
    spec: SessionSpec,
    kernels: Sequence[Kernel],
    assignment: Mapping[str, str],
    inventory: Mapping[str, Stock],
) -> None:
    """Fail before anything is made if a chosen agent lacks an image or a mount source."""
    problems = []
    seen = set()
    for kernel in kernels:
        agent = assignment[kernel.hostname]
        key = (agent, kernel.image)
        if inventory.get(agent, NOTHING_KNOWN).lacks_image(kernel.image) and key not in seen:
            seen.add(key)
            problems.append(
                f"image {kernel.image} not on agent {agent} (no registry is used: "
                f"build it with playbooks/image_build.yml or load it with docker "
                f"save/load)"
            )
    for agent in dict.fromkeys(assignment.values()):
        stock = inventory.get(agent, NOTHING_KNOWN)
        for i, mount in enumerate(spec.mounts):
            if stock.lacks_path(mount.src):
                problems.append(
                    f"mounts[{i}].src: {mount.src} does not exist on agent {agent}; "
                    f"create the data folder there first"
                )
    if problems:
        raise SpecError("; ".join(problems))


def agents_from_info(
    agents: Sequence[Mapping[str, Any]] | None,
    existing: Sequence[Mapping[str, Any]] | None,
    agent_info: Sequence[Mapping[str, Any]] | None,
) -> tuple[list[Agent] | None, list[ContainerRow], dict[str, Stock]]:
    """Agents, the containers of the session found on them and per-agent inventory
    (images, paths), from bai_session_plan's ``agents``/``existing`` options (the agents
    first) and the registered results of bai_agent_info (``agent_info``). Agents is None
    when neither ``agents`` nor ``agent_info`` is given (validation only)."""
    rows = [ContainerRow.of(row) for row in existing or ()]
    if agents is None and agent_info is None:
        return None, rows, {}
    found: list[Agent] = []
    inventory: dict[str, Stock] = {}
    for i, raw in enumerate(agents or ()):
        found.append(agent_from_read(raw, f"agents[{i}]"))
        inventory[str(raw["name"])] = Stock(
            {str(k): bool(v) for k, v in (raw.get("images") or {}).items()},
            {str(k): bool(v) for k, v in (raw.get("paths") or {}).items()},
        )
    reads = [AgentRead.of(r) for r in agent_info or [] if not r.get("skipped")]
    read, rows, stock = agents_from_reads(reads, rows, first=len(found))
    inventory.update(stock)
    return found + read, rows, inventory


def agents_from_reads(
    reads: Sequence[AgentRead],
    existing: Sequence[ContainerRow] = (),
    *,
    first: int = 0,
    labels: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[list[Agent], list[ContainerRow], dict[str, Stock]]:
    """Placement's agents of the agents' reads, the session's containers the reads show
    (after ``existing``) and per-agent inventory (images, paths). ``first``: the index of
    the first read among all the agents, for a message (``agents[N]``). ``labels``: an
    agent's labels by name (the inventory's topology), in place of its read's."""
    labels = labels or {}
    found: list[Agent] = []
    inventory: dict[str, Stock] = {}
    found_existing = list(existing)
    for i, read in enumerate(reads, start=first):
        state = read.agent
        found.append(
            agent_of(
                f"agents[{i}]",
                state,
                name=state.name,
                group=state.group,
                numbers=[getattr(state, key) for key in AGENT_NUMBERS],
                gpu_devices=state.gpu_devices,
                gpu_in_use=state.gpu_in_use,
                labels=labels.get(state.name, state.extra.get("labels")),
            )
        )
        inventory[str(state.name)] = Stock(
            {str(ref): bool(seen.get("present")) for ref, seen in read.images.items()},
            {str(path): bool(known) for path, known in read.paths.items()},
        )
        found_existing.extend(read.containers)
    return found, found_existing, inventory
