"""``bai-cluster agent ...``: the parser of the agent commands, what each runs and what
it prints (list and show: :mod:`agent_view`'s table and details)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.hosts import agent_view

from .. import api
from ..errors import EXIT_FAILED, EXIT_OK
from .common import Context, UsageError, emit_json


# --- the parser -----------------------------------------------------------------------
def add_parser(
    top: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """``agent ACTION``: list, show, check, pause, drain, activate, remove (in this order)."""
    agent = top.add_parser(
        "agent",
        parents=[common],
        help="the agents: list, show, check, pause, drain, activate, remove",
        description="The inventory's agents as the cluster sees them, whether they take "
        "new sessions, their health, and taking one out of the cluster (agent_list.yml, "
        "agent_check.yml, agent_availability.yml, agent_drain.yml, agent_remove.yml).",
    )
    agents = agent.add_subparsers(dest="action", required=True, metavar="ACTION")
    agents.add_parser(
        "list",
        parents=[common],
        help="every agent: availability, health, offer, what is given out, sessions",
    )
    agent_show = agents.add_parser("show", parents=[common], help="one agent in detail")
    agent_show.add_argument("name")
    check = agents.add_parser(
        "check",
        parents=[common],
        help="run the agent's health checks now and print each (exit 1: one failed)",
        description="The agent-side checks of the health gate, now: its engine answers, "
        "full-size packets reach the swarm managers, its data folders are there, its GPUs "
        "are usable, its disk has the floor free (agent_check.yml; changes nothing).",
    )
    check.add_argument("name")
    pause = agents.add_parser(
        "pause",
        parents=[common],
        help="no new sessions on the agent (its sessions keep running)",
        description="Pause an agent: no new session is placed on it or admitted by it; the "
        "sessions there keep running and a rerun still repairs them. Until agent activate.",
    )
    pause.add_argument("name")
    pause.add_argument("--reason", help="why (recorded with who and when)")
    _add_drain_activate_remove(agents, common)


def _drain_options() -> argparse.ArgumentParser:
    """The drain's options; agent remove drains with the same."""
    draining = argparse.ArgumentParser(add_help=False)
    draining.add_argument(
        "--timeout",
        type=int,
        default=api.DRAIN_TIMEOUT_S,
        metavar="SECONDS",
        help=f"how long to wait for the sessions to end (default {api.DRAIN_TIMEOUT_S})",
    )
    draining.add_argument(
        "--force", action="store_true", help="destroy the sessions left after the timeout"
    )
    draining.add_argument("--reason", help="why (recorded with who and when)")
    return draining


def _add_drain_activate_remove(
    agents: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    draining = _drain_options()
    drain = agents.add_parser(
        "drain",
        parents=[common, draining],
        help="no new sessions, then wait for the agent's sessions to end",
        description="Drain an agent: as pause, then wait until no session is left on it. "
        "Sessions left after the timeout fail the command (the agent stays drained), or "
        "with --force are destroyed. Until agent activate.",
    )
    drain.add_argument("name")
    activate = agents.add_parser(
        "activate", parents=[common], help="put a paused or drained agent back in service"
    )
    activate.add_argument("name")
    remove = agents.add_parser(
        "remove",
        parents=[common, draining],
        help="take the agent out of the cluster (drain, leave the swarm, forget it)",
        description="Remove an agent (agent_remove.yml): drain it as agent drain does "
        "(sessions left stop the removal unless --force), make it leave the swarm, remove "
        "its node entry, drop it from the session ledger and from the other hosts' "
        "firewalls. --dead: it is powered off or does not answer; nothing contacts it, "
        "its sessions end on the agents that answer. Then take it out of the inventory; "
        "site.yml adds it back.",
    )
    remove.add_argument("name")
    remove.add_argument(
        "--dead",
        action="store_true",
        help="the agent is down: contact nothing there, end its sessions elsewhere",
    )


# --- what it prints -------------------------------------------------------------------
def availability_text(done: api.AgentAvailability) -> list[str]:
    """``agent pause`` / ``activate``: the agent's availability now, the sessions there."""
    lines = [f"agent {done.name}: {done.text}"]
    held = done.availability != "active"
    if done.session_names:
        keep = " (they keep running; a rerun still repairs them)" if held else ""
        lines.append(f"  sessions there{keep}: {', '.join(done.session_names)}")
    if not done.told_agent:
        lines.append(
            "  the agent did not answer: recorded in the cluster only (placement passes over "
            "it); run this again once it answers, so that it refuses new sessions itself too"
        )
    if held:
        lines.append(f"  no new sessions there until: bai-cluster agent activate {done.name}")
    return lines


def drain_text(done: api.Drained) -> list[str]:
    """``agent drain``: drained, and no sessions left or the ones destroyed."""
    marked = done.availability.text if done.availability else "drained"
    lines = [f"agent {done.name}: {marked}"]
    if done.forced:
        lines.append(
            f"  {len(done.left)} session(s) still there after the wait, destroyed (--force):"
        )
        for row in done.destroyed:
            count = len(row.get("containers") or [])
            lines.append(f"  destroyed session {row.get('name')}: {count} container(s)")
            again = done.restarted.get(str(row.get("name")))
            if again:
                started = done.schedule is not None and row.get("name") in done.schedule.started
                lines.append(
                    f"    its gang starts again (attempt {again.get('attempt')}): "
                    + ("started elsewhere" if started else "queued at the head of its group")
                )
    else:
        lines.append("  no sessions left on it")
    lines.append(f"  no new sessions there until: bai-cluster agent activate {done.name}")
    return lines


def remove_text(done: api.Removed) -> list[str]:
    """``agent remove``: what went, and what the operator does next."""
    how = " (it was down: nothing contacted it)" if done.dead else ""
    lines = [f"agent {done.name}: out of the cluster{how}"]
    if done.node:
        lines.append(f"  swarm node {done.node.get('id')} removed")
    if done.dropped:
        lines.append(f"  the session ledger dropped {', '.join(done.dropped)}")
    for row in done.destroyed:
        count = len(row.get("containers") or [])
        lines.append(f"  ended session {row.get('name')}: {count} container(s) removed")
    if not (done.node or done.dropped or done.destroyed):
        lines.append("  nothing of it was left (removed already)")
    lines.append(
        f"  next: take {done.name} out of the inventory; to add it back, run site.yml "
        f"(it takes sessions once its engine, swarm membership and firewall are set up)"
    )
    return lines


class DrainWait:
    """Progress of ``agent drain`` (also without -v): the wait for the agent's sessions
    to end, one line when it starts and one each time the sessions left change."""

    TASK = "Read the sessions left on the agent"

    def __init__(self, timeout_s: int) -> None:
        self.timeout_s = timeout_s
        self.left: list[str] | None = None

    def feed(self, event: dict[str, Any]) -> list[str]:
        data = event.get("event_data") or {}
        if not str(data.get("task") or "").startswith(self.TASK):
            return []
        kind = event.get("event")
        if kind == "playbook_on_task_start":
            return [f"drain: waiting up to {self.timeout_s} s for the agent's sessions to end"]
        if kind not in ("runner_retry", "runner_on_ok"):
            return []
        sessions = (data.get("res") or {}).get("sessions") or []
        names = sorted({str(s.get("name")) for s in sessions})
        if names == self.left:
            return []
        self.left = names
        if not names:
            return [f"drain: {data.get('host')}: no sessions left"]
        return [f"drain: {data.get('host')}: {len(names)} session(s) left: {', '.join(names)}"]


# --- the commands ---------------------------------------------------------------------
def run(ctx: Context) -> int:
    """``bai-cluster agent ACTION``: progress lines only with -v (plays and tasks), but for
    the wait of a drain."""
    action = ctx.args.action
    handler = ACTIONS.get(action)
    if handler is None:  # pragma: no cover
        raise UsageError(f"unknown command agent {action}")
    return handler(ctx)


def list_(ctx: Context) -> int:
    rows, totals = api.list_agents(on_event=ctx.verbose_plays(), **ctx.common)
    if ctx.as_json:
        emit_json({"agents": rows, "totals": totals})
    elif rows:
        print("\n".join(agent_view.table(rows)))
    else:
        print("no agents in this inventory")
    return EXIT_OK


def show(ctx: Context) -> int:
    row = api.show_agent(ctx.args.name, on_event=ctx.verbose_plays(), **ctx.common)
    if ctx.as_json:
        emit_json(row)
    else:
        print("\n".join(agent_view.details(row)))
    return EXIT_OK


def check(ctx: Context) -> int:
    done = api.check_agent(ctx.args.name, on_event=ctx.verbose_plays(), **ctx.common)
    if ctx.as_json:
        emit_json(asdict(done))
    else:
        print("\n".join(health_text(done)))
    return EXIT_OK if done.healthy else EXIT_FAILED


def health_text(done: api.AgentHealth) -> list[str]:
    """``agent agent2: not healthy (disk)`` and a line per check."""
    if not done.answered:
        return [f"agent {done.name}: did not answer: {done.problem}"]
    failed = [c.get("check") for c in done.failed]
    head = "healthy" if done.healthy else f"not healthy ({', '.join(map(str, failed))})"
    width = max((len(str(c.get("check"))) for c in done.checks), default=0)
    return [f"agent {done.name}: {head}"] + [
        f"  {str(c.get('check')).ljust(width)}  {str(c.get('status')).ljust(6)}  {c.get('detail')}"
        for c in done.checks
    ]


def set_availability(ctx: Context) -> int:
    """``agent pause`` and ``agent activate``."""
    args = ctx.args
    done = api.set_agent_availability(
        args.name,
        "pause" if args.action == "pause" else "active",
        reason=getattr(args, "reason", None),
        on_event=ctx.verbose_plays(),
        **ctx.common,
    )
    if ctx.as_json:
        emit_json(asdict(done))
    else:
        print("\n".join(availability_text(done)))
    return EXIT_OK


def drain_or_remove(ctx: Context) -> int:
    """``agent drain`` and ``agent remove``: the wait for the agent's sessions shows also
    without -v (not for a dead agent: nothing waits on it)."""
    args, common = ctx.args, ctx.common
    plays = ctx.verbose_plays()
    wait = DrainWait(args.timeout)
    dead = args.action == "remove" and args.dead

    def draining(event: dict[str, Any]) -> None:
        plays(event)
        if not dead:  # nothing waits on an agent that is down
            ctx.printer(wait.feed(event))

    options = dict(timeout_s=args.timeout, force=args.force, reason=args.reason)
    if args.action == "drain":
        drained = api.drain_agent(args.name, on_event=draining, **options, **common)
        lines = drain_text(drained)
        outcome: Any = drained
    else:
        removed = api.remove_agent(args.name, dead=dead, on_event=draining, **options, **common)
        lines = remove_text(removed)
        outcome = removed
    if ctx.as_json:
        emit_json(asdict(outcome))
    else:
        print("\n".join(lines))
    return EXIT_OK


ACTIONS: dict[str, Callable[[Context], int]] = {
    "list": list_,
    "show": show,
    "check": check,
    "pause": set_availability,
    "activate": set_availability,
    "drain": drain_or_remove,
    "remove": drain_or_remove,
}
