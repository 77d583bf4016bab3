"""The cluster's metrics for Prometheus (playbooks/metrics.yml, docs/metrics.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.metrics.exposition import (
    FLAVOURS,
    OPENMETRICS,
    PROMETHEUS,
)

from ..errors import BaiClusterError
from .base import Event, run

METRICS = "playbooks/metrics.yml"


@dataclass
class Metrics:
    """One collection: the ``text`` in ``format``, and where it was written
    (``textfile``, None when it was not)."""

    text: str
    format: str
    textfile: str | None = None


def collect_metrics(
    *,
    textfile: str | None = None,
    metrics_format: str | None = None,
    inventory: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> Metrics:
    """Collect the cluster's metrics once; with ``textfile``, write them there for
    node_exporter's textfile collector (renamed into place). ``metrics_format``:
    openmetrics, or prometheus (the text format 0.0.4; the default with ``textfile``)."""
    chosen = metrics_format or (PROMETHEUS if textfile else OPENMETRICS)
    if chosen not in FLAVOURS:
        raise BaiClusterError(
            "bad_input", f"metrics format {chosen!r}: one of {', '.join(FLAVOURS)}"
        )
    extravars: dict[str, Any] = {"metrics_format": chosen}
    if textfile:
        path = os.path.abspath(textfile)
        if not os.path.isdir(os.path.dirname(path)):
            raise BaiClusterError(
                "bad_input", f"{os.path.dirname(path)} is not a folder: nothing was written"
            )
        extravars["metrics_textfile"] = path
    result = run(METRICS, extravars, inventory=inventory, on_event=on_event, **kwargs)
    text = str(result.stats.get("bai_metrics") or "")
    if not text:
        raise BaiClusterError("failed", f"{METRICS} recorded no metrics")
    return Metrics(text=text, format=chosen, textfile=extravars.get("metrics_textfile"))
