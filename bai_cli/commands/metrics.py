"""``bai-cluster metrics``: the cluster's metrics for Prometheus, printed or written for
node_exporter's textfile collector (docs/metrics.md)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

from .. import api
from ..errors import EXIT_OK
from .common import Context, emit_json


def add_parser(
    top: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    metrics = top.add_parser(
        "metrics",
        parents=[common],
        help="the cluster's metrics for Prometheus (OpenMetrics text)",
        description="Collect the cluster's metrics once (the session ledger, every agent) "
        "and print them, or write them for node_exporter's textfile collector.",
    )
    metrics.add_argument(
        "--textfile",
        metavar="PATH",
        help="write them to PATH (a temporary file renamed into place), e.g. "
        "/var/lib/prometheus/node-exporter/bai_cluster.prom; print nothing",
    )
    metrics.add_argument(
        "--format",
        dest="metrics_format",
        choices=["openmetrics", "prometheus"],
        help="openmetrics (default), or prometheus: the text format 0.0.4 that the "
        "textfile collector parses (the default with --textfile)",
    )


def run(ctx: Context) -> int:
    found = api.collect_metrics(
        textfile=ctx.args.textfile,
        metrics_format=ctx.args.metrics_format,
        on_event=ctx.plays(),
        **ctx.common,
    )
    if ctx.as_json:
        emit_json(asdict(found))
    elif found.textfile is None:
        sys.stdout.write(found.text)
    return EXIT_OK
