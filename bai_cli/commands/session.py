"""``bai-cluster session ...``: the parser of the session commands and what each runs
(``session run`` and ``logs``: :mod:`.batch`)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import asdict

from ansible_collections.bai.cluster.plugins.module_utils.containers.destroy import (
    text as destroy_text,
)
from ansible_collections.bai.cluster.plugins.plugin_utils.ledger_text import (
    reconcile_lines,
    schedule_lines,
)

from .. import api
from ..errors import EXIT_FAILED, EXIT_OK
from ..progress import SessionProgress
from . import apps
from .batch import print_logs, run_batch
from .common import Context, UsageError, emit_json
from .session_options import add_create_options, check_options, create_spec
from .session_text import details_text, explain_text, list_text, session_text

# --- the parser -----------------------------------------------------------------------
# --owner of destroy, show and logs (a login host's users act on their own sessions).
OWNER_ONLY = "only when NAME holds the session (another owner's is refused, nothing changed)"


def add_parser(
    top: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """``session ACTION``: create, run, schedule, destroy, list, reconcile, show, logs, env,
    ssh, app (in this order in the help)."""
    session = top.add_parser("session", parents=[common], help="cluster sessions")
    sub = session.add_subparsers(dest="action", required=True, metavar="ACTION")
    _add_create_and_run(sub, common)
    _add_ledger_actions(sub, common)
    _add_inspection(sub, common)
    apps.add_parser(sub, common, OWNER_ONLY)


def _add_create_and_run(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """create, and run: a batch session (the create's options, and its own)."""
    create = sub.add_parser(
        "create",
        parents=[common],
        help="create a session",
        description="Create a session (session_create.yml). Options mirror its variables.",
    )
    add_create_options(create)
    create.add_argument(
        "--app",
        action="append",
        metavar="APP|NAME=http:PORT",
        help="NAME=http:PORT: declare your own web port in main1, routed by the app proxy "
        "(session_apps); APP: open that app once the session is made and print its link "
        "(repeatable)",
    )
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
    run.add_argument(
        "--restarts",
        type=int,
        metavar="N",
        help="start the whole gang again, at most N times, after an agent was lost, a drain, "
        "or a member was gone or killed by a signal or for memory (session_restarts)",
    )
    run.add_argument(
        "--restart-on",
        metavar="CODE[,CODE...]",
        help="exit codes of the command that restart the gang too, e.g. 75 "
        "(session_restart_on; needs --restarts)",
    )
    run.add_argument(
        "--preemptible",
        action="store_true",
        help="a queued session of a higher priority may stop it; it then starts again "
        "through its restarts (session_preemptible; needs --restarts and --detach)",
    )


def _add_ledger_actions(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """schedule, destroy, list, reconcile."""
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
    destroy.add_argument("--owner", metavar="NAME", help=OWNER_ONLY)
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


def _add_inspection(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """show, logs, signal, env, ssh."""
    show = sub.add_parser("show", parents=[common], help="containers, agents, addresses, ports")
    show.add_argument("name")
    show.add_argument("--owner", metavar="NAME", help=OWNER_ONLY)
    explain = sub.add_parser(
        "explain",
        parents=[common],
        help="why a queued (PENDING) session is where it is: its priority's factors",
        description="For a queued session: its place in the queue, the order "
        "(bai_session_policies.queue), its priority and each factor with its weight, its "
        "owner's decayed usage and share, and why it waits (the last scheduler pass's "
        "reason). The pass orders the queue with the same function.",
    )
    explain.add_argument("name")
    explain.add_argument("--owner", metavar="NAME", help=OWNER_ONLY)
    logs = sub.add_parser(
        "logs",
        parents=[common],
        help="what a container printed (a batch session's: also once it is gone)",
        description="Print what HOST (--member, default main1) printed: for main1 of a "
        "batch session its command's output; once a batch session is gone, what was kept "
        "of it when it was destroyed.",
    )
    logs.add_argument("name")
    logs.add_argument("--owner", metavar="NAME", help=OWNER_ONLY)
    logs.add_argument("--member", default="main1", metavar="HOST", help="e.g. sub1")
    logs.add_argument(
        "--follow", "-f", action="store_true", help="keep printing until the container stops"
    )
    logs.add_argument(
        "--attempt",
        type=int,
        metavar="K",
        help="a batch session that restarted: attempt K's output (0 the first; default the last)",
    )
    signal = sub.add_parser(
        "signal",
        parents=[common],
        help="send a signal to every member at once",
        description="Send SIGNAL (USR1, TERM, ...; SIG optional, or its number) to every "
        "process of user work in every container of the session at once - not to SSH's "
        "own processes.",
    )
    signal.add_argument("name")
    signal.add_argument("signal", metavar="SIGNAL")
    signal.add_argument("--owner", metavar="NAME", help=OWNER_ONLY)
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


# --- the commands ---------------------------------------------------------------------
def run(ctx: Context) -> int:
    """``bai-cluster session ACTION``: the numeric options checked, then the action (progress
    lines only with -v, but for create and run: their steps)."""
    check_options(ctx.args)
    action = ctx.args.action
    handler = ACTIONS.get(action)
    if handler is None:  # pragma: no cover
        raise UsageError(f"unknown command {ctx.args.command} {action}")
    return handler(ctx)


def create(ctx: Context) -> int:
    args = ctx.args
    spec = create_spec(args)
    given = list(args.app or [])
    spec["apps"] = [a for a in given if "=" in a] or None
    steps = SessionProgress(ctx.verbose)
    session = api.create_session(
        args.name,
        args.size,
        on_event=lambda event: ctx.printer(steps.feed(event)),
        **ctx.common,
        **spec,
    )
    if not ctx.as_json:
        print("\n".join(session_text(session)))
    opened = apps.open_after_create(ctx, args.name, [a for a in given if "=" not in a])
    if ctx.as_json:
        emit_json({**session.to_dict(), **({"apps": opened} if opened else {})})
    return EXIT_OK


def destroy(ctx: Context) -> int:
    done = api.destroy_session(
        ctx.args.name,
        force=ctx.args.force,
        owner=ctx.args.owner,
        on_event=ctx.verbose_plays(),
        **ctx.common,
    )
    if ctx.as_json:
        emit_json(asdict(done))
    else:
        print(destroy_text(asdict(done)))
        if done.schedule is not None:
            print("\n".join(schedule_lines(asdict(done.schedule))))
    return EXIT_OK


def schedule(ctx: Context) -> int:
    scheduled = api.schedule_sessions(on_event=ctx.verbose_plays(), **ctx.common)
    if ctx.as_json:
        emit_json(asdict(scheduled))
    else:
        print("\n".join(schedule_lines(asdict(scheduled))))
    return EXIT_OK


def list_(ctx: Context) -> int:
    owner = ctx.args.owner
    rows = api.list_sessions(on_event=ctx.verbose_plays(), owner=owner, **ctx.common)
    if ctx.as_json:
        emit_json([asdict(row) for row in rows])
    elif rows:
        print("\n".join(list_text(rows)))
    else:
        print(f"no sessions of {owner}" if owner else "no sessions")
    return EXIT_OK


def reconcile(ctx: Context) -> int:
    args = ctx.args
    agreed = api.reconcile_sessions(
        check=args.check,
        adopt_ledgers=args.adopt_ledger,
        on_event=ctx.verbose_plays(),
        **ctx.common,
    )
    if ctx.as_json:
        emit_json(asdict(agreed))
    else:
        if args.check:
            print("check mode: nothing was changed; a run would do this:")
        print("\n".join(reconcile_lines(asdict(agreed))))
    return EXIT_OK


def show(ctx: Context) -> int:
    details = api.show_session(
        ctx.args.name, owner=ctx.args.owner, on_event=ctx.verbose_plays(), **ctx.common
    )
    if ctx.as_json:
        emit_json(details.to_dict())
    else:
        print("\n".join(details_text(details)))
    return EXIT_OK


def explain(ctx: Context) -> int:
    details = api.show_session(
        ctx.args.name, owner=ctx.args.owner, on_event=ctx.verbose_plays(), **ctx.common
    )
    queued = details.pending
    if queued is None:
        print(
            f"session {details.name} is not queued (PENDING): nothing to explain", file=sys.stderr
        )
        return EXIT_FAILED
    if ctx.as_json:
        emit_json(
            {key: value for key, value in queued.items() if key != "explain"}
            | dict(queued.get("explain") or {})
        )
    else:
        print("\n".join(explain_text(queued)))
    return EXIT_OK


def logs(ctx: Context) -> int:
    return print_logs(ctx, ctx.verbose_plays())


def signal(ctx: Context) -> int:
    args = ctx.args
    sent = api.signal_session(
        args.name, args.signal, owner=args.owner, on_event=ctx.verbose_plays(), **ctx.common
    )
    if ctx.as_json:
        emit_json(sent)
        return EXIT_OK
    members = sent.get("members") or {}
    times = [float(m["at"]) for m in members.values() if "at" in m]
    spread = f", sent within {1000 * (max(times) - min(times)):.0f} ms" if times else ""
    print(
        f"session {args.name}: {sent.get('signal')} sent to {len(members)} member(s), "
        f"{sum(int(m.get('processes') or 0) for m in members.values())} process(es){spread}"
    )
    return EXIT_OK


def env(ctx: Context) -> int:
    host = ctx.args.host
    envs = api.session_env(ctx.args.name, host, on_event=ctx.verbose_plays(), **ctx.common)
    if ctx.as_json:
        emit_json(envs[host] if host else envs)
    else:
        for name, values in envs.items():
            if not host:
                print(f"# {name}")
            for key, value in values.items():
                print(f"{key}={shlex.quote(value)}")
    return EXIT_OK


def ssh(ctx: Context) -> int:
    """A shell (or the command after --) in a container: run here, or printed where it
    can only be printed (agents reached over SSH)."""
    args = ctx.args
    remote = list(getattr(args, "remote", None) or [])
    details = api.show_session(args.name, on_event=ctx.verbose_plays(), **ctx.common)
    cmd = api.shell_command(details, args.host, remote or None, tty=sys.stdin.isatty())
    if ctx.as_json:
        emit_json({"argv": cmd.argv, "runnable": cmd.runnable, "note": cmd.note})
        return EXIT_OK
    if args.print or not cmd.runnable:
        if cmd.note:
            print(f"# {cmd.note}", file=sys.stderr)
        print(str(cmd))
        return EXIT_OK
    sys.stdout.flush()
    os.execvp(cmd.argv[0], cmd.argv)


ACTIONS: dict[str, Callable[[Context], int]] = {
    "create": create,
    "run": run_batch,
    "schedule": schedule,
    "destroy": destroy,
    "list": list_,
    "reconcile": reconcile,
    "show": show,
    "explain": explain,
    "logs": logs,
    "signal": signal,
    "env": env,
    "ssh": ssh,
    "app": apps.run_app,
}
