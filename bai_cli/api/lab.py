"""The embedded lab and the whole infrastructure: ``lab up``/``down`` and ``site``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import BaiClusterError
from ..runner import PlaybookResult
from .base import Event, run

LAB = "playbooks/lab.yml"
SITE = "site.yml"


@dataclass
class PlaybookSummary:
    """``lab`` and ``site``: per-host counts from the play recap."""

    playbook: str
    changed: dict[str, int]
    ok: dict[str, int]
    failures: dict[str, int]


def _summary(playbook: str, result: PlaybookResult) -> PlaybookSummary:
    return PlaybookSummary(
        playbook=playbook,
        changed=dict(result.counts.get("changed") or {}),
        ok=dict(result.counts.get("ok") or {}),
        failures=dict(result.counts.get("failures") or {}),
    )


def lab(state: str = "present", *, on_event: Event | None = None, **kwargs: Any) -> PlaybookSummary:
    """Bring the embedded lab up (``present``) or down (``absent``): playbooks/lab.yml."""
    if state not in ("present", "absent"):
        raise BaiClusterError("bad_input", f"lab state must be present or absent, got {state!r}")
    result = run(LAB, {"lab_state": state}, on_event=on_event, **kwargs)
    return _summary(LAB, result)


def site(
    *,
    inventory: str | None = None,
    tags: str | None = None,
    on_event: Event | None = None,
    **kwargs: Any,
) -> PlaybookSummary:
    """Converge the whole infrastructure (site.yml), optionally only ``tags``."""
    result = run(SITE, {}, inventory=inventory, tags=tags, on_event=on_event, **kwargs)
    return _summary(SITE, result)
