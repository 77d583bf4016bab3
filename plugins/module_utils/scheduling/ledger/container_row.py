"""One session container as an agent's read lists it (:class:`ContainerRow`).

bai_agent_info returns its session containers as JSON rows (engine/docker_api.py:
container_row); :meth:`AgentRead.of <.agent_read.AgentRead.of>` makes a ContainerRow
of each, once. Existing sessions (steps/existing.py, steps/plan.py), reruns, reconcile
and fencing read its fields and its labels, never a row's keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Port:
    """A published port: the container's port and the host's."""

    container_port: int | None
    host_port: int | None


@dataclass(frozen=True, slots=True)
class ContainerRow:
    """A session container: its name, the inventory agent whose read listed it, its
    Docker state (``running``, ``exited``...) and status text, its image, its labels
    (the session's, engine/labels) and its published ports."""

    name: str
    agent: str | None
    state: str
    status: str
    image: str
    labels: Mapping[str, str]
    ports: tuple[Port, ...] = ()
    id: str = ""

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> ContainerRow:
        """The row of one JSON row (docker_api.container_row's keys)."""
        agent = raw.get("agent")
        return cls(
            str(raw.get("name") or ""),
            None if agent is None else str(agent),
            str(raw.get("state") or ""),
            str(raw.get("status") or ""),
            str(raw.get("image") or ""),
            {str(k): str(v) for k, v in (raw.get("labels") or {}).items()},
            tuple(
                Port(_port(p.get("container_port")), _port(p.get("host_port")))
                for p in raw.get("ports") or ()
            ),
            str(raw.get("id") or ""),
        )

    def label(self, key: str) -> str | None:
        """The value of label ``key``, or None."""
        return self.labels.get(key)


def _port(value: Any) -> int | None:
    return None if value in (None, "") else int(value)
