"""``session run`` (a batch session's command to its end) and ``session logs`` (what a
container printed, or what was kept of a batch session once it is gone)."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import asdict
from typing import Any

from .. import api
from ..errors import EXIT_OK, BaiClusterError
from ..progress import SessionProgress
from .common import Context, UsageError, emit_json
from .session_options import create_spec
from .session_text import job_text, session_text

# How often ``session run`` asks for a scheduler pass while its gang waits to start again.
RESTART_POLL_S = 5


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


def run_batch(ctx: Context) -> int:
    """``session run NAME [create options] -- COMMAND...``: create a batch session, print
    the command's output as it comes, then destroy the session (unless kept) and exit
    with the command's exit code."""
    args, common = ctx.args, ctx.common
    remote = list(getattr(args, "remote", None) or [])
    if not remote:
        raise UsageError("session run NAME [options] -- COMMAND...: the command is missing")
    if args.queue and not args.detach:
        raise UsageError(
            "session run --queue needs --detach: a queued batch session starts later, when "
            "a scheduler pass finds room, and its command then runs detached"
        )
    if args.restarts and (args.keep or args.keep_on_failure):
        raise UsageError(
            "session run --restarts cannot keep the session (--keep, --keep-on-failure): "
            "a gang that starts again replaces it"
        )
    if args.preemptible and not (args.restarts and args.detach):
        raise UsageError(
            "session run --preemptible needs --restarts (a preempted gang starts again "
            "through them) and --detach (a restarted gang runs detached)"
        )
    spec = create_spec(args)
    spec.update(
        command=" ".join(remote),
        stop_grace_s=args.grace,
        restarts=args.restarts,
        restart_on=args.restart_on,
        preemptible=args.preemptible or None,
    )
    steps = SessionProgress(ctx.verbose)
    quiet = None if ctx.verbose else (lambda event: None)
    try:
        session = api.create_session(
            args.name,
            args.size,
            on_event=lambda event: ctx.printer(steps.feed(event)),
            **common,
            **spec,
        )
        if session.pending is not None or args.detach:
            return print_started(ctx, session)
        job, keep = follow_attempts(ctx, session, quiet)
    except KeyboardInterrupt:
        print(
            f"interrupted: stopping the command and destroying session {args.name}",
            file=sys.stderr,
        )
        done = api.destroy_session(args.name, on_event=quiet, **common)
        keep = False
        job = ended_job(args.name, done, quiet, common)
    if ctx.as_json:
        emit_json({**asdict(job), "kept": keep})
    else:
        where = (
            f"kept: bai-cluster session destroy {args.name}"
            if keep
            else f"destroyed; its output: bai-cluster session logs {args.name}"
        )
        print(f"{job_text(args.name, job)}; session {where}", file=sys.stderr)
    return job.exit_status


def follow_attempts(ctx: Context, session: api.Session, quiet: Any) -> tuple[api.JobResult, bool]:
    """Print the command's output until main1 stops, then destroy the session (unless
    kept); while its gang starts again (--restarts), follow each new attempt. Returns
    the last attempt's end, and whether the session is kept."""
    args, common = ctx.args, ctx.common
    while True:
        # The create's summary says where main1 runs and how its agent is reached.
        follow_output(session, None, to_stderr=ctx.as_json)
        # main1 has stopped: the command ended. Kept: wait until every member stopped
        # too; else the destroy stops them at once and says what the command came to.
        keep = args.keep or args.keep_on_failure
        job = api.wait_job(args.name, on_event=quiet, **common) if keep else None
        if job is not None and not (args.keep_on_failure and job.state == "succeeded"):
            return job, keep
        done = api.destroy_session(args.name, on_event=quiet, **common)
        job = job or ended_job(args.name, done, quiet, common)
        if not done.restarted:
            return job, False
        # Its gang starts again: follow the new attempt.
        print(f"{job_text(args.name, job)}; {restart_text(done)}", file=sys.stderr)
        again = next_attempt(args.name, quiet, common)
        if again is None:
            return job, False
        session = again


def restart_text(done: api.Destroyed) -> str:
    again = done.restarted or {}
    return f"its gang starts again (attempt {again.get('attempt')}): {again.get('reason')}"


def next_attempt(name: str, events: Any, common: dict[str, Any]) -> api.Session | None:
    """The new attempt of batch session ``name`` once its containers run: while it waits
    in the queue, a scheduler pass every RESTART_POLL_S (as the housekeeping timer's); None
    when it is gone (destroyed meanwhile)."""
    while True:
        details = api.show_session(name, on_event=events, **common)
        if details.pending is None:
            return details if details.containers else None
        api.schedule_sessions(on_event=events, **common)
        details = api.show_session(name, on_event=events, **common)
        if details.pending is None:
            return details if details.containers else None
        time.sleep(RESTART_POLL_S)


def print_started(ctx: Context, session: api.Session) -> int:
    """``session run --detach``: the session is up and its command runs (or, with
    --queue, it is queued); the command returns now."""
    if ctx.as_json:
        emit_json(session.to_dict())
    elif session.pending is not None:  # queued (--queue with --detach)
        print("\n".join(session_text(session)))
        print("  once it starts, the command runs detached (see --detach)")
    else:
        print("\n".join(session_text(session)))
        print(
            f"  the command runs (detached); its output: bai-cluster session logs "
            f"{ctx.args.name} --follow; the session stops when it ends, and session "
            f"reconcile removes it (keeping its output)"
        )
    return EXIT_OK


def print_logs(ctx: Context, events: Any) -> int:
    """``session logs NAME [--member HOST] [--follow]``."""
    args, common = ctx.args, ctx.common
    if args.follow and args.attempt is None:
        details = api.show_session(args.name, owner=args.owner, on_event=events, **common)
        if details.containers:
            return follow_output(details, args.member)
        print(f"session {args.name} is gone: printing what was kept of it", file=sys.stderr)
    data = api.session_output(
        args.name, args.member, attempt=args.attempt, owner=args.owner, on_event=events, **common
    )
    if ctx.as_json:
        emit_json(data)
        return EXIT_OK
    sys.stdout.write(str(data.get("output") or ""))
    sys.stdout.flush()
    if data.get("source") == "kept":
        ctx.printer([f"(kept on {data.get('agent')} when session {args.name} was destroyed)"])
    return EXIT_OK
