"""A session as the API returns it: its containers, what create, show and list report,
what a batch session's command came to and what a destroy removed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.jobs import ends

from ..errors import BaiClusterError
from .ledger import Scheduled


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
class Access:
    """How Ansible reaches a host of the inventory (for the ssh command)."""

    connection: str
    host: str
    user: str = ""
    port: str = ""


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
    # Seconds it may still run (its lifetime, from when it was placed); show reads it
    # from the session ledger, None without a lifetime. Its deadline (epoch seconds, also
    # BACKENDAI_SESSION_DEADLINE in its containers) and its end signal ("USR1@300") are
    # on its labels.
    time_left: float | None = None
    deadline: int | None = None
    end_signal: str = ""
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
    one of the ends - succeeded, failed, cancelled, lost, timeout (its lifetime was up),
    preempted (a forced drain stopped it).
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
        """The exit code ``session run`` exits with (module_utils/jobs/ends.py): the
        command's when it failed (1 without one of its own); 0 succeeded, 130 cancelled,
        124 timeout, 75 preempted, 69 lost."""
        return ends.exit_status(self.state, self.exit_code)

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
    # A batch session whose gang starts again (session_restarts): attempt (the next
    # one's number) and reason; it waits at the head of the queue.
    restarted: dict[str, Any] | None = None


@dataclass
class SessionDetails(Session):
    """``show``: the session with its containers' state, addresses, published ports,
    and how its agents (and the app proxy) are reached."""

    appproxy: str = ""
    # The session's open app routes on the app proxy (docs/apps.md): app, port, address
    # (the proxy's public one) - no secret: bai-cluster session app NAME APP gives links.
    app_routes: list[dict[str, Any]] = field(default_factory=list)
    env: dict[str, dict[str, str]] = field(default_factory=dict)
    # A batch session: what its command came to so far (or, once the session is gone and
    # ``containers`` is empty, how it ended, as the session ledger remembers it).
    job: dict[str, Any] | None = None
    # A batch session that may restart (session_restarts): this attempt's number (0 the
    # first), and the ends of the earlier ones (attempt, state, exit_code, ...).
    attempt: int | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    # Each agent's domain at each topology level (the inventory's bai_topology; {} where
    # the cluster has none).
    topology: dict[str, dict[str, str]] = field(default_factory=dict)

    def domain_of(self, agent: str) -> str:
        """'block=b1,rack=r3': where ``agent`` lies in the topology ("" for nowhere)."""
        return ",".join(f"{k}={v}" for k, v in (self.topology.get(agent) or {}).items())

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
