"""The Python API of bai-cluster: the CLI is a thin layer over these functions.

Each function runs one of the project's playbooks through ansible-runner
(:func:`bai_cli.runner.run_playbook`) and returns a dataclass, or raises
:class:`~bai_cli.errors.BaiClusterError` (``kind``, ``step``, ``task``, ``message``,
``exit_code``)::

    from bai_cli import api
    session = api.create_session("train", 3, resources={"cpu": 1, "mem": "1g"},
                                 inventory="inventories/local")
    print(session.session_id, [c.host for c in session.containers])
    api.destroy_session("train", inventory="inventories/local")

    rows, totals = api.list_agents(inventory="inventories/local")
    api.set_agent_availability("agent1", "pause", reason="driver upgrade")
    api.drain_agent("agent1", timeout_s=300)

``on_event`` (optional) receives every ansible-runner event as it happens; the CLI turns
them into progress lines with :mod:`bai_cli.progress`.
"""

from __future__ import annotations

import getpass
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_BATCH,
    LABEL_HOST,
    LABEL_IDX,
    LABEL_KERNEL_ID,
    LABEL_MODE,
    LABEL_OWNER,
    LABEL_ROLE,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.hosts import agent_view
from ansible_collections.bai.cluster.plugins.module_utils.network.appproxy import parse_route
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.availability import (
    AVAILABILITIES,
    describe,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.limits import (
    check_number,
    check_numbers,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import SSH_PORT as SSHD_PORT

from .errors import BaiClusterError, classify
from .runner import PlaybookResult, run_playbook

Event = Callable[[dict[str, Any]], None]

CREATE = "playbooks/session_create.yml"
DESTROY = "playbooks/session_destroy.yml"
RECONCILE = "playbooks/session_reconcile.yml"
SCHEDULE = "playbooks/session_schedule.yml"
LIST = "playbooks/session_list.yml"
SHOW = "bai_cli/playbooks/session_show.yml"
WAIT = "playbooks/session_wait.yml"
LOGS = "bai_cli/playbooks/session_logs.yml"
LAB = "playbooks/lab.yml"
SITE = "site.yml"
AGENT_LIST = "playbooks/agent_list.yml"
AGENT_AVAILABILITY = "playbooks/agent_availability.yml"
AGENT_DRAIN = "playbooks/agent_drain.yml"
AGENT_REMOVE = "playbooks/agent_remove.yml"
# How long a drain waits for the agent's sessions to end (agent_drain.yml's default).
DRAIN_TIMEOUT_S = 600
# The agent playbooks' request checks: failing one is bad input (exit code 2).

SSH_PORT = f"{SSHD_PORT}/tcp"
# The environment `session env` shows (docs/environment.md).
ENV_PREFIXES = ("BACKENDAI_", "MASTER_")
ENV_NAMES = ("TF_CONFIG",)


@dataclass
class Container:
    """One container of a session."""

    host: str
    role: str
    idx: int
    agent: str
    kernel_id: str
    container: str
    state: str | None = None
    image: str | None = None
    addresses: dict[str, str] = field(default_factory=dict)
    ports: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Session:
    """A session as create reports it (the ``bai_session`` summary) or show reads it."""

    name: str
    session_id: str
    mode: str
    network: str | None
    network_driver: str | None
    containers: list[Container]
    action: str | None = None
    ssh_port: int | None = None
    ssh_agent: str | None = None
    # The app proxy route to main1's sshd (roles/appproxy: host, address, port, ssh), if any.
    appproxy_route: dict[str, Any] | None = None
    # Containers a rerun of the create started again (they had stopped).
    restarted: list[str] = field(default_factory=list)
    # interactive, or batch (its command runs to its end: :class:`JobResult`).
    type: str = "interactive"
    # How Ansible reaches the agents (create: main1's; show: every agent and the app
    # proxy), for the commands the CLI runs there itself (``session ssh``, ``logs``).
    access: dict[str, Access] = field(default_factory=dict)
    # Who holds it (session_owner; show reads it from the labels, "" before owners).
    owner: str = ""
    # Seconds it may still run (its lifetime, from when it started running); show reads
    # it from the session ledger, None without a lifetime.
    time_left: float | None = None
    # A session PENDING in the session ledger's queue (create --queue, show): nothing of
    # it runs; its place in its resource group's queue (position), why it waits
    # (reason), resource_group, owner, size, submitted_at.
    pending: dict[str, Any] | None = None

    @property
    def size(self) -> int:
        return len(self.containers)

    def container(self, host: str | None = None) -> Container:
        """The container called ``host`` (default: the master, main1)."""
        if not host:
            master = [c for c in self.containers if c.kernel_id == self.session_id]
            if master or self.containers:
                return (master or self.containers)[0]
        for item in self.containers:
            if item.host == host:
                return item
        hosts = ", ".join(c.host for c in self.containers) or "none"
        raise BaiClusterError(
            "bad_input", f"session {self.name} has no host {host!r} (hosts: {hosts})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "size": self.size}

    @classmethod
    def from_summary(cls, data: Mapping[str, Any]) -> Session:
        """From session_create.yml's ``bai_session`` set_stats record."""
        if data.get("state") == "PENDING":  # queued (session_queue): nothing runs yet
            return cls(
                name=str(data.get("name")),
                session_id="",
                mode=str(data.get("mode") or ""),
                network=None,
                network_driver=None,
                containers=[],
                action="queued",
                type=str(data.get("type") or "interactive"),
                owner=str(data.get("owner") or ""),
                pending=dict(data),
            )
        return cls(
            name=str(data.get("name")),
            session_id=str(data.get("session_id")),
            mode=str(data.get("mode")),
            network=data.get("network"),
            network_driver=data.get("network_driver"),
            containers=[
                Container(
                    host=str(c.get("host")),
                    role=str(c.get("role")),
                    idx=int(c.get("idx") or 0),
                    agent=str(c.get("agent")),
                    kernel_id=str(c.get("kernel_id")),
                    container=str(c.get("container")),
                )
                for c in data.get("containers") or []
            ],
            action=data.get("action"),
            ssh_port=data.get("ssh_port"),
            ssh_agent=data.get("ssh_agent"),
            appproxy_route=data.get("appproxy") or None,
            restarted=[str(name) for name in data.get("restarted") or []],
            type=str(data.get("type") or "interactive"),
            access={
                host: Access(**{k: str(v) for k, v in info.items()})
                for host, info in (data.get("access") or {}).items()
            },
        )


@dataclass
class SessionRow:
    """One line of ``session list`` (bai_session_summary's row)."""

    name: str
    session_id: str
    size: int
    found: int
    running: int
    mode: str
    resource_group: str
    agents: list[str]
    hosts: list[str]
    state: str
    # The agents that did not answer, for a session whose state is "unreachable".
    unreachable: list[str] = field(default_factory=list)
    # A batch session: its state is running, ending or ended, and main1's exit code once
    # it has stopped (session show says how it ended).
    type: str = "interactive"
    exit_code: int | None = None
    # Who holds it (session_owner); "" for a session made before owners existed.
    owner: str = ""
    # Its lifetime (session_lifetime_s) and the seconds it may still run; 0 and None
    # without one.
    lifetime_s: int = 0
    time_left: float | None = None
    # A session PENDING in the queue (state PENDING): its place in its resource group's
    # queue, why it waits, and when it was submitted (the ledger's clock).
    position: int | None = None
    reason: str = ""
    submitted_at: float | None = None


@dataclass
class JobResult:
    """What a batch session's command came to (playbooks/session_wait.yml; the session
    ledger's record once the session is gone). ``state``: starting, running, ending, or
    one of the ends - succeeded, failed, cancelled, lost, timeout (its lifetime was up).
    ``failed``: the first member that
    failed (host, agent, exit_code, signal, oom_killed, why)."""

    name: str
    state: str
    exit_code: int | None = None
    signal: str | None = None
    failed: dict[str, Any] | None = None
    started: float | None = None
    ended: float | None = None
    reason: str = ""

    @property
    def exit_status(self) -> int:
        """The exit code ``session run`` exits with: the command's; 130 when it was
        cancelled; 1 when it failed without an exit code of its own (a member was lost)."""
        if self.state == "succeeded":
            return 0
        if self.state == "cancelled":
            return 130
        if self.exit_code and 0 < self.exit_code < 256:
            return int(self.exit_code)
        return 1

    @classmethod
    def from_data(cls, name: str, data: Mapping[str, Any]) -> JobResult:
        known = set(cls.__dataclass_fields__) - {"name"}
        return cls(name=name, **{k: v for k, v in data.items() if k in known})


@dataclass
class Destroyed:
    """What ``destroy`` removed."""

    name: str
    containers: list[str]
    networks: list[str]
    # A forced destroy: the agents whose part was left for reconcile (they did not answer).
    left_on: list[str] = field(default_factory=list)
    # A batch session: what its command came to (a destroy while it ran: cancelled).
    job: dict[str, Any] | None = None
    # It was PENDING in the queue: it left the queue, nothing of it ran.
    cancelled: bool = False
    # The scheduler pass that followed, while sessions are queued.
    schedule: Scheduled | None = None


@dataclass
class Reconciled:
    """What ``reconcile`` found and did (session names; ``remove``: one row per agent and
    session removed, with ``agent``, ``session``, ``session_id``, ``containers``)."""

    adopted: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    remove: list[dict[str, Any]] = field(default_factory=list)
    in_flight: list[str] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    spared: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    forsaken: list[str] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)
    # Batch sessions whose command had ended: destroyed, their output kept.
    ended: list[str] = field(default_factory=list)
    # Sessions whose lifetime was up: stopped (SIGTERM, then SIGKILL) and destroyed.
    lifetime_up: list[str] = field(default_factory=list)
    rebuilt: str | None = None
    ledger_ids: list[str] = field(default_factory=list)
    check: bool = False
    # The sessions still queued, and the scheduler pass run after the reconcile.
    waiting: int = 0
    schedule: Scheduled | None = None


@dataclass
class Scheduled:
    """What a scheduler pass did (``session schedule``; also run by destroy and
    reconcile while sessions are queued): the queued sessions it started, those whose
    start failed (name -> why), and the queue afterwards (rows as ``session list``
    gives PENDING sessions)."""

    started: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    queue: list[dict[str, Any]] = field(default_factory=list)
    runs: int = 0


@dataclass
class Access:
    """How Ansible reaches a host of the inventory (for the ssh command)."""

    connection: str
    host: str
    user: str = ""
    port: str = ""


@dataclass
class SessionDetails(Session):
    """``show``: the session with its containers' state, addresses, published ports,
    and how its agents (and the app proxy) are reached."""

    appproxy: str = ""
    env: dict[str, dict[str, str]] = field(default_factory=dict)
    # A batch session: what its command came to so far (or, once the session is gone and
    # ``containers`` is empty, how it ended, as the session ledger remembers it).
    job: dict[str, Any] | None = None

    @property
    def state(self) -> str:
        """The session's health, as session list says it of the containers found:
        running, degraded (some do not run), stopped (none runs) or absent."""
        states = [c.state for c in self.containers]
        running = states.count("running")
        if self.pending is not None:
            return "PENDING"
        if not states:
            return "absent"
        if running == len(states):
            return "running"
        return "stopped" if running == 0 else "degraded"

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "state": self.state}


@dataclass
class PlaybookSummary:
    """``lab`` and ``site``: per-host counts from the play recap."""

    playbook: str
    changed: dict[str, int]
    ok: dict[str, int]
    failures: dict[str, int]


@dataclass
class ShellCommand:
    """``session ssh``: the command that opens a shell (or runs ``command``) as user work
    in a container; ``runnable`` is False where it can only be printed."""

    argv: list[str]
    runnable: bool
    note: str = ""

    def __str__(self) -> str:
        return shlex.join(self.argv)


def _flag(value: Any) -> bool:
    """A set_stats boolean, also when a template made it the text 'True' or 'False'."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return bool(value)


@dataclass
class AgentAvailability:
    """What ``agent pause``, ``drain`` or ``activate`` recorded (agent_availability.yml's
    ``bai_agent_availability``): the cluster's ``record`` (None when active), whether the
    agent itself was told (``told_agent``; False: it did not answer, the cluster alone
    holds it out of service), its swarm ``node`` and the ``sessions`` on it (each with
    ``name``, ``session_id``, ``containers``, ``states``)."""

    name: str
    id: str
    availability: str
    record: dict[str, Any] | None = None
    told_agent: bool = True
    node: dict[str, Any] | None = None
    sessions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def text(self) -> str:
        """'paused by alice at 2026-11-26 09:00:00 UTC: driver upgrade', or 'active'."""
        return describe(self.record)

    @property
    def session_names(self) -> list[str]:
        return sorted({str(s.get("name")) for s in self.sessions})

    @classmethod
    def from_stats(cls, data: Mapping[str, Any]) -> AgentAvailability:
        return cls(
            name=str(data.get("name")),
            id=str(data.get("id") or ""),
            availability=str(data.get("availability")),
            record=dict(data["record"]) if data.get("record") else None,
            told_agent=_flag(data.get("told_agent", True)),
            node=dict(data["node"]) if data.get("node") else None,
            sessions=[dict(s) for s in data.get("sessions") or []],
        )


@dataclass
class Drained:
    """What ``agent drain`` ended with: the sessions ``left`` on the agent when the wait
    ended and, when ``forced``, what destroying them removed (``destroyed``:
    session_destroy.yml's rows, with ``name``, ``containers``, ``networks``...). The agent
    stays drained either way (``availability``)."""

    name: str
    left: list[str] = field(default_factory=list)
    forced: bool = False
    destroyed: list[dict[str, Any]] = field(default_factory=list)
    availability: AgentAvailability | None = None


@dataclass
class Removed:
    """What ``agent remove`` did (agent_remove.yml's ``bai_agent_removed``): the swarm
    ``node`` it removed (None: none was left), what the session ledger ``dropped``, the
    sessions it ended (``sessions_ended``: destroyed by a forced drain, or, for an agent
    that was ``dead``, on the agents that answer) and what destroying them removed
    (``destroyed``: session_destroy.yml's rows)."""

    name: str
    dead: bool = False
    node: dict[str, Any] | None = None
    dropped: list[str] = field(default_factory=list)
    sessions_ended: list[str] = field(default_factory=list)
    destroyed: list[dict[str, Any]] = field(default_factory=list)


def _run(playbook: str, extravars: Mapping[str, Any], **kwargs: Any) -> PlaybookResult:
    result = run_playbook(playbook, extravars, **kwargs)
    error = classify(result)
    if error is not None:
        raise error
    return result


def _set(extravars: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        extravars[key] = value


def _check_numbers(extravars: Mapping[str, Any]) -> None:
    """Every number of the request within its range (module_utils/session/limits.py), before
    anything runs; else ``BaiClusterError`` (bad_input) naming the variables."""
    problems = check_numbers(extravars)
    if problems:
        raise BaiClusterError("bad_input", "invalid request: " + "; ".join(problems))


def create_extravars(
    name: str,
    size: int | None = None,
    *,
    mode: str | None = None,
    image: str | None = None,
    resource_group: str | None = None,
    resources: Mapping[str, Any] | None = None,
    mounts: Iterable[Mapping[str, Any]] | None = None,
    env: Mapping[str, str] | None = None,
    roles: Iterable[Mapping[str, Any]] | None = None,
    authorized_keys: Iterable[str] | None = None,
    wait_s: float | None = None,
    ssh_timeout_s: int | None = None,
    network_mtu: int | None = None,
    command: str | None = None,
    stop_grace_s: int | None = None,
    owner: str | None = None,
    lifetime_s: int | None = None,
    queue: bool | None = None,
) -> dict[str, Any]:
    """The variables of session_create.yml (docs/sessions.md) for these arguments; what is
    None is left to the playbook's defaults."""
    extravars: dict[str, Any] = {"session_name": name}
    _set(extravars, "session_size", size)
    _set(extravars, "session_mode", mode)
    _set(extravars, "session_image", image)
    _set(extravars, "session_resource_group", resource_group)
    _set(extravars, "session_resources", dict(resources) if resources else None)
    _set(extravars, "session_mounts", [dict(m) for m in mounts] if mounts else None)
    _set(extravars, "session_env", dict(env) if env else None)
    _set(extravars, "session_roles", [dict(r) for r in roles] if roles else None)
    _set(extravars, "session_authorized_keys", list(authorized_keys) if authorized_keys else None)
    if command is not None:
        # A batch session (docs/sessions.md): the command runs in main1 to its end.
        extravars["session_type"] = "batch"
        extravars["session_command"] = command
    _set(extravars, "session_stop_grace_s", stop_grace_s)
    _set(extravars, "session_wait_s", wait_s)
    _set(extravars, "session_ssh_timeout_s", ssh_timeout_s)
    _set(extravars, "session_network_mtu", network_mtu)
    _set(extravars, "session_owner", owner)
    _set(extravars, "session_lifetime_s", lifetime_s)
    if queue:
        extravars["session_queue"] = True
    _check_numbers(extravars)
    return extravars


def create_session(
    name: str,
    size: int | None = None,
    *,
    inventory: str | None = None,
    on_event: Event | None = None,
    verbosity: int = 0,
    keep_dir: str | None = None,
    **spec: Any,
) -> Session:
    """Create (or confirm) a session; ``spec``: mode, image, resource_group, resources,
    mounts, env, roles, authorized_keys, wait_s, ssh_timeout_s, network_mtu, owner,
    lifetime_s (see
    :func:`create_extravars`). Idempotent: the same request again returns the session
    with ``action == "exists"``."""
    extravars = create_extravars(name, size, **spec)
    result = _run(
        CREATE,
        extravars,
        inventory=inventory,
        on_event=on_event,
        verbosity=verbosity,
        keep_dir=keep_dir,
    )
    summary = result.stats.get("bai_session")
    if not summary:
        raise BaiClusterError("failed", "session_create.yml recorded no session summary")
    return Session.from_summary(summary)


def destroy_session(
    name: str,
    *,
    force: bool = False,
    inventory: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> Destroyed:
    """Remove every container and network of the session (idempotent), or cancel it when
    it is PENDING in the queue. ``force``: release its reservation even when an agent
    that holds part of it does not answer (that part is left for ``reconcile`` to remove
    once the agent answers). While sessions are queued, a scheduler pass follows
    (``schedule``: what fits now starts)."""
    extravars: dict[str, Any] = {"session_name": name}
    if force:
        extravars["session_destroy_force"] = True
    result = _run(DESTROY, extravars, inventory=inventory, on_event=on_event, **kwargs)
    data = result.stats.get("bai_session_destroyed") or {}
    done = Destroyed(
        name=name,
        containers=list(data.get("containers") or []),
        networks=list(data.get("networks") or []),
        left_on=list(data.get("left_on") or []),
        job=data.get("job") or None,
        cancelled=bool(data.get("cancelled")),
    )
    if int(result.stats.get("bai_queue_waiting") or 0) > 0:
        done.schedule = schedule_sessions(inventory=inventory, on_event=on_event, **kwargs)
    return done


def schedule_sessions(
    *,
    inventory: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> Scheduled:
    """The scheduler pass: start the queued sessions that fit now, in queue order, one
    playbook run each (playbooks/session_schedule.yml), until a run finds no other one
    to start. A start that fails is reported in ``failed`` and the pass goes on."""
    done = Scheduled()
    budget: int | None = None
    while budget is None or done.runs < budget:
        result = run_playbook(SCHEDULE, {}, inventory=inventory, on_event=on_event, **kwargs)
        done.runs += 1
        data = result.stats.get("bai_schedule")
        error = classify(result)
        if data is None:  # failed before it decided anything
            raise error or BaiClusterError("failed", "session_schedule.yml decided nothing")
        names = [str(n) for n in data.get("start") or []]
        done.queue = list(data.get("queue") or [])
        summary = result.stats.get("bai_session") or {}
        for name in names:
            if error is not None:
                done.failed[name] = error.message
            elif summary.get("state") != "PENDING":
                done.started.append(name)
        # Every run leases one more, so the pass ends: at most this many more runs.
        more = int(data.get("more") or 0)
        if budget is None:
            budget = 1 + more
        if not names or not more:
            break
    if done.started or done.failed:
        # The queue as it is now, without the sessions that left it.
        gone = set(done.started) | set(done.failed)
        done.queue = [q for q in done.queue if q.get("name") not in gone]
    return done


def wait_job(
    name: str,
    *,
    timeout_s: int | None = None,
    inventory: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> JobResult:
    """Wait for a batch session's end (playbooks/session_wait.yml; ``timeout_s``: at most
    that long, then its state so far) and return what its command came to."""
    extravars: dict[str, Any] = {"session_name": name, "session_wait_fail": False}
    _set(extravars, "session_batch_timeout_s", timeout_s)
    _check_numbers(extravars)
    result = _run(WAIT, extravars, inventory=inventory, on_event=on_event, **kwargs)
    return JobResult.from_data(name, result.stats.get("bai_session_job") or {"state": "lost"})


def session_output(
    name: str,
    host: str = "main1",
    *,
    inventory: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """What ``host`` of the session printed (for main1 of a batch session: its command's
    output): from its container, or once a batch session is gone what its agent kept.
    Returns output, source (container or kept), agent, session_id."""
    extravars = {"session_name": name, "logs_host": host}
    result = _run(LOGS, extravars, inventory=inventory, on_event=on_event, **kwargs)
    return dict(result.stats.get("bai_session_logs") or {})


def reconcile_sessions(
    *,
    check: bool = False,
    adopt_ledgers: Sequence[str] = (),
    inventory: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> Reconciled:
    """Make the session ledger agree with what the agents run (``check``: report only;
    ``adopt_ledgers``: identities of ledgers gone for good whose sessions it takes in)."""
    extravars = {"session_adopt_ledgers": list(adopt_ledgers)} if adopt_ledgers else {}
    result = _run(
        RECONCILE, extravars, inventory=inventory, on_event=on_event, check=check, **kwargs
    )
    data = result.stats.get("bai_reconcile") or {}
    known = set(Reconciled.__dataclass_fields__) - {"check", "schedule"}
    done = Reconciled(**{k: v for k, v in data.items() if k in known}, check=check)
    if not check and int(done.waiting or 0) > 0:
        # Capacity the reconcile freed (ended lifetimes, dead creates) goes to the queue.
        done.schedule = schedule_sessions(inventory=inventory, on_event=on_event, **kwargs)
    return done


def list_sessions(
    *,
    inventory: str | None = None,
    on_event: Event | None = None,
    owner: str | None = None,
    **kwargs: Any,
) -> list[SessionRow]:
    """Every session on the inventory's agents (from Docker labels); only ``owner``'s
    when given."""
    result = _run(LIST, {}, inventory=inventory, on_event=on_event, **kwargs)
    rows = [SessionRow(**row) for row in result.stats.get("bai_sessions") or []]
    return [row for row in rows if owner is None or row.owner == owner]


def _addresses(networks: Mapping[str, Any] | None) -> dict[str, str]:
    return {
        name: str(net.get("IPAddress"))
        for name, net in (networks or {}).items()
        if isinstance(net, Mapping) and net.get("IPAddress")
    }


def _ports(ports: Mapping[str, Any] | None) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for port, bindings in (ports or {}).items():
        for binding in bindings or []:
            found.setdefault(port, []).append(
                f"{binding.get('HostIp') or '0.0.0.0'}:{binding.get('HostPort')}"
            )
    return found


def parse_env(text: str | None) -> dict[str, str]:
    """The session variables (BACKENDAI_*, MASTER_*, TF_CONFIG) from ``env`` output."""
    found = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and (key.startswith(ENV_PREFIXES) or key in ENV_NAMES):
            found[key] = value
    return dict(sorted(found.items()))


def details_from_stats(data: Mapping[str, Any]) -> SessionDetails:
    """Assemble :class:`SessionDetails` from session_show.yml's ``bai_session_show``."""
    name = str(data.get("name"))
    raw = list(data.get("containers") or [])
    networks = list(data.get("networks") or [])
    ports = list(data.get("ports") or [])
    env_out = data.get("env") or {}
    containers, env = [], {}
    for i, item in enumerate(raw):
        labels = item.get("labels") or {}
        container = Container(
            host=str(labels.get(LABEL_HOST, item.get("name"))),
            role=str(labels.get(LABEL_ROLE, "")),
            idx=int(labels.get(LABEL_IDX) or 0),
            agent=str(item.get("agent")),
            kernel_id=str(labels.get(LABEL_KERNEL_ID, "")),
            container=str(item.get("name")),
            state=item.get("state"),
            image=item.get("image"),
            addresses=_addresses(networks[i] if i < len(networks) else None),
            ports=_ports(ports[i] if i < len(ports) else None),
        )
        containers.append(container)
        if env_out.get(container.container) is not None:
            env[container.host] = parse_env(env_out[container.container])
    ended = list(data.get("ended") or [])
    if not containers and data.get("queued"):
        queued = dict(data["queued"])
        return SessionDetails(
            name=name,
            session_id="",
            mode=str(queued.get("mode") or ""),
            network=None,
            network_driver=None,
            containers=[],
            type=str(queued.get("type") or "interactive"),
            owner=str(queued.get("owner") or ""),
            pending=queued,
        )
    if not containers and ended:
        # A batch session that is gone: the newest end the ledger remembers.
        return SessionDetails(
            name=name,
            session_id=str(ended[0].get("session_id")),
            mode="",
            network=None,
            network_driver=None,
            containers=[],
            type="batch",
            job=dict(ended[0]),
        )
    if not containers:
        raise BaiClusterError("not_found", f"no session {name} on any agent")
    master = next(
        (c for c in containers if c.kernel_id and c.kernel_id == _label(raw, LABEL_SESSION_ID)),
        containers[0],
    )
    ordered = sorted(containers, key=lambda c: (c is not master, c.role, c.idx))
    nets = sorted({n for c in containers for n in c.addresses if n.startswith("bai-")})
    ssh = master.ports.get(SSH_PORT) or []
    proxy = str(data.get("appproxy") or "")
    route = parse_route(str(data.get("route") or ""))
    if route and route["session"] == name:
        proxy_access = (data.get("access") or {}).get(proxy) or {}
        address = route.get("public_address") or proxy_access.get("host") or proxy
        route = {
            "host": proxy,
            "address": address,
            "port": route["port"],
            "ssh": f"ssh -p {route['port']} work@{address}",
        }
    return SessionDetails(
        name=name,
        session_id=str(_label(raw, LABEL_SESSION_ID)),
        mode=str(_label(raw, LABEL_MODE)),
        owner=str(_label(raw, LABEL_OWNER) or ""),
        time_left=data.get("time_left"),
        network=nets[0] if nets else None,
        network_driver=None,
        containers=ordered,
        ssh_port=int(ssh[0].rsplit(":", 1)[1]) if ssh else None,
        ssh_agent=master.agent,
        access={
            host: Access(**{k: str(v) for k, v in info.items()})
            for host, info in (data.get("access") or {}).items()
        },
        appproxy=proxy,
        appproxy_route=route,
        env=env,
        type="batch" if _label(raw, LABEL_BATCH) else "interactive",
        job=data.get("job") or None,
    )


def _label(raw: list[Mapping[str, Any]], label: str) -> str:
    for item in raw:
        value = (item.get("labels") or {}).get(label)
        if value:
            return str(value)
    return ""


def show_session(
    name: str,
    *,
    inventory: str | None = None,
    env: bool = False,
    host: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> SessionDetails:
    """The session's containers (state, agent, addresses, published ports) and, with
    ``env``, their session environment (of ``host`` only when given)."""
    extravars = {"session_name": name, "show_env": bool(env), "show_host": host or ""}
    result = _run(SHOW, extravars, inventory=inventory, on_event=on_event, **kwargs)
    details = details_from_stats(result.stats.get("bai_session_show") or {"name": name})
    if host:
        details.container(host)  # raises when there is no such host
    return details


def session_env(
    name: str, host: str | None = None, *, inventory: str | None = None, **kwargs: Any
) -> dict[str, dict[str, str]]:
    """host -> the container's BACKENDAI_*, MASTER_* and TF_CONFIG variables (as seen
    by ``docker exec``), for every running container or only ``host``."""
    return show_session(name, inventory=inventory, env=True, host=host, **kwargs).env


def shell_command(
    details: SessionDetails,
    host: str | None = None,
    command: list[str] | None = None,
    tty: bool = True,
) -> ShellCommand:
    """The command that opens a shell as user work in ``host`` (default main1), or runs
    ``command`` there:

    - agent on this machine (``ansible_connection: local``): ``docker exec``;
    - docker-connected agent (the lab): ``docker exec`` into the agent's node, then into
      the container with the node's own engine;
    - agents reached over SSH (real hosts): users reach containers only through the app
      proxy, so the command is ``ssh -p <route port> work@<app proxy>`` (the session's
      route, roles/appproxy), or without a route ``ssh -J <appproxy> -p <main1's published sshd
      port> work@<agent>``; then ``ssh <host>`` from main1. It is printed, not run: it
      needs a key the session accepts (``authorized_keys``).
    """
    target = details.container(host)
    # As ``ssh host 'cmd; cmd'`` does: the words are joined and run by the user's shell.
    line = " ".join(command or [])
    inner = ["bash", "-c", line] if command else ["bash", "-l"]
    flags = ["-it"] if tty else ["-i"]
    exec_argv = ["exec", *flags, "-u", "work", "-w", "/home/work", target.container, *inner]
    access = details.access.get(target.agent) or Access(connection="ssh", host=target.agent)
    connection = access.connection.rsplit(".", 1)[-1]
    if connection == "local":
        return ShellCommand(["docker", *exec_argv], runnable=True)
    if connection == "docker":
        return ShellCommand(["docker", "exec", *flags, access.host, "docker", *exec_argv], True)
    master = details.container(None)
    route = details.appproxy_route or {}
    if route.get("port"):
        # The app proxy's user-facing port for this session -> main1's sshd.
        argv = ["ssh", "-t", "-p", str(route["port"]), f"work@{route.get('address')}"]
    else:
        # No route known: the app proxy host as the jump host to main1's published sshd.
        master_access = details.access.get(master.agent) or Access("ssh", master.agent)
        proxy = details.access.get(details.appproxy)
        jump = proxy.host if proxy else details.appproxy
        argv = ["ssh", "-t"]
        if jump:
            argv += ["-J", f"{proxy.user + '@' if proxy and proxy.user else ''}{jump}"]
        argv += ["-p", str(details.ssh_port or 22), f"work@{master_access.host}"]
    if target.host != master.host:
        argv += ["ssh", "-t", target.host]
        if command:  # main1's shell must pass the line on whole to the second hop
            argv.append(shlex.quote(line))
    elif command:
        argv.append(line)
    note = (
        f"{target.host} runs on {target.agent}, reached over SSH: users reach sessions only "
        f"through the app proxy ({details.appproxy or 'none in the inventory'}) to main1's "
        "sshd; the session must accept your key (session create --authorized-key)"
    )
    return ShellCommand(argv, runnable=False, note=note)


def logs_command(details: Session, host: str | None = None, follow: bool = True) -> ShellCommand:
    """The command that prints (``follow``: and follows, until the container stops) what
    ``host`` (default main1) prints, with the engine's own ``docker logs``: on this machine,
    in the lab's agent node, or on an SSH-reached agent with sudo (as Ansible reaches it).
    Its stderr is the container's: for main1 of a batch session, throw it away (sshd's
    log) to keep the command's output alone."""
    target = details.container(host)
    argv = ["docker", "logs", *(["--follow"] if follow else []), target.container]
    access = details.access.get(target.agent) or Access(connection="ssh", host=target.agent)
    connection = access.connection.rsplit(".", 1)[-1]
    if connection == "local":
        return ShellCommand(argv, runnable=True)
    if connection == "docker":
        return ShellCommand(["docker", "exec", access.host, *argv], runnable=True)
    ssh = ["ssh", *(["-p", access.port] if access.port else [])]
    where = f"{access.user}@{access.host}" if access.user else access.host
    return ShellCommand([*ssh, where, "sudo", "-n", *argv], runnable=True)


def _summary(playbook: str, result: PlaybookResult) -> PlaybookSummary:
    return PlaybookSummary(
        playbook=playbook,
        changed=dict(result.counts.get("changed") or {}),
        ok=dict(result.counts.get("ok") or {}),
        failures=dict(result.counts.get("failures") or {}),
    )


def lab(state: str = "present", *, on_event: Event | None = None, **kwargs: Any) -> PlaybookSummary:
    """Bring the embedded lab up (``present``) or down (``absent``): playbooks/lab.yml."""
    if state not in ("present", "absent"):
        raise BaiClusterError("bad_input", f"lab state must be present or absent, got {state!r}")
    result = _run(LAB, {"lab_state": state}, on_event=on_event, **kwargs)
    return _summary(LAB, result)


def site(
    *,
    inventory: str | None = None,
    tags: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> PlaybookSummary:
    """Converge the whole infrastructure (site.yml), optionally only ``tags``."""
    result = _run(SITE, {}, inventory=inventory, tags=tags, on_event=on_event, **kwargs)
    return _summary(SITE, result)


def _user() -> str | None:
    """Who runs this (recorded as who paused or drained an agent); None when unknown."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry
        return None


def list_agents(
    name: str | None = None,
    *,
    inventory: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The inventory's agents (or agent ``name`` alone) as the cluster sees them, and the
    totals (playbooks/agent_list.yml). Each row: name, id, group, availability
    (active, pause, drain), availability_text, by, reason, since, health, node_state,
    offer and given_out (cpu, mem, gpu_devices), gpu_free, sessions, source (engine, or
    ledger for an agent that does not answer), in_service. Totals: agents, in_service,
    offered, given_out, free (of the agents in service only)."""
    extravars = {"agent_name": name} if name else {}
    result = _run(AGENT_LIST, extravars, inventory=inventory, on_event=on_event, **kwargs)
    rows = [dict(row) for row in result.stats.get("bai_agents") or []]
    totals = dict(result.stats.get("bai_agent_totals") or agent_view.totals(rows))
    return rows, totals


def show_agent(
    name: str, *, inventory: str | None = None, on_event: Event | None = None, **kwargs: Any
) -> dict[str, Any]:
    """One agent's row (see :func:`list_agents`)."""
    rows, _totals = list_agents(name, inventory=inventory, on_event=on_event, **kwargs)
    for row in rows:
        if row.get("name") == name:
            return row
    raise BaiClusterError("not_found", f"no agent {name} in this inventory")


def set_agent_availability(
    name: str,
    availability: str,
    *,
    reason: str | None = None,
    by: str | None = None,
    inventory: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> AgentAvailability:
    """Pause (``pause``), drain (``drain``, without waiting: see :func:`drain_agent`) or
    activate (``active``) an agent (playbooks/agent_availability.yml). Paused or drained:
    no new session is placed on it or admitted by it; its sessions keep running and a
    rerun still repairs them. ``by`` defaults to the user running this. Idempotent:
    pausing a paused agent keeps the first record's who and when."""
    if availability not in AVAILABILITIES:
        raise BaiClusterError(
            "bad_input",
            f"availability must be one of {', '.join(AVAILABILITIES)}, got {availability!r}",
        )
    extravars: dict[str, Any] = {"agent_name": name, "agent_availability": availability}
    _set(extravars, "agent_reason", reason)
    _set(extravars, "agent_by", by or _user())
    result = _run(AGENT_AVAILABILITY, extravars, inventory=inventory, on_event=on_event, **kwargs)
    data = result.stats.get("bai_agent_availability")
    if not data:
        raise BaiClusterError("failed", "agent_availability.yml recorded no outcome")
    return AgentAvailability.from_stats(data)


def _drain_vars(
    name: str, timeout_s: int, force: bool, reason: str | None, by: str | None
) -> dict[str, Any]:
    """agent_drain.yml's variables (agent_remove.yml drains with the same), checked."""
    try:
        timeout_s = int(check_number("agent_drain_timeout_s", timeout_s))
    except SpecError as exc:
        raise BaiClusterError("bad_input", f"the drain timeout: {exc}") from None
    extravars: dict[str, Any] = {
        "agent_name": name,
        "agent_drain_timeout_s": timeout_s,
        "agent_drain_force": bool(force),
    }
    _set(extravars, "agent_reason", reason)
    _set(extravars, "agent_by", by or _user())
    return extravars


def drain_agent(
    name: str,
    *,
    timeout_s: int = DRAIN_TIMEOUT_S,
    force: bool = False,
    reason: str | None = None,
    by: str | None = None,
    inventory: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> Drained:
    """Drain an agent (playbooks/agent_drain.yml): mark it drained (no new sessions), then
    wait up to ``timeout_s`` seconds for its sessions to end. Sessions left after that
    raise :class:`BaiClusterError` naming them (the agent stays drained), unless
    ``force``: then they are destroyed. The agent is never activated here (see
    :func:`set_agent_availability`)."""
    extravars = _drain_vars(name, timeout_s, force, reason, by)
    result = _run(AGENT_DRAIN, extravars, inventory=inventory, on_event=on_event, **kwargs)
    data = result.stats.get("bai_agent_drain")
    if not data:
        raise BaiClusterError("failed", "agent_drain.yml recorded no outcome")
    marked = result.stats.get("bai_agent_availability")
    forced = _flag(data.get("forced"))
    return Drained(
        name=str(data.get("name") or name),
        left=[str(s) for s in data.get("left") or []],
        forced=forced,
        destroyed=[dict(r) for r in result.stats.get("bai_sessions_destroyed") or []]
        if forced
        else [],
        availability=AgentAvailability.from_stats(marked) if marked else None,
    )


def remove_agent(
    name: str,
    *,
    timeout_s: int = DRAIN_TIMEOUT_S,
    force: bool = False,
    dead: bool = False,
    reason: str | None = None,
    by: str | None = None,
    inventory: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> Removed:
    """Take an agent out of the cluster (playbooks/agent_remove.yml). An agent that
    answers is drained first as :func:`drain_agent` does (``timeout_s``, ``force``):
    sessions left stop the removal with :class:`BaiClusterError`, the agent stays
    drained. Then it leaves the swarm, its node entry goes, the session ledger forgets it
    and the other hosts' firewalls drop its addresses. ``dead``: an agent that is powered
    off or does not answer - nothing contacts it, its sessions are destroyed on the
    agents that answer, its node is removed with force. Idempotent."""
    extravars = {**_drain_vars(name, timeout_s, force, reason, by), "agent_remove_dead": bool(dead)}
    result = _run(AGENT_REMOVE, extravars, inventory=inventory, on_event=on_event, **kwargs)
    data = result.stats.get("bai_agent_removed")
    if not data:
        raise BaiClusterError("failed", "agent_remove.yml recorded no outcome")
    ended = [str(s) for s in data.get("sessions_ended") or []]
    return Removed(
        name=str(data.get("name") or name),
        dead=_flag(data.get("dead")),
        node=dict(data["node"]) if data.get("node") else None,
        dropped=[str(d) for d in data.get("dropped") or []],
        sessions_ended=ended,
        destroyed=[dict(r) for r in result.stats.get("bai_sessions_destroyed") or []]
        if ended
        else [],
    )
