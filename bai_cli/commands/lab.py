"""``bai-cluster lab up|down`` (the embedded lab) and ``bai-cluster site`` (site.yml): the
parser and what they run (progress lines of every play; per-host counts at the end)."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from .. import api
from ..errors import EXIT_OK
from .common import Context, emit_json


def add_parser(
    top: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """``lab up|down`` and ``site [--tags ...]``."""
    lab = top.add_parser("lab", parents=[common], help="bring the embedded lab up or down")
    lab.add_argument("state", choices=["up", "down"])

    site = top.add_parser("site", parents=[common], help="converge site.yml")
    site.add_argument("--tags", help="only these roles' plays, e.g. docker_engine,docker_swarm")


def run_lab(ctx: Context) -> int:
    state = "present" if ctx.args.state == "up" else "absent"
    return print_summary(ctx, api.lab(state, on_event=ctx.plays(), **ctx.common))


def run_site(ctx: Context) -> int:
    return print_summary(ctx, api.site(tags=ctx.args.tags, on_event=ctx.plays(), **ctx.common))


def print_summary(ctx: Context, summary: api.PlaybookSummary) -> int:
    if ctx.as_json:
        emit_json(asdict(summary))
    else:
        for host in sorted(summary.ok):
            print(f"{host}: ok={summary.ok.get(host, 0)} changed={summary.changed.get(host, 0)}")
    return EXIT_OK
