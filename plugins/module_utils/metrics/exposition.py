"""Metric families and their text: the OpenMetrics text format (``bai-cluster metrics``)
and the Prometheus text format 0.0.4 that node_exporter's textfile collector parses.

The two differ only where OpenMetrics is stricter: a counter's family is named without
its ``_total`` suffix (its samples keep it) and the text ends with ``# EOF``. Gauges and
histograms read the same in both. Pure.

    Family(name, kind, help, unit="")   add(labels, value) / observe_histogram(...)
    render(families, flavour)           the text, families in the order given
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

OPENMETRICS = "openmetrics"
PROMETHEUS = "prometheus"
FLAVOURS = (OPENMETRICS, PROMETHEUS)
# What each flavour is served as (an HTTP Content-Type; the CLI names it in --help).
CONTENT_TYPES = {
    OPENMETRICS: "application/openmetrics-text; version=1.0.0; charset=utf-8",
    PROMETHEUS: "text/plain; version=0.0.4; charset=utf-8",
}

GAUGE = "gauge"
COUNTER = "counter"
HISTOGRAM = "histogram"

Labels = tuple[tuple[str, str], ...]


@dataclass
class Family:
    """One metric family: its samples as (suffix, labels, value), in the order added."""

    name: str
    kind: str
    help: str
    samples: list[tuple[str, Labels, float]] = field(default_factory=list)

    def add(self, labels: Mapping[str, str] | None = None, value: float = 0.0) -> Family:
        """A gauge's or a counter's sample (a counter's gets ``_total``)."""
        suffix = "_total" if self.kind == COUNTER else ""
        self.samples.append((suffix, _labels(labels), float(value)))
        return self

    def add_histogram(
        self,
        labels: Mapping[str, str] | None,
        bounds: Sequence[float],
        counts: Sequence[int],
        total: float,
    ) -> Family:
        """A histogram's samples from its per-bucket ``counts`` (not cumulative: one per
        bound in ``bounds``, then the overflow) and the sum of what it observed."""
        base = _labels(labels)
        running = 0
        for i, bound in enumerate([*bounds, math.inf]):
            running += int(counts[i]) if i < len(counts) else 0
            le = (("le", _number(float(bound))),)
            self.samples.append(("_bucket", base + le, float(running)))
        self.samples.append(("_count", base, float(running)))
        self.samples.append(("_sum", base, float(total)))
        return self


def _labels(labels: Mapping[str, str] | None) -> Labels:
    return tuple((str(k), str(v)) for k, v in (labels or {}).items())


def _number(value: float) -> str:
    """A sample's value: integers without a fraction, +Inf and NaN as the formats spell them."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def render(families: Iterable[Family], flavour: str = OPENMETRICS) -> str:
    """The families' text in ``flavour`` (:data:`FLAVOURS`)."""
    if flavour not in FLAVOURS:
        raise ValueError(f"metrics format {flavour!r}: one of {', '.join(FLAVOURS)}")
    lines: list[str] = []
    for family in families:
        declared = family.name
        if family.kind == COUNTER and flavour == PROMETHEUS:
            declared += "_total"
        lines.append(f"# HELP {declared} {_help(family.help)}")
        lines.append(f"# TYPE {declared} {family.kind}")
        for suffix, labels, value in family.samples:
            text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
            where = f"{{{text}}}" if text else ""
            lines.append(f"{family.name}{suffix}{where} {_number(value)}")
    if flavour == OPENMETRICS:
        lines.append("# EOF")
    return "\n".join(lines) + "\n"
