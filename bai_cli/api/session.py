"""Sessions: create, destroy, list and show one, its environment, and a batch session's
command (wait for its end, what it printed)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_BATCH,
    LABEL_DEADLINE,
    LABEL_END_SIGNAL,
    LABEL_HOST,
    LABEL_IDX,
    LABEL_KERNEL_ID,
    LABEL_MODE,
    LABEL_OWNER,
    LABEL_RESTART_COUNT,
    LABEL_ROLE,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.network.appproxy import parse_route
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import SSH_PORT as SSHD_PORT

from ..errors import BaiClusterError
from .base import Event, check_request_numbers, run, set_var
from .ledger import NO_PASS, schedule_sessions
from .session_model import (
    Access,
    Container,
    Destroyed,
    JobResult,
    Session,
    SessionDetails,
    SessionRow,
)

CREATE = "playbooks/session_create.yml"
DESTROY = "playbooks/session_destroy.yml"
LIST = "playbooks/session_list.yml"
SHOW = "bai_cli/playbooks/session_show.yml"
WAIT = "playbooks/session_wait.yml"
LOGS = "bai_cli/playbooks/session_logs.yml"
SIGNAL = "playbooks/session_signal.yml"


SSH_PORT = f"{SSHD_PORT}/tcp"
# The environment `session env` shows (docs/environment.md).
ENV_PREFIXES = ("BACKENDAI_", "MASTER_")
ENV_NAMES = ("TF_CONFIG",)


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
    end_signal: str | None = None,
    restarts: int | None = None,
    restart_on: str | None = None,
    preemptible: bool | None = None,
    queue: bool | None = None,
    apps: Iterable[str] | None = None,
    topology: str | None = None,
    topology_prefer_s: int | None = None,
) -> dict[str, Any]:
    """The variables of session_create.yml (docs/sessions.md) for these arguments; what is
    None is left to the playbook's defaults."""
    extravars: dict[str, Any] = {"session_name": name}
    set_var(extravars, "session_size", size)
    set_var(extravars, "session_mode", mode)
    set_var(extravars, "session_image", image)
    set_var(extravars, "session_resource_group", resource_group)
    set_var(extravars, "session_resources", dict(resources) if resources else None)
    set_var(extravars, "session_mounts", [dict(m) for m in mounts] if mounts else None)
    set_var(extravars, "session_env", dict(env) if env else None)
    set_var(extravars, "session_roles", [dict(r) for r in roles] if roles else None)
    set_var(
        extravars, "session_authorized_keys", list(authorized_keys) if authorized_keys else None
    )
    if command is not None:
        # A batch session (docs/sessions.md): the command runs in main1 to its end.
        extravars["session_type"] = "batch"
        extravars["session_command"] = command
    set_var(extravars, "session_stop_grace_s", stop_grace_s)
    set_var(extravars, "session_wait_s", wait_s)
    set_var(extravars, "session_ssh_timeout_s", ssh_timeout_s)
    set_var(extravars, "session_network_mtu", network_mtu)
    set_var(extravars, "session_owner", owner)
    set_var(extravars, "session_lifetime_s", lifetime_s)
    set_var(extravars, "session_end_signal", end_signal)
    set_var(extravars, "session_restarts", restarts)
    set_var(extravars, "session_restart_on", restart_on)
    set_var(extravars, "session_preemptible", preemptible)
    set_var(extravars, "session_apps", list(apps) if apps else None)
    set_var(extravars, "session_topology", topology)
    set_var(extravars, "session_topology_prefer_s", topology_prefer_s)
    if queue:
        extravars["session_queue"] = True
    check_request_numbers(extravars)
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
    lifetime_s, end_signal, restarts, restart_on, preemptible, apps, topology,
    topology_prefer_s (see :func:`create_extravars`). Idempotent: the same request again
    returns the session with ``action == "exists"``."""
    extravars = create_extravars(name, size, **spec)
    result = run(
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
    owner: str | None = None,
    inventory: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> Destroyed:
    """Remove every container and network of the session (idempotent), or cancel it when
    it is PENDING in the queue. ``force``: release its reservation even when an agent
    that holds part of it does not answer (that part is left for ``reconcile`` to remove
    once the agent answers). While sessions are queued, a scheduler pass follows
    (``schedule``: what fits now starts). ``owner``: only a session of that owner's
    (another's is refused, nothing changed)."""
    extravars: dict[str, Any] = {"session_name": name, **NO_PASS}
    if force:
        extravars["session_destroy_force"] = True
    set_var(extravars, "session_owner_only", owner)
    result = run(DESTROY, extravars, inventory=inventory, on_event=on_event, **kwargs)
    data = result.stats.get("bai_session_destroyed") or {}
    done = Destroyed(
        name=name,
        containers=list(data.get("containers") or []),
        networks=list(data.get("networks") or []),
        left_on=list(data.get("left_on") or []),
        job=data.get("job") or None,
        cancelled=bool(data.get("cancelled")),
        restarted=dict(result.stats.get("bai_session_restarted") or {}) or None,
    )
    if int(result.stats.get("bai_queue_waiting") or 0) > 0:
        done.schedule = schedule_sessions(inventory=inventory, on_event=on_event, **kwargs)
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
    set_var(extravars, "session_batch_timeout_s", timeout_s)
    check_request_numbers(extravars)
    result = run(WAIT, extravars, inventory=inventory, on_event=on_event, **kwargs)
    return JobResult.from_data(name, result.stats.get("bai_session_job") or {"state": "lost"})


def session_output(
    name: str,
    host: str = "main1",
    *,
    attempt: int | None = None,
    owner: str | None = None,
    inventory: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """What ``host`` of the session printed (for main1 of a batch session: its command's
    output): from its container, or once a batch session is gone what its agent kept.
    Returns output, source (container or kept), agent, session_id, attempt. ``attempt``:
    a batch session that restarted, that attempt's (0 the first; default the newest).
    ``owner``: only a session of that owner's."""
    extravars: dict[str, Any] = {"session_name": name, "logs_host": host}
    set_var(extravars, "logs_attempt", attempt)
    set_var(extravars, "session_owner_only", owner)
    result = run(LOGS, extravars, inventory=inventory, on_event=on_event, **kwargs)
    return dict(result.stats.get("bai_session_logs") or {})


def signal_session(
    name: str,
    signal: str,
    *,
    owner: str | None = None,
    inventory: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Send ``signal`` to every member of the session at once (playbooks/session_signal.yml):
    session, signal, members (container -> processes and at, epoch seconds). ``owner``:
    only a session of that owner's."""
    extravars: dict[str, Any] = {"session_name": name, "session_signal": signal}
    set_var(extravars, "session_owner_only", owner)
    result = run(SIGNAL, extravars, inventory=inventory, on_event=on_event, **kwargs)
    return dict(result.stats.get("bai_session_signal") or {})


def list_sessions(
    *,
    inventory: str | None = None,
    on_event: Event | None = None,
    owner: str | None = None,
    **kwargs: Any,
) -> list[SessionRow]:
    """Every session on the inventory's agents (from Docker labels); only ``owner``'s
    when given."""
    result = run(LIST, {}, inventory=inventory, on_event=on_event, **kwargs)
    rows = [SessionRow(**row) for row in result.stats.get("bai_sessions") or []]
    return [row for row in rows if owner is None or row.owner == owner]


def show_session(
    name: str,
    *,
    inventory: str | None = None,
    env: bool = False,
    host: str | None = None,
    owner: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> SessionDetails:
    """The session's containers (state, agent, addresses, published ports) and, with
    ``env``, their session environment (of ``host`` only when given). ``owner``: only a
    session of that owner's."""
    extravars: dict[str, Any] = {
        "session_name": name,
        "show_env": bool(env),
        "show_host": host or "",
    }
    set_var(extravars, "session_owner_only", owner)
    result = run(SHOW, extravars, inventory=inventory, on_event=on_event, **kwargs)
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
    containers, env = _containers(raw, data)
    if not containers:
        return _without_containers(name, data)
    master = next(
        (c for c in containers if c.kernel_id and c.kernel_id == _label(raw, LABEL_SESSION_ID)),
        containers[0],
    )
    ordered = sorted(containers, key=lambda c: (c is not master, c.role, c.idx))
    nets = sorted({n for c in containers for n in c.addresses if n.startswith("bai-")})
    ssh = master.ports.get(SSH_PORT) or []
    proxy = str(data.get("appproxy") or "")
    return SessionDetails(
        name=name,
        session_id=str(_label(raw, LABEL_SESSION_ID)),
        mode=str(_label(raw, LABEL_MODE)),
        owner=str(_label(raw, LABEL_OWNER) or ""),
        time_left=data.get("time_left"),
        deadline=int(_label(raw, LABEL_DEADLINE)) if _label(raw, LABEL_DEADLINE) else None,
        end_signal=str(_label(raw, LABEL_END_SIGNAL) or ""),
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
        appproxy_route=_route(name, proxy, data),
        app_routes=_app_routes(str(_label(raw, LABEL_SESSION_ID)), proxy, data),
        env=env,
        type="batch" if _label(raw, LABEL_BATCH) else "interactive",
        job=data.get("job") or None,
        attempt=int(count) if (count := str(_label(raw, LABEL_RESTART_COUNT))).isdigit() else None,
        attempts=list(data.get("attempts") or []),
        topology={
            str(agent): {str(k): str(v) for k, v in (where or {}).items()}
            for agent, where in (data.get("topology") or {}).items()
            if where
        },
    )


def _containers(
    raw: list[Mapping[str, Any]], data: Mapping[str, Any]
) -> tuple[list[Container], dict[str, dict[str, str]]]:
    """The containers session_show.yml found (their addresses and published ports), and
    host -> the session environment of those whose ``env`` output it read."""
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
    return containers, env


def _without_containers(name: str, data: Mapping[str, Any]) -> SessionDetails:
    """A session with no container on any agent: PENDING in the queue, or a batch session
    that is gone (the newest end the ledger remembers); else ``not_found``."""
    ended = list(data.get("ended") or [])
    if data.get("queued"):
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
            attempt=queued.get("attempt"),
            attempts=list(queued.get("attempts") or []),
        )
    if ended:
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
            attempt=ended[0].get("attempt"),
            attempts=list(ended[0].get("attempts") or []),
        )
    raise BaiClusterError("not_found", f"no session {name} on any agent")


def _route(name: str, proxy: str, data: Mapping[str, Any]) -> dict[str, Any] | None:
    """The app proxy route to the session's main1 sshd (host, address, port, ssh), if
    the route session_show.yml read is this session's."""
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
    return route


def _app_routes(session_id: str, proxy: str, data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The session's app routes session_show.yml read (of this session id: a route an
    earlier session of the name left leads nowhere): app, port and the proxy's address."""
    address = str(data.get("app_address") or proxy)
    return [
        {"app": str(r.get("app")), "port": int(r["port"]), "address": address}
        for r in data.get("app_routes") or ()
        if r.get("port") and (not session_id or str(r.get("session_id") or "") == session_id)
    ]


def _label(raw: list[Mapping[str, Any]], label: str) -> str:
    for item in raw:
        value = (item.get("labels") or {}).get(label)
        if value:
            return str(value)
    return ""
