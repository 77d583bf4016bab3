"""``bai-cluster queue``: the queued sessions in the order the scheduler pass uses, with
each one's priority factors (bai_cli/playbooks/queue_show.yml)."""

from __future__ import annotations

from typing import Any

from .base import Event, run

QUEUE = "bai_cli/playbooks/queue_show.yml"


def list_queue(
    *,
    inventory: str | None = None,
    on_event: Event | None = None,
    owner: str | None = None,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """Every queued session, in queue order per resource group; only ``owner``'s when
    given (positions stay those of the whole queue)."""
    result = run(QUEUE, {}, inventory=inventory, on_event=on_event, **kwargs)
    rows = [dict(row) for row in result.stats.get("bai_queue") or []]
    return [row for row in rows if owner is None or row.get("owner") == owner]
