"""The agent's own admission of a session (docs/placement.md): what it offers, and
whether what a run creates and starts fits beside every other session container of its
slot on the engine, under the engine's admission lock.

    offer(share, facts)                    what this agent offers; fills share.identity
    admit(share, create, start, offer)     refuse (Failure, Refused) unless it fits
    admission_lock(share)                  the engine's lock (none in check mode)
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    Failure,
    GpuError,
    Refused,
    SpecError,
)
from ansible_collections.bai.cluster.plugins.module_utils.common.locks import locked
from ansible_collections.bai.cluster.plugins.module_utils.containers.share import Share
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import session_rows
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import availability
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_identity import (
    agent_identity,
    engine_identity,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import admission
from ansible_collections.bai.cluster.plugins.module_utils.session.model import PlannedKernel


def offer(share: Share, facts: dict) -> admission.Offer:
    """What this agent offers (O(resources), else the engine's), and who it is."""
    info = share.docker.api.info()
    try:
        share.engine_id = str(info.get("ID") or "")
        share.identity = agent_identity(engine_identity(info), share.cfg.agent_id)
        offered, gpus = admission.offer_of(share.cfg.resources, info, facts)
    except (SpecError, GpuError, ValueError) as exc:
        raise Failure(f"agent {share.req.agent}: {exc}; nothing was created") from None
    if gpus["warning"] and any(k.resources.gpu for k in share.mine):
        share.module.warn(f"agent {share.req.agent}: {gpus['warning']}")
    return offered


def admit(
    share: Share,
    create: list[PlannedKernel],
    start: list[tuple[PlannedKernel, dict[str, Any]]],
    offered: admission.Offer,
) -> None:
    """Refuse (Failure) unless what this run creates and starts fits on this agent
    beside every other session container of its slot on the engine, in any state."""
    req = share.req
    listed = session_rows(share.docker.api)
    others = admission.foreign(listed, req.ledger_ids or ())
    if others:
        raise Failure(
            f"agent {req.agent} ({share.identity}) refuses session "
            f"{req.session}: its engine runs {admission.foreign_text(others)}, not "
            f"by this one ({req.ledger_ids[0]}); two ledgers would give its "
            f"capacity out twice. {admission.ADOPT_ADVICE}; nothing was changed"
        )
    starting = {c["name"] for _kernel, c in start}
    mine = admission.holdings(listed, share.cfg.agent_id or "")
    admit_availability(share, mine)
    request = [h for h in mine if h.container in starting] + [
        admission.Holding(
            container=k.container_name,
            session=req.session,
            session_id=req.session_id,
            state="new",
            cpu=k.resources.cpu,
            mem=k.resources.mem,
            gpu_devices=k.gpu_devices,
        )
        for k in create
    ]
    held = [h for h in mine if h.container not in starting]
    decision = admission.admit(offered, held, request)
    if not decision.admitted:
        what = "created" if create else "changed"
        raise Refused(
            f"agent {req.agent} ({share.identity}) refuses session "
            f"{req.session}: {decision.reason}; nothing was {what}"
            + ("" if create else f"; {recreate_hint(req.session)}")
        )


def admit_availability(share: Share, mine: list[admission.Holding]) -> None:
    """Refuse (Refused) a new session on an agent its own record says is paused or
    drained; a session with containers here is admitted (a rerun repairs it)."""
    req, cfg = share.req, share.cfg
    try:
        own = availability.read_marker(cfg.state_dir).get(cfg.agent_id or "")
    except (OSError, ValueError) as exc:
        raise Failure(
            f"agent {req.agent}: cannot tell whether it is paused: {exc}; nothing was changed"
        ) from None
    there = any(h.session_id == req.session_id for h in mine)
    why = availability.admits(own, session_there=there)
    if why:
        raise Refused(
            f"agent {req.agent} ({share.identity}) refuses session "
            f"{req.session}: {why}; nothing was created"
        )


def admission_lock(share: Share) -> AbstractContextManager[Any]:
    """The engine's admission lock (none in check mode, which makes nothing)."""
    if share.module.check_mode:
        return nullcontext()
    cfg = share.cfg
    return locked(admission.lock_path(cfg.lock_dir, share.engine_id), cfg.lock_timeout)


def recreate_hint(session: str) -> str:
    return (
        f"destroy the session (playbooks/session_destroy.yml -e session_name={session}) "
        f"and create it again"
    )
