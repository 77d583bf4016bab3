"""What every command shares: bad input, JSON and table output, and the context a
command runs in (its options, where progress goes, the runner's options)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..api import Event
from ..progress import PlayProgress, Printer


class UsageError(ValueError):
    """Bad command-line input (exit code 2, nothing is run)."""


def emit_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def table(rows: Sequence[Sequence[Any]]) -> list[str]:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip()
        for row in rows
    ]


@dataclass
class Context:
    """One command's run: its parsed options, the printer of progress lines (stderr),
    -v's count, --json, and ``common``: the keyword arguments every API call takes
    (inventory, verbosity, keep_dir)."""

    args: argparse.Namespace
    printer: Printer
    verbose: int
    as_json: bool
    common: dict[str, Any]

    @classmethod
    def of(cls, args: argparse.Namespace, printer: Printer) -> Context:
        verbose = int(getattr(args, "verbose", 0) or 0)
        return cls(
            args=args,
            printer=printer,
            verbose=verbose,
            as_json=bool(getattr(args, "json", False)),
            common={
                "inventory": getattr(args, "inventory", None),
                "verbosity": max(0, verbose - 1),
                "keep_dir": getattr(args, "keep_runner_dir", None),
            },
        )

    def plays(self) -> Event:
        """Progress lines of plays (and with -v, tasks) as the events come."""
        progress = PlayProgress(self.verbose)

        def feed(event: dict[str, Any]) -> None:
            self.printer(progress.feed(event))

        return feed

    def verbose_plays(self) -> Event:
        """As :meth:`plays` with -v; without it, no progress lines."""
        return self.plays() if self.verbose else (lambda event: None)
