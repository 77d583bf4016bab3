"""One agent's share of a cluster session: its containers, made or removed.

The lifecycle behind plugins/modules/bai_session_containers.py, which only reads its
options into a :class:`Request` (the session, as the plan gave it) and :class:`Settings`
(this agent's), and reports what :class:`AgentShare` did:

- ``present``: sort what exists (create, start, keep); check images, mount sources,
  network and keys before anything is made; GPUs and the agent's offer; admission under
  the engine's lock; create in parallel (copying the keys in), each container started as
  soon as it is made; wait for sshd; the health gate (its first check: SSH from main1 to
  every container). Any failure removes what the
  call created (``failure``).
- ``absent``: remove the session's containers (and its local networks) on this agent.

Each phase has its module beside this one (share: the types and the state the phases
share; prechecks; admit; create; readiness; gate; removal); :class:`AgentShare` runs them
in order. The Docker client and the host (check mode, warnings, commands) are given to
it, so the unit tests drive it with stand-ins.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Optional

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    Busy,
    Failure,
    SpecError,
)
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import LABEL_LEDGER
from ansible_collections.bai.cluster.plugins.module_utils.common.ports import (
    parse_port_range,
    range_text,
)
from ansible_collections.bai.cluster.plugins.module_utils.containers import (
    admit,
    create,
    gate,
    prechecks,
    readiness,
    removal,
)
from ansible_collections.bai.cluster.plugins.module_utils.containers.prechecks import limits_ceiling
from ansible_collections.bai.cluster.plugins.module_utils.containers.share import (
    Host,
    Request,
    Settings,
    Share,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    error_text,
    parallel,
    session_containers,
)
from ansible_collections.bai.cluster.plugins.module_utils.gpu.facts import detect
from ansible_collections.bai.cluster.plugins.module_utils.gpu.probe import HostProbe
from ansible_collections.bai.cluster.plugins.module_utils.network import isolation
from ansible_collections.bai.cluster.plugins.module_utils.network.rdma import rdma_devices
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import admission
from ansible_collections.bai.cluster.plugins.module_utils.session import apps
from ansible_collections.bai.cluster.plugins.module_utils.session.model import PlannedKernel
from ansible_collections.bai.cluster.plugins.module_utils.session.security import (
    capabilities,
    host_security,
    ulimits,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import SSH_PORT
from ansible_collections.bai.cluster.plugins.module_utils.session.ssh_keys import session_tar

Plans = list[tuple[PlannedKernel, dict[str, str]]]


class AgentShare(Share):
    """This agent's share of one session, and how to make it."""

    def __init__(self, module: Host, docker_: Any, request: Request, settings: Settings) -> None:
        self.module = module
        self.docker = docker_
        self.req = request
        self.cfg = settings
        self.mine = [k for k in request.kernels if k.agent == request.agent]
        if not self.mine:
            raise Failure(
                f"kernels: no container of session {request.session} is placed on agent "
                f"{request.agent} (the plan places them on "
                f"{', '.join(sorted({k.agent for k in request.kernels})) or 'no agent'}); pass "
                f"plan.kernels and one of its agents; nothing was changed"
            )
        if request.mesh_check and not any(k.rank == 0 for k in self.mine):
            raise Failure(
                f"mesh_check runs from the master, which the plan places on agent "
                f"{next((k.agent for k in request.kernels if k.rank == 0), '?')}, not on "
                f"{request.agent}; nothing was changed"
            )
        self.created, self.network_made, self.lock = [], False, threading.Lock()
        self.gpus, self.sources = {}, {}
        try:
            self.port_range = range_text(parse_port_range(self.cfg.port_range, "port_range"))
            self.caps = capabilities(self.cfg.capabilities)
            host_security(self.caps, pids_limit=self.cfg.pids_limit)
            self.ulimits, self.limit_warnings = ulimits(
                memlock=self.cfg.memlock, nofile=self.cfg.nofile, ceiling=limits_ceiling()
            )
        except SpecError as exc:
            raise Failure(f"{exc}; nothing was changed") from None
        self.publish_address = "0.0.0.0"
        self.image_apps, self.main_apps = {}, ()
        ids = self.req.ledger_ids or []
        self.ledger_label = {LABEL_LEDGER: ids[0]} if ids and ids[0] else {}
        self.identity, self.engine_id = "", ""
        self.rdma = rdma_devices() if self.cfg.rdma else []

    def present(self) -> dict:
        create_, start, _keep = prechecks.sort_existing(self)
        result = {
            "created": [k.container_name for k in create_],
            "restarted": [c["name"] for _kernel, c in start],
            "removed": [],
        }
        if not create_ and not start:
            if self.req.mesh_check and not self.module.check_mode:
                result.update(gate.check(self))
            return {"changed": False, **result, **self.report()}
        plans, offer = self.prepare(create_, start)
        made = create.ensure_network(self) if create_ else None
        if made is not None:
            result["network"] = made["network"]
        if self.module.check_mode:
            return {"changed": True, **result, **self.report()}
        since = int(time.time())
        outcomes, started = self.make_all(create_, start, plans, offer)
        readiness.check_outcomes(self, result["created"], outcomes, "create")
        pairs = [(c["id"], kernel.image) for kernel, c in start]
        started += parallel(lambda pair: readiness.start(self, *pair), pairs, self.cfg.workers)
        readiness.check_outcomes(self, result["created"] + result["restarted"], started, "start")
        targets: list[tuple[str, str, Optional[int]]] = [
            (name, cid, None) for name, cid in zip(result["created"], outcomes)
        ]
        targets += [(c["name"], c["id"], since) for _kernel, c in start]
        readiness.wait_ssh(self, targets, since)
        if self.req.mesh_check:
            result.update(gate.check(self))
        return {"changed": True, **result, **self.report()}

    def prepare(self, create_: list[PlannedKernel], start: list) -> tuple[Plans, admission.Offer]:
        """Every check before anything is made, and a first admission, without the lock: a
        session this agent refuses makes nothing (not even its network)."""
        unguarded = isolation.table_problem(self.module, self.req.agent)
        if unguarded:
            raise Failure(
                f"cannot start session {self.req.session}: {unguarded}; nothing was created"
            )
        envs = prechecks.precheck(self, create_) if create_ else {}
        for warning in self.limit_warnings if create_ else []:
            self.module.warn(warning)
        facts = detect(HostProbe(module=self.module))
        prechecks.gpu_setup(self, create_, facts)
        offer = admit.offer(self, facts)
        if any(k.rank == 0 for k in create_):
            self.publish_address = prechecks.find_publish_address(self)
        try:
            plans = [(k, create.environment(self, k, envs[k.image])) for k in create_]
            main = [k for k in create_ if k.rank == 0]
            if main:
                self.main_apps = apps.merged(self.image_apps[main[0].image], self.req.apps)
        except SpecError as exc:
            raise Failure(f"session {self.req.session}: {exc}; nothing was created") from None
        admit.admit(self, create_, start, offer)
        return plans, offer

    def make_all(
        self, create_: list, start: list, plans: Plans, offer: admission.Offer
    ) -> tuple[list, list]:
        """Admit again and create, under the engine's lock (the one look that counts):
        made under it, the next admission counts them. Each container starts as soon as
        it is made, beside the creates still running (a start adds nothing that admission
        counts, so it needs no lock): the create and the start outcomes, in order, once
        every start has returned."""
        archive = session_tar(self.req.keypair or {}) if create_ else b""
        workers = max(1, min(self.cfg.workers, len(plans)))
        try:
            with ThreadPoolExecutor(workers) as starting:
                with admit.admission_lock(self):
                    admit.admit(self, create_, start, offer)
                    made = parallel(
                        lambda item: self._made(item, archive, starting), plans, workers
                    )
                outcomes = [m if isinstance(m, Exception) else m[0] for m in made]
                started = [m if isinstance(m, Exception) else _outcome(m[1]) for m in made]
        except Busy:
            raise Failure(
                f"agent {self.req.agent}: the admission lock of its engine stayed taken for "
                f"{self.cfg.lock_timeout} s (another create holds it; if none runs, a stuck "
                f"process on this agent does); nothing was created"
            ) from None
        return outcomes, started

    def _made(self, item: tuple, archive: bytes, starting: ThreadPoolExecutor) -> tuple:
        """Create one container and hand its start to ``starting``: (id, start future)."""
        kernel, env = item
        cid = create.make(self, kernel, env, archive)
        return cid, starting.submit(readiness.start, self, cid, kernel.image)

    def report(self) -> dict:
        found = {
            c["name"]: c
            for c in session_containers(self.docker.api, self.req.session, self.req.agent)
        }
        containers, ssh_port = [], None
        for kernel in self.mine:
            item = found.get(kernel.container_name, {})
            ports = item.get("ports", [])
            if kernel.rank == 0:
                ssh_port = next(
                    (p["host_port"] for p in ports if p["container_port"] == SSH_PORT), None
                )
            containers.append(
                {
                    "name": kernel.container_name,
                    "id": item.get("id"),
                    "host": kernel.hostname,
                    "role": kernel.role,
                    "idx": kernel.idx,
                    "kernel_id": kernel.kernel_id,
                    "agent": self.req.agent,
                    "state": item.get("state", "planned"),
                    "ports": ports,
                }
            )
        return {"containers": containers, "ssh_port": ssh_port}


def failure(share: Optional[AgentShare], exc: Exception) -> str:
    """The message of a failed call (a Failure or a Docker error), once what the call
    had made is removed again."""
    msg = str(exc) if isinstance(exc, Failure) else f"Docker error: {error_text(exc)}"
    if share is not None and (share.created or share.network_made):
        leftovers = removal.cleanup(share)
        made = [f"the {len(share.created)} container(s)"] if share.created else []
        made += [f"network {share.req.network}"] if share.network_made else []
        msg += f"; removed {' and '.join(made)} this run had made"
        if leftovers:
            msg += f" (except: {'; '.join(leftovers)})"
    return msg


def _outcome(future: Future) -> Any:
    """A start's outcome: None, or the exception it raised (as ``parallel`` gives)."""
    error = future.exception()
    return error if error is not None else future.result()
