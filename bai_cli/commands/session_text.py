"""What the session commands print (without --json): a created or queued session, one
in detail, the session list, and what a batch session's command came to."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.containers.listing import format_duration

from .. import api
from .common import table


def pending_text(session: api.Session) -> list[str]:
    """A session PENDING in the queue: its place, why it waits, how to cancel it."""
    queued = session.pending or {}
    return [
        f"session {session.name} is PENDING: number {queued.get('position')} in the queue of "
        f"resource group {queued.get('resource_group')}"
        + (f", owner {session.owner}" if session.owner else ""),
        f"  waits: {queued.get('reason') or 'for room'}",
        "  it starts in queue order when a scheduler pass finds room (bai-cluster session "
        "schedule; destroy, reconcile and the housekeeping timer run it)",
        f"  cancel: bai-cluster session destroy {session.name}",
    ]


def session_text(session: api.Session) -> list[str]:
    if session.pending is not None:
        return pending_text(session)
    verb = {
        "create": "created",
        "exists": "already exists with this spec (nothing changed)",
    }.get(str(session.action), "is up")
    if session.action == "exists" and session.restarted:
        verb = (
            f"already exists with this spec; started again what had stopped: "
            f"{', '.join(session.restarted)}"
        )
    network = (
        f"network {session.network} ({session.network_driver})"
        if session.network
        else "no session network (the engine's default bridge)"
    )
    lines = [
        f"session {session.name} {verb}",
        f"  session id {session.session_id}, {session.mode}, {session.size} container(s), "
        f"{network}" + (f", owner {session.owner}" if session.owner else ""),
    ]
    left = getattr(session, "time_left", None)
    if left is not None:
        lines.append(f"  lifetime: {format_duration(left)} left{_ends(session)}")
    rows = [("HOST", "ROLE", "IDX", "AGENT", "CONTAINER", "KERNEL ID")]
    rows += [
        (c.host, c.role, str(c.idx), c.agent, c.container, c.kernel_id) for c in session.containers
    ]
    lines += ["  " + line for line in table(rows)]
    if session.ssh_port:
        lines.append(f"  main1 sshd published on {session.ssh_agent} port {session.ssh_port}")
    if session.appproxy_route and session.appproxy_route.get("ssh"):
        lines.append(f"  through the app proxy: {session.appproxy_route['ssh']}")
    lines.append(f"  shell: bai-cluster session ssh {session.name} [HOST]")
    return lines


def details_text(details: api.SessionDetails) -> list[str]:
    if details.pending is not None:
        return pending_text(details) + attempts_text(details)
    if not details.containers and details.job:
        return [
            job_text(details.name, details.job) + f" (id {details.session_id}; removed: its "
            f"output: bai-cluster session logs {details.name} [--member HOST])",
            *attempts_text(details),
        ]
    lines = [
        f"session {details.name} ({details.state}): id {details.session_id}, {details.mode}, "
        f"{details.size} container(s), network {details.network or 'none'}"
    ]
    # With a topology, each member's domain at every level after its agent.
    where = ("TOPOLOGY",) if details.topology else ()
    rows = [("HOST", "ROLE", "STATE", "AGENT", *where, "CONTAINER", "ADDRESSES", "PORTS")]
    for c in details.containers:
        addresses = ",".join(f"{ip} ({net})" for net, ip in c.addresses.items()) or "-"
        ports = ",".join(f"{p}->{','.join(b)}" for p, b in c.ports.items()) or "-"
        domain = (details.domain_of(c.agent) or "-",) if where else ()
        rows.append(
            (c.host, c.role, c.state or "-", c.agent, *domain, c.container, addresses, ports)
        )
    lines += ["  " + line for line in table(rows)]
    if details.ssh_port:
        lines.append(f"  main1 sshd published on {details.ssh_agent} port {details.ssh_port}")
    if details.appproxy_route:
        lines.append(f"  through the app proxy: {details.appproxy_route['ssh']}")
    for route in details.app_routes:
        lines.append(
            f"  app {route['app']} open through the app proxy at https://{route['address']}:"
            f"{route['port']}/ (its link: bai-cluster session app {details.name} {route['app']})"
        )
    if details.job:
        lines.append("  " + job_text(details.name, details.job))
    return lines + attempts_text(details)


def attempts_text(details: api.SessionDetails) -> list[str]:
    """A batch session that restarted: a line per attempt, oldest first."""
    if details.attempt is None and not details.attempts:
        return []
    lines = [f"  attempts (restarts: {len(details.attempts)}):"]
    for earlier in details.attempts:
        text = job_text(details.name, earlier).split(": ", 1)[1]
        lines.append(
            f"    {earlier.get('attempt')}: {text}; started again: "
            f"{earlier.get('restarted_because') or '?'}"
        )
    now = details.attempt if details.attempt is not None else len(details.attempts)
    state = "waiting to start again" if details.pending is not None else "the last one"
    lines.append(f"    {now}: {state} (logs: bai-cluster session logs {details.name} --attempt K)")
    return lines


def job_text(name: str, job: api.JobResult | dict[str, Any]) -> str:
    """One line: what a batch session's command came to."""
    data = asdict(job) if isinstance(job, api.JobResult) else dict(job)
    state = str(data.get("state"))
    code = data.get("exit_code")
    text = f"batch session {name}: {state}"
    if code is not None and state not in ("running", "starting"):
        text += f", exit code {code}" + (f" ({data['signal']})" if data.get("signal") else "")
    started, ended = data.get("started"), data.get("ended")
    if started and ended:
        text += f", ran {float(ended) - float(started):.1f} s"
    if data.get("reason"):
        text += f" - {data['reason']}"
    return text


def list_text(rows: list[api.SessionRow]) -> list[str]:
    """``session list``: one line a session (a PENDING one: its place in the queue)."""
    head = [("NAME", "SESSION-ID", "SIZE", "MODE", "OWNER", "AGENTS", "STATE")]
    body = [
        (
            r.name,
            r.session_id,
            f"{r.running}/{r.size}",
            r.mode,
            r.owner or "-",
            ",".join(r.agents),
            (f"PENDING (#{r.position} in {r.resource_group}: {r.reason})")
            if r.state == "PENDING"
            else (f"batch {r.state}" if r.type == "batch" else r.state)
            + (f" (exit {r.exit_code})" if r.exit_code is not None else "")
            + (f" ({format_duration(r.time_left)} left)" if r.time_left is not None else "")
            + (f" ({', '.join(r.unreachable)} does not answer)" if r.unreachable else ""),
        )
        for r in rows
    ]
    return table(head + body)


def _ends(session: Any) -> str:
    """When a session with a lifetime ends, and its warning before it."""
    deadline = getattr(session, "deadline", None)
    at = time.strftime(", until %Y-%m-%d %H:%M:%S UTC", time.gmtime(deadline)) if deadline else ""
    signal, _at, lead = (getattr(session, "end_signal", "") or "").partition("@")
    warned = f"; {signal} {lead} s before" if signal else ""
    return f"{at} (session reconcile ends it then{warned})"


def explain_text(queued: Mapping[str, Any]) -> list[str]:
    """bai-cluster session explain: a queued session's place and priority, factor by
    factor (scheduling/queue/queue_order.py's explain, which the pass's order uses)."""
    why = queued.get("explain") or {}
    lines = [
        f"session {queued.get('name')} is PENDING: number {queued.get('position')} in the "
        f"queue of resource group {queued.get('resource_group')} "
        f"(order: {why.get('order', 'priority')})"
    ]
    factors = why.get("factors") or {}
    if factors:
        parts = [
            f"{name} {f['value']:.3f} x {f['weight']:g} = {f['points']:.0f}"
            for name, f in factors.items()
        ]
        lines.append(f"  priority {why.get('priority')} = " + " + ".join(parts))
        lines.append(
            f"  owner {why.get('owner') or '(none)'}: {why.get('owner_usage_units', 0):.1f} "
            f"units used (decayed, half-life {_days(why.get('half_life_s'))}), share "
            f"{why.get('owner_share', 0):.3f} of the owners that count"
        )
        lines.append(
            f"  waited {_days(why.get('waited_s'))} (the age factor is full at "
            f"{_days(why.get('age_max_s'))})"
        )
    if why.get("order") == "fifo":
        lines.append("  the queue goes in submission order (bai_session_policies.queue.order)")
    now = why.get("pass")
    if not now:  # the reason the last scheduler pass recorded
        return [*lines, f"  waits: {queued.get('reason') or 'for its turn'} ({queued.get('wait')})"]
    return lines + _pass_lines(now)


def _pass_lines(now: Mapping[str, Any]) -> list[str]:
    """What the scheduler pass decides now (explain.pass): where it starts, else why it
    waits, what it claims, when it could start, and why it does not backfill."""
    if now.get("starts"):
        ahead = now.get("behind") or []
        jump = f", ahead of {', '.join(ahead)} (backfill)" if ahead else ""
        return [f"  the next scheduler pass starts it on {', '.join(now['agents'])}{jump}"]
    lines = [f"  waits: {now.get('reason') or 'for its turn'} ({now.get('wait')})"]
    if now.get("claims"):
        lines.append(f"  it claims {', '.join(now['claims'])}: nobody behind it starts there")
    at = now.get("earliest_start_in_s")
    if at is not None:
        lines.append(
            f"  earliest start: in {format_duration(at)} (from the running sessions' lifetimes)"
        )
    elif now.get("backfill") and now.get("claims"):
        lines.append("  earliest start: unknown (a session in its way has no lifetime)")
    if now.get("no_backfill"):
        lines.append(f"  no backfill: {now['no_backfill']}")
    return lines


def _days(seconds: Any) -> str:
    value = float(seconds or 0)
    if value >= 86400:
        return f"{value / 86400:.1f} d"
    if value >= 3600:
        return f"{value / 3600:.1f} h"
    return f"{value:.0f} s"
