"""``bai-cluster queue``: the queued (PENDING) sessions in the order the scheduler pass
uses, with each one's priority and its factors, as Slurm's ``sprio -w`` lists them
(docs/placement.md, "Priority")."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.containers.listing import format_duration

from .. import api
from ..errors import EXIT_OK
from .common import Context, emit_json, table

FACTORS = ("age", "fairshare", "priority")


def add_parser(
    top: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    queue = top.add_parser(
        "queue",
        parents=[common],
        help="the queued sessions in the order they start, with their priority factors",
        description="Every queued (PENDING) session, per resource group in the order the "
        "scheduler pass starts them (bai_session_policies.queue), with its priority and "
        "each factor's points (weight x value; the weights on the first line), its "
        "owner's decayed usage and why it waits. bai-cluster session explain NAME says "
        "the same of one session.",
    )
    queue.add_argument("--owner", metavar="NAME", help="only NAME's sessions")


def run(ctx: Context) -> int:
    rows = api.list_queue(owner=ctx.args.owner, on_event=ctx.plays(), **ctx.common)
    if ctx.as_json:
        emit_json(rows)
    else:
        print("\n".join(queue_text(rows)))
    return EXIT_OK


def queue_text(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The queue as a table (what bai-cluster queue prints)."""
    if not rows:
        return ["no queued sessions"]
    first = rows[0].get("explain") or {}
    weights = ", ".join(
        f"{name} {float(f.get('weight') or 0):g}"
        for name, f in (first.get("factors") or {}).items()
    )
    lines = [f"order: {first.get('order', 'priority')}; weights: {weights or '-'}"]
    head: tuple[str, ...] = (
        "GROUP",
        "#",
        "NAME",
        "OWNER",
        "PRIORITY",
        "AGE",
        "FAIRSHARE",
        "POLICY",
        "USED",
        "WAIT",
        "START",
    )
    cells = [head]
    for row in rows:
        why = row.get("explain") or {}
        factors = why.get("factors") or {}
        cells.append(
            (
                str(row.get("resource_group", "")),
                str(row.get("position", "")),
                str(row.get("name", "")),
                str(row.get("owner") or "-"),
                str(why.get("priority", "-")),
                *(_points(factors.get(name)) for name in FACTORS),
                f"{float(why.get('owner_usage_units') or 0):.1f}",
                str((why.get("pass") or row).get("wait") or "-"),
                _start(why.get("pass")),
            )
        )
    return lines + table(cells)


def _start(now: Mapping[str, Any] | None) -> str:
    """When the scheduler pass expects it to start: now, in a while (an estimate from
    the running sessions' lifetimes), or - (no estimate)."""
    if not now:
        return "-"
    if now.get("starts"):
        return "now"
    at = now.get("earliest_start_in_s")
    return "-" if at is None else f"in {format_duration(float(at))}"


def _points(factor: Mapping[str, Any] | None) -> str:
    return "-" if not factor else f"{float(factor.get('points') or 0):.0f}"
