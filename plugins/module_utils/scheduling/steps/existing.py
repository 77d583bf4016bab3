"""A session already there (scheduling/steps/plan.py): what its containers' labels say of
it, whether they are the session asked for, and how a PENDING or a conflict names them."""

from __future__ import annotations

from collections.abc import Sequence

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    SessionConflict,
)
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_CPU,
    LABEL_GPU,
    LABEL_GPU_DEVICES,
    LABEL_HOST,
    LABEL_IDX,
    LABEL_KERNEL_ID,
    LABEL_MEM,
    LABEL_MODE,
    LABEL_RESOURCE_GROUP,
    LABEL_ROLE,
    LABEL_SESSION_ID,
    LABEL_SPEC_HASH,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.container_row import (
    ContainerRow,
)
from ansible_collections.bai.cluster.plugins.module_utils.gpu.alloc import (
    parse_device_label,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.capacity import (
    label_float,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import (
    Kernel,
    Resources,
    SessionSpec,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    SSH_PORT,
    describe_spec,
    spec_hash,
)


def published_ssh_port(existing: Sequence[ContainerRow], session_id: str) -> int | None:
    """The host port of the master's sshd, read from an existing master container."""
    for container in existing:
        if container.label(LABEL_KERNEL_ID) != session_id:
            continue
        for port in container.ports:
            if port.container_port == SSH_PORT and port.host_port:
                return port.host_port
    return None


def existing_gpu_devices(existing: Sequence[ContainerRow]) -> dict[str, list[int]]:
    """hostname -> GPU device indices, read back from the containers' labels."""
    return {
        str(c.label(LABEL_HOST)): parse_device_label(c.label(LABEL_GPU_DEVICES)) for c in existing
    }


def _destroy_hint(name: str) -> str:
    return (
        f"destroy it first (ansible-playbook playbooks/session_destroy.yml "
        f"-e session_name={name}) or choose another name"
    )


def read_existing(
    spec: SessionSpec,
    kernels: Sequence[Kernel],
    existing: Sequence[ContainerRow],
) -> tuple[dict[str, str], dict[str, str], str]:
    """Kernel ids, placement and mode of a session already on the agents, or raise
    ``SessionConflict`` when it is not exactly this spec and complete."""
    want = spec_hash(spec)
    hashes = {str(c.label(LABEL_SPEC_HASH)) for c in existing}
    if hashes != {want}:
        raise SessionConflict(
            f"session {spec.name!r} already exists with a different spec; nothing was "
            f"changed. Existing: {describe_existing(existing)}. Requested: "
            f"{describe_spec(spec)}. To replace it, {_destroy_hint(spec.name)}"
        )
    ids = {str(c.label(LABEL_SESSION_ID)) for c in existing}
    by_host: dict[str, ContainerRow] = {}
    for container in existing:
        host = str(container.label(LABEL_HOST))
        if host in by_host or len(ids) > 1:
            raise SessionConflict(
                f"session {spec.name!r} has containers of more than one attempt "
                f"(session ids {', '.join(sorted(ids))}); nothing was changed; "
                f"{_destroy_hint(spec.name)}"
            )
        by_host[host] = container
    missing = [k.hostname for k in kernels if k.hostname not in by_host]
    if missing:
        found = ", ".join(f"{h} on {c.agent}" for h, c in sorted(by_host.items()))
        raise SessionConflict(
            f"session {spec.name!r} exists but is incomplete (missing: "
            f"{', '.join(missing)}; found: {found}); nothing was changed; "
            f"{_destroy_hint(spec.name)}"
        )
    kernel_ids = {k.hostname: str(by_host[k.hostname].label(LABEL_KERNEL_ID)) for k in kernels}
    assignment = {k.hostname: str(by_host[k.hostname].agent) for k in kernels}
    master = by_host[kernels[0].hostname].labels
    mode = str(master.get(LABEL_MODE, spec.mode))
    if kernel_ids[kernels[0].hostname] != master.get(LABEL_SESSION_ID):
        raise SessionConflict(
            f"session {spec.name!r}: {kernels[0].hostname}'s kernel id is not the "
            f"session id; the labels were changed by hand; {_destroy_hint(spec.name)}"
        )
    return kernel_ids, assignment, mode


def describe_existing(existing: Sequence[ContainerRow]) -> str:
    """The same kind of line, read back from the containers' labels."""
    roles: dict[str, list[ContainerRow]] = {}
    ordered = sorted(
        existing,
        key=lambda c: (str(c.label(LABEL_ROLE)), label_float(str(c.label(LABEL_IDX)))),
    )
    for container in ordered:
        roles.setdefault(str(container.label(LABEL_ROLE)), []).append(container)
    parts = []
    for role, members in roles.items():
        labels = members[0].labels
        res = Resources(
            label_float(str(labels.get(LABEL_CPU))),
            int(label_float(str(labels.get(LABEL_MEM)))),
            int(label_float(str(labels.get(LABEL_GPU)))),
        )
        image = members[0].image or "?"
        parts.append(f"{role} x{len(members)} ({res.describe()}, image {image})")
    first = existing[0].labels
    agents = sorted({str(c.agent) for c in existing})
    return (
        f"{len(existing)} container(s): {'; '.join(parts)}; placed "
        f"{first.get(LABEL_MODE, '?')} on {', '.join(agents)}; resource group "
        f"{first.get(LABEL_RESOURCE_GROUP, '?')} (env, mounts and the requested mode "
        f"are compared through the spec hash)"
    )
