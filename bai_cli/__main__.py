"""The ``bai-cluster`` command line (``python -m bai_cli`` does the same).

Progress goes to stderr as it happens, results to stdout (a summary, or JSON with
``--json``). Exit codes: 0 success, 2 bad input, 3 PENDING, 1 anything else.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.containers.destroy import (
    text as destroy_text,
)
from ansible_collections.bai.cluster.plugins.module_utils.containers.listing import format_duration
from ansible_collections.bai.cluster.plugins.module_utils.hosts import agent_view
from ansible_collections.bai.cluster.plugins.module_utils.session.limits import (
    LIMITS,
    Limit,
    check_number,
)
from ansible_collections.bai.cluster.plugins.plugin_utils.ledger_text import (
    reconcile_lines,
    schedule_lines,
)

from . import __version__, api
from .errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, BaiClusterError
from .progress import PlayProgress, Printer, SessionProgress

EPILOG = """exit codes: 0 success, 2 bad input, 3 PENDING (the session cannot be placed now),
1 any other failure (also a drain that left sessions on the agent). Progress goes to stderr,
results to stdout (--json: one JSON document).
"""


class UsageError(ValueError):
    """Bad command-line input (exit code 2, nothing is run)."""


# --- parsing ------------------------------------------------------------------------
def key_value(text: str, what: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise UsageError(f"{what}: expected KEY=VALUE, got {text!r}")
    return key, value


def parse_mount(text: str) -> dict[str, Any]:
    """``SRC:DST[:ro|rw]`` -> ``{"src": SRC, "dst": DST[, "readonly": true]}``."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise UsageError(f"--mount: expected SRC:DST[:ro|rw], got {text!r}")
    mount: dict[str, Any] = {"src": parts[0], "dst": parts[1]}
    if len(parts) == 3:
        if parts[2] not in ("ro", "rw"):
            raise UsageError(f"--mount: the mode must be ro or rw, got {parts[2]!r} in {text!r}")
        mount["readonly"] = parts[2] == "ro"
    return mount


def _number(text: str) -> Any:
    """Whole numbers and decimals as numbers; anything else as given (the playbook
    judges it and says what is allowed)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


# The numeric options and the ranges they are checked against before anything runs
# (module_utils/session/limits.py; docs/sessions.md): option attribute -> (variable, range). The
# size is the spec's, checked with the rest of it by the playbook's first step (exit 2,
# nothing made, the step named).
NUMERIC_OPTIONS: dict[str, tuple[str, Limit]] = {
    "wait": ("session_wait_s", LIMITS["session_wait_s"]),
    "lifetime": ("session_lifetime_s", LIMITS["session_lifetime_s"]),
    "ssh_timeout": ("session_ssh_timeout_s", LIMITS["session_ssh_timeout_s"]),
    "mtu": ("session_network_mtu", LIMITS["session_network_mtu"]),
    "grace": ("session_stop_grace_s", LIMITS["session_stop_grace_s"]),
}


def check_options(args: argparse.Namespace) -> None:
    """Every numeric option within its range, or ``UsageError`` naming the option and
    the range (nothing is run)."""
    for attr, (name, limit) in NUMERIC_OPTIONS.items():
        value = getattr(args, attr, None)
        if value is not None:
            try:
                check_number(name, value, limit)
            except SpecError as exc:
                raise UsageError(f"--{attr.replace('_', '-')}: {exc}") from None


def parse_role(text: str) -> dict[str, Any]:
    """``ROLE=REPLICAS[,image=IMG][,cpu=N][,mem=SIZE][,gpu=N]`` -> a session_roles entry."""
    head, *rest = text.split(",")
    role, replicas = key_value(head, "--role")
    entry: dict[str, Any] = {"role": role, "replicas": _number(replicas)}
    resources: dict[str, Any] = {}
    for part in rest:
        key, value = key_value(part, "--role")
        if key == "image":
            entry["image"] = value
        elif key in ("cpu", "mem", "gpu"):
            resources[key] = value if key == "mem" else _number(value)
        else:
            raise UsageError(f"--role: unknown key {key!r} in {text!r} (image, cpu, mem, gpu)")
    if resources:
        entry["resources"] = resources
    return entry


def read_key(text: str) -> str:
    """An OpenSSH public key line, given as is or as the path of a .pub file."""
    path = os.path.expanduser(text)
    if os.path.isfile(path):
        if not path.endswith(".pub"):
            raise UsageError(f"--authorized-key: {text} is not a .pub file (never a private key)")
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    return text


def create_spec(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :func:`api.create_session` from the parsed options."""
    resources = {
        key: value
        for key, value in (("cpu", args.cpu), ("mem", args.mem), ("gpu", args.gpu))
        if value is not None
    }
    env = dict(key_value(item, "--env") for item in args.env or [])
    return {
        "mode": args.mode,
        "image": args.image,
        "resource_group": args.resource_group,
        "resources": resources or None,
        "mounts": [parse_mount(m) for m in args.mount or []] or None,
        "env": env or None,
        "roles": [parse_role(r) for r in args.role or []] or None,
        "authorized_keys": [read_key(k) for k in args.authorized_key or []] or None,
        "wait_s": args.wait,
        "ssh_timeout_s": args.ssh_timeout,
        "network_mtu": args.mtu,
        "owner": args.owner,
        "lifetime_s": args.lifetime,
        "queue": args.queue or None,
    }


def add_create_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``session create`` (and ``session run``): session_create.yml's
    variables."""
    parser.add_argument("name", help="session name (1-32 of a-z, 0-9, '-')")
    parser.add_argument("-n", "--size", type=int, help="number of containers (session_size)")
    parser.add_argument("--mode", choices=["single-node", "multi-node"], help="session_mode")
    parser.add_argument("--image", help="image of every container (session_image)")
    parser.add_argument("-g", "--resource-group", help="session_resource_group")
    parser.add_argument("--cpu", type=_number, help="CPUs per container (session_resources)")
    parser.add_argument("--mem", help="memory per container, e.g. 512m, 2g")
    parser.add_argument("--gpu", type=_number, help="GPUs per container")
    parser.add_argument(
        "--mount", action="append", metavar="SRC:DST[:ro]", help="a data folder (repeatable)"
    )
    parser.add_argument(
        "--env", "-e", action="append", metavar="KEY=VALUE", help="environment (repeatable)"
    )
    parser.add_argument(
        "--role",
        action="append",
        metavar="ROLE=N[,image=I][,cpu=C][,mem=M][,gpu=G]",
        help="heterogeneous roles in order, the first is the master (session_roles)",
    )
    parser.add_argument(
        "--authorized-key",
        action="append",
        metavar="KEY|FILE.pub",
        help="a person's public key for SSH through the app proxy (session_authorized_keys)",
    )
    parser.add_argument(
        "--wait", type=float, metavar="SECONDS", help="wait this long for capacity when PENDING"
    )
    parser.add_argument(
        "--owner",
        help="who holds the session (session_owner; default: the user running this); "
        "bai_session_policies limit what one owner holds",
    )
    parser.add_argument(
        "--lifetime",
        type=int,
        metavar="SECONDS",
        help="end the session this long after it started running (session_lifetime_s; "
        "session reconcile ends it)",
    )
    parser.add_argument(
        "--queue",
        action="store_true",
        help="when it does not fit now, queue it (PENDING) and return; it starts in "
        "submission order when a scheduler pass finds room (session_queue)",
    )
    parser.add_argument("--ssh-timeout", type=int, metavar="SECONDS", help="per-container sshd")
    parser.add_argument("--mtu", type=int, help="session network MTU")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: the options work before and after the sub-command without the
    # sub-parser's defaults overwriting what was given before it.
    common.add_argument(
        "-i",
        "--inventory",
        default=argparse.SUPPRESS,
        help="inventory (default: the lab, from ansible.cfg); relative paths are also "
        "looked up in the repository, e.g. -i inventories/local",
    )
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON on stdout"
    )
    common.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="more progress detail (-vv and more: ansible verbosity too)",
    )
    common.add_argument(
        "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress lines"
    )
    common.add_argument("--keep-runner-dir", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    parser = argparse.ArgumentParser(
        prog="bai-cluster",
        description="Backend.AI-style cluster sessions on Docker (runs the project's "
        "playbooks through ansible-runner).",
        epilog=EPILOG,
        parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    top = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    lab = top.add_parser("lab", parents=[common], help="bring the embedded lab up or down")
    lab.add_argument("state", choices=["up", "down"])

    site = top.add_parser("site", parents=[common], help="converge site.yml")
    site.add_argument("--tags", help="only these roles' plays, e.g. docker_engine,docker_swarm")

    session = top.add_parser("session", parents=[common], help="cluster sessions")
    sub = session.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = sub.add_parser(
        "create",
        parents=[common],
        help="create a session",
        description="Create a session (session_create.yml). Options mirror its variables.",
    )
    add_create_options(create)
    run = sub.add_parser(
        "run",
        parents=[common],
        help="run a command across a new batch session to its end",
        description="Create a batch session, run COMMAND (after --, one shell line) in main1 "
        "once every container is up, print its output as it comes and exit with its exit "
        "code; the session is destroyed when the command ends (its output is kept: session "
        "logs). Ctrl-C stops the command and destroys the session.",
    )
    add_create_options(run)
    keep = run.add_mutually_exclusive_group()
    keep.add_argument("--keep", action="store_true", help="keep the session after the command")
    keep.add_argument(
        "--keep-on-failure",
        action="store_true",
        help="keep the session when the command did not succeed, for inspection",
    )
    keep.add_argument(
        "--detach",
        action="store_true",
        help="return once the command has started; the session stops itself when it ends "
        "(session reconcile then removes it and keeps its output)",
    )
    run.add_argument(
        "--grace",
        type=int,
        metavar="SECONDS",
        help="a stopped command gets SIGTERM, then SIGKILL after this long (default 10)",
    )
    sub.add_parser(
        "schedule",
        parents=[common],
        help="start the queued (PENDING) sessions that fit now, in queue order",
        description="The scheduler pass (playbooks/session_schedule.yml, one run per "
        "session it starts). destroy and reconcile run it while sessions are queued; the "
        "session_housekeeping role runs it every minute.",
    )
    destroy = sub.add_parser(
        "destroy", parents=[common], help="destroy a session (cancel a queued one)"
    )
    destroy.add_argument("name")
    destroy.add_argument(
        "--force",
        action="store_true",
        help="release the session even when an agent holding part of it does not answer "
        "(session reconcile removes that part once it answers)",
    )
    listing = sub.add_parser("list", parents=[common], help="list the sessions")
    listing.add_argument("--owner", metavar="NAME", help="only the sessions NAME holds")
    reconcile = sub.add_parser(
        "reconcile",
        parents=[common],
        help="make the session ledger agree with what the agents run",
        description="Read every agent, then drop reservations whose containers are gone, "
        "adopt complete sessions the ledger lacks, remove what dead creates left "
        "incomplete, and rebuild a missing or damaged ledger (session_reconcile.yml).",
    )
    reconcile.add_argument(
        "--check", action="store_true", help="report what it would do, change nothing"
    )
    reconcile.add_argument(
        "--adopt-ledger",
        action="append",
        default=[],
        metavar="ID",
        help="take in the sessions of another session ledger that is gone for good (its ID "
        "as reconcile reports it); repeatable",
    )
    show = sub.add_parser("show", parents=[common], help="containers, agents, addresses, ports")
    show.add_argument("name")
    logs = sub.add_parser(
        "logs",
        parents=[common],
        help="what a container printed (a batch session's: also once it is gone)",
        description="Print what HOST (--member, default main1) printed: for main1 of a "
        "batch session its command's output; once a batch session is gone, what was kept "
        "of it when it was destroyed.",
    )
    logs.add_argument("name")
    logs.add_argument("--member", default="main1", metavar="HOST", help="e.g. sub1")
    logs.add_argument(
        "--follow", "-f", action="store_true", help="keep printing until the container stops"
    )
    env = sub.add_parser("env", parents=[common], help="the containers' cluster environment")
    env.add_argument("name")
    env.add_argument("host", nargs="?", help="one container (e.g. sub1); default: all")
    ssh = sub.add_parser(
        "ssh",
        parents=[common],
        help="a shell as user work in a container",
        description="Open a shell as user work in HOST (default main1), or run COMMAND "
        "there (after --). On real hosts the command through the app proxy is printed.",
    )
    ssh.add_argument("name")
    ssh.add_argument("host", nargs="?")
    ssh.add_argument("--print", action="store_true", help="print the command, do not run it")

    agent = top.add_parser(
        "agent",
        parents=[common],
        help="the agents: list, show, pause, drain, activate, remove",
        description="The inventory's agents as the cluster sees them, whether they take "
        "new sessions, and taking one out of the cluster (agent_list.yml, "
        "agent_availability.yml, agent_drain.yml, agent_remove.yml).",
    )
    agents = agent.add_subparsers(dest="action", required=True, metavar="ACTION")
    agents.add_parser(
        "list",
        parents=[common],
        help="every agent: availability, health, offer, what is given out, sessions",
    )
    agent_show = agents.add_parser("show", parents=[common], help="one agent in detail")
    agent_show.add_argument("name")
    pause = agents.add_parser(
        "pause",
        parents=[common],
        help="no new sessions on the agent (its sessions keep running)",
        description="Pause an agent: no new session is placed on it or admitted by it; the "
        "sessions there keep running and a rerun still repairs them. Until agent activate.",
    )
    pause.add_argument("name")
    pause.add_argument("--reason", help="why (recorded with who and when)")
    # The drain's options; agent remove drains with the same.
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
    return parser


# --- output -------------------------------------------------------------------------
def emit_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def table(rows: Sequence[Sequence[Any]]) -> list[str]:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip()
        for row in rows
    ]


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
        lines.append(f"  lifetime: {format_duration(left)} left (session reconcile ends it then)")
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
        return pending_text(details)
    if not details.containers and details.job:
        return [
            job_text(details.name, details.job) + f" (id {details.session_id}; removed: its "
            f"output: bai-cluster session logs {details.name} [--member HOST])"
        ]
    lines = [
        f"session {details.name} ({details.state}): id {details.session_id}, {details.mode}, "
        f"{details.size} container(s), network {details.network or 'none'}"
    ]
    rows = [("HOST", "ROLE", "STATE", "AGENT", "CONTAINER", "ADDRESSES", "PORTS")]
    for c in details.containers:
        addresses = ",".join(f"{ip} ({net})" for net, ip in c.addresses.items()) or "-"
        ports = ",".join(f"{p}->{','.join(b)}" for p, b in c.ports.items()) or "-"
        rows.append((c.host, c.role, c.state or "-", c.agent, c.container, addresses, ports))
    lines += ["  " + line for line in table(rows)]
    if details.ssh_port:
        lines.append(f"  main1 sshd published on {details.ssh_agent} port {details.ssh_port}")
    if details.appproxy_route:
        lines.append(f"  through the app proxy: {details.appproxy_route['ssh']}")
    if details.job:
        lines.append("  " + job_text(details.name, details.job))
    return lines


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


# --- commands -------------------------------------------------------------------------
def run_agent_command(
    args: argparse.Namespace, printer: Printer, common: dict[str, Any], verbose: int
) -> int:
    """``bai-cluster agent ...``: progress lines only with -v (plays and tasks), but for
    the wait of a drain."""
    as_json = bool(getattr(args, "json", False))
    progress = PlayProgress(verbose)

    def plays(event: dict[str, Any]) -> None:
        if verbose:
            printer(progress.feed(event))

    action = args.action
    if action == "list":
        rows, totals = api.list_agents(on_event=plays, **common)
        if as_json:
            emit_json({"agents": rows, "totals": totals})
        elif rows:
            print("\n".join(agent_view.table(rows)))
        else:
            print("no agents in this inventory")
        return EXIT_OK
    if action == "show":
        row = api.show_agent(args.name, on_event=plays, **common)
        if as_json:
            emit_json(row)
        else:
            print("\n".join(agent_view.details(row)))
        return EXIT_OK
    if action in ("pause", "activate"):
        done = api.set_agent_availability(
            args.name,
            "pause" if action == "pause" else "active",
            reason=getattr(args, "reason", None),
            on_event=plays,
            **common,
        )
        if as_json:
            emit_json(asdict(done))
        else:
            print("\n".join(availability_text(done)))
        return EXIT_OK
    if action in ("drain", "remove"):
        wait = DrainWait(args.timeout)
        dead = action == "remove" and args.dead

        def draining(event: dict[str, Any]) -> None:
            plays(event)
            if not dead:  # nothing waits on an agent that is down
                printer(wait.feed(event))

        options = dict(timeout_s=args.timeout, force=args.force, reason=args.reason)
        if action == "drain":
            drained = api.drain_agent(args.name, on_event=draining, **options, **common)
            lines = drain_text(drained)
            outcome: Any = drained
        else:
            removed = api.remove_agent(args.name, dead=dead, on_event=draining, **options, **common)
            lines = remove_text(removed)
            outcome = removed
        if as_json:
            emit_json(asdict(outcome))
        else:
            print("\n".join(lines))
        return EXIT_OK
    raise UsageError(f"unknown command agent {action}")  # pragma: no cover


def run_command(args: argparse.Namespace, printer: Printer) -> int:
    verbose = int(getattr(args, "verbose", 0) or 0)
    as_json = bool(getattr(args, "json", False))
    common: dict[str, Any] = {
        "inventory": getattr(args, "inventory", None),
        "verbosity": max(0, verbose - 1),
        "keep_dir": getattr(args, "keep_runner_dir", None),
    }
    progress = PlayProgress(verbose)

    def plays(event: dict[str, Any]) -> None:
        printer(progress.feed(event))

    if args.command in ("lab", "site"):
        if args.command == "lab":
            summary = api.lab(
                "present" if args.state == "up" else "absent", on_event=plays, **common
            )
        else:
            summary = api.site(tags=args.tags, on_event=plays, **common)
        if as_json:
            emit_json(asdict(summary))
        else:
            for host in sorted(summary.ok):
                print(
                    f"{host}: ok={summary.ok.get(host, 0)} changed={summary.changed.get(host, 0)}"
                )
        return EXIT_OK

    if args.command == "agent":
        return run_agent_command(args, printer, common, verbose)

    action = args.action
    check_options(args)
    if action == "run":
        return run_batch(args, printer, common, verbose)
    if action == "create":
        spec = create_spec(args)
        steps = SessionProgress(verbose)
        session = api.create_session(
            args.name,
            args.size,
            on_event=lambda event: printer(steps.feed(event)),
            **common,
            **spec,
        )
        if as_json:
            emit_json(session.to_dict())
        else:
            print("\n".join(session_text(session)))
        return EXIT_OK
    quiet_events = None if verbose else (lambda event: None)
    if action == "destroy":
        done = api.destroy_session(
            args.name, force=args.force, on_event=quiet_events or plays, **common
        )
        if as_json:
            emit_json(asdict(done))
        else:
            print(destroy_text(asdict(done)))
            if done.schedule is not None:
                print("\n".join(schedule_lines(asdict(done.schedule))))
        return EXIT_OK
    if action == "schedule":
        scheduled = api.schedule_sessions(on_event=quiet_events or plays, **common)
        if as_json:
            emit_json(asdict(scheduled))
        else:
            print("\n".join(schedule_lines(asdict(scheduled))))
        return EXIT_OK
    if action == "list":
        rows = api.list_sessions(on_event=quiet_events or plays, owner=args.owner, **common)
        if as_json:
            emit_json([asdict(row) for row in rows])
        elif rows:
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
            print("\n".join(table(head + body)))
        else:
            print(f"no sessions of {args.owner}" if args.owner else "no sessions")
        return EXIT_OK
    if action == "reconcile":
        agreed = api.reconcile_sessions(
            check=args.check,
            adopt_ledgers=args.adopt_ledger,
            on_event=quiet_events or plays,
            **common,
        )
        if as_json:
            emit_json(asdict(agreed))
        else:
            if args.check:
                print("check mode: nothing was changed; a run would do this:")
            print("\n".join(reconcile_lines(asdict(agreed))))
        return EXIT_OK
    if action == "show":
        details = api.show_session(args.name, on_event=quiet_events or plays, **common)
        if as_json:
            emit_json(details.to_dict())
        else:
            print("\n".join(details_text(details)))
        return EXIT_OK
    if action == "logs":
        return print_logs(args, printer, common, quiet_events or plays)
    if action == "env":
        envs = api.session_env(args.name, args.host, on_event=quiet_events or plays, **common)
        if as_json:
            emit_json(envs[args.host] if args.host else envs)
        else:
            for host, values in envs.items():
                if not args.host:
                    print(f"# {host}")
                for key, value in values.items():
                    print(f"{key}={shlex.quote(value)}")
        return EXIT_OK
    if action == "ssh":
        remote = list(getattr(args, "remote", None) or [])
        details = api.show_session(args.name, on_event=quiet_events or plays, **common)
        cmd = api.shell_command(details, args.host, remote or None, tty=sys.stdin.isatty())
        if as_json:
            emit_json({"argv": cmd.argv, "runnable": cmd.runnable, "note": cmd.note})
            return EXIT_OK
        if args.print or not cmd.runnable:
            if cmd.note:
                print(f"# {cmd.note}", file=sys.stderr)
            print(str(cmd))
            return EXIT_OK
        sys.stdout.flush()
        os.execvp(cmd.argv[0], cmd.argv)
    raise UsageError(f"unknown command {args.command} {action}")  # pragma: no cover


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


def follow_output(details: api.Session, host: str | None, to_stderr: bool = False) -> int:
    """Print what ``host`` prints until its container stops (``to_stderr``: on stderr, so
    that stdout holds only --json's document); returns docker logs' exit code."""
    command = api.logs_command(details, host, follow=True)
    master = details.container(None)
    only_stdout = details.type == "batch" and details.container(host).host == master.host
    sys.stdout.flush()
    return subprocess.run(
        command.argv,
        stdout=sys.stderr if to_stderr else None,
        stderr=subprocess.DEVNULL if only_stdout else None,
        check=False,
    ).returncode


def ended_job(name: str, done: api.Destroyed, events: Any, common: dict[str, Any]) -> api.JobResult:
    """How a batch session ended, as its destroy found it; or, when something else (a
    session reconcile) destroyed it first, as the session ledger remembers it."""
    if done.job:
        return api.JobResult.from_data(name, done.job)
    try:
        details = api.show_session(name, on_event=events, **common)
    except BaiClusterError:
        details = None
    return api.JobResult.from_data(name, (details.job if details else None) or {"state": "lost"})


def run_batch(
    args: argparse.Namespace, printer: Printer, common: dict[str, Any], verbose: int
) -> int:
    """``session run NAME [create options] -- COMMAND...``: create a batch session, print
    the command's output as it comes, then destroy the session (unless kept) and exit
    with the command's exit code."""
    remote = list(getattr(args, "remote", None) or [])
    if not remote:
        raise UsageError("session run NAME [options] -- COMMAND...: the command is missing")
    if args.queue and not args.detach:
        raise UsageError(
            "session run --queue needs --detach: a queued batch session starts later, when "
            "a scheduler pass finds room, and its command then runs detached"
        )
    spec = create_spec(args)
    spec.update(command=" ".join(remote), stop_grace_s=args.grace)
    steps = SessionProgress(verbose)
    quiet = None if verbose else (lambda event: None)
    as_json = bool(getattr(args, "json", False))
    try:
        session = api.create_session(
            args.name,
            args.size,
            on_event=lambda event: printer(steps.feed(event)),
            **common,
            **spec,
        )
        if session.pending is not None:  # queued (--queue with --detach)
            if as_json:
                emit_json(session.to_dict())
            else:
                print("\n".join(session_text(session)))
                print("  once it starts, the command runs detached (see --detach)")
            return EXIT_OK
        if args.detach:
            if as_json:
                emit_json(session.to_dict())
            else:
                print("\n".join(session_text(session)))
                print(
                    f"  the command runs (detached); its output: bai-cluster session logs "
                    f"{args.name} --follow; the session stops when it ends, and session "
                    f"reconcile removes it (keeping its output)"
                )
            return EXIT_OK
        # The create's summary says where main1 runs and how its agent is reached.
        follow_output(session, None, to_stderr=as_json)
        # main1 has stopped: the command ended. Kept: wait until every member stopped
        # too; else the destroy stops them at once and says what the command came to.
        keep = args.keep or args.keep_on_failure
        job = api.wait_job(args.name, on_event=quiet, **common) if keep else None
        if job is None or (args.keep_on_failure and job.state == "succeeded"):
            done = api.destroy_session(args.name, on_event=quiet, **common)
            keep = False
            job = job or ended_job(args.name, done, quiet, common)
    except KeyboardInterrupt:
        print(
            f"interrupted: stopping the command and destroying session {args.name}",
            file=sys.stderr,
        )
        done = api.destroy_session(args.name, on_event=quiet, **common)
        keep = False
        job = ended_job(args.name, done, quiet, common)
    if as_json:
        emit_json({**asdict(job), "kept": keep})
    else:
        where = (
            f"kept: bai-cluster session destroy {args.name}"
            if keep
            else f"destroyed; its output: bai-cluster session logs {args.name}"
        )
        print(f"{job_text(args.name, job)}; session {where}", file=sys.stderr)
    return job.exit_status


def print_logs(
    args: argparse.Namespace, printer: Printer, common: dict[str, Any], events: Any
) -> int:
    """``session logs NAME [--member HOST] [--follow]``."""
    if args.follow:
        details = api.show_session(args.name, on_event=events, **common)
        if details.containers:
            return follow_output(details, args.member)
        print(f"session {args.name} is gone: printing what was kept of it", file=sys.stderr)
    data = api.session_output(args.name, args.member, on_event=events, **common)
    if getattr(args, "json", False):
        emit_json(data)
        return EXIT_OK
    sys.stdout.write(str(data.get("output") or ""))
    sys.stdout.flush()
    if data.get("source") == "kept":
        printer([f"(kept on {data.get('agent')} when session {args.name} was destroyed)"])
    return EXIT_OK


def split_remote(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``session ssh NAME [HOST] -- COMMAND...``: the arguments before the first ``--``
    and the command after it."""
    argv = list(argv)
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1 :]
    return argv, []


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    own, remote = split_remote(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(own)
    if remote and not (args.command == "session" and args.action in ("ssh", "run")):
        parser.error(
            "a command after -- is only for: session ssh NAME [HOST] -- COMMAND and "
            "session run NAME [options] -- COMMAND"
        )
    args.remote = remote
    printer = Printer(sys.stderr, quiet=bool(getattr(args, "quiet", False)))
    try:
        return run_command(args, printer)
    except UsageError as exc:
        parser.print_usage(sys.stderr)
        print(f"bai-cluster: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BaiClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if getattr(args, "json", False):
            emit_json({"error": exc.to_dict()})
        return exc.exit_code
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
