"""One session container, as the engine lists it and as an agent's read returns it
(:class:`ContainerRow`).

On the agent, each entry of the engine's container list (``api.containers()``) becomes a
ContainerRow once (:meth:`ContainerRow.of_engine`): admission, the sessions' use
(scheduling/ledger/usage.py) and bai_agent_info read it. A module returns it as a JSON
row (:meth:`ContainerRow.to_dict`, docker_api.container_row); on the controller,
scheduling/ledger/agent_read.py's ``AgentRead.of`` makes a ContainerRow of each row
again (:meth:`ContainerRow.of`). Existing sessions (steps/existing.py, steps/plan.py),
reruns, reconcile and fencing read its fields and its labels, never a row's keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Port:
    """A published port: the container's port and the host's (address and protocol)."""

    container_port: int | None
    host_port: int | None
    ip: str = ""
    proto: str = "tcp"

    def to_dict(self) -> dict[str, Any]:
        return {
            "ip": self.ip,
            "container_port": self.container_port,
            "host_port": self.host_port,
            "proto": self.proto,
        }


@dataclass(frozen=True, slots=True)
class ContainerRow:
    """A session container: its name, the inventory agent whose read listed it (None on
    the agent itself), its Docker state (``running``, ``exited``...) and status text,
    its image, its labels (the session's, common/labels) and its published ports."""

    name: str
    agent: str | None
    state: str
    status: str
    image: str
    labels: Mapping[str, str]
    ports: tuple[Port, ...] = ()
    id: str = ""

    @classmethod
    def of_engine(cls, item: Mapping[str, Any], agent: str | None = None) -> ContainerRow:
        """The row of one entry of the engine's container list (Docker API: ``Id``,
        ``Names``, ``State``, ``Status``, ``Image``, ``Labels``, ``Ports``)."""
        ident = str(item.get("Id") or "")[:12]
        names = item.get("Names") or ["/" + ident]
        return cls(
            str(names[0]).lstrip("/"),
            agent,
            str(item.get("State") or ""),
            str(item.get("Status") or ""),
            str(item.get("Image") or ""),
            {str(k): str(v) for k, v in (item.get("Labels") or {}).items()},
            tuple(
                Port(
                    _port(p.get("PrivatePort")),
                    _port(p.get("PublicPort")),
                    str(p.get("IP") or ""),
                    str(p.get("Type") or "tcp"),
                )
                for p in item.get("Ports") or ()
                if p.get("PublicPort")
            ),
            ident,
        )

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> ContainerRow:
        """The row of one JSON row (:meth:`to_dict`'s keys)."""
        agent = raw.get("agent")
        return cls(
            str(raw.get("name") or ""),
            None if agent is None else str(agent),
            str(raw.get("state") or ""),
            str(raw.get("status") or ""),
            str(raw.get("image") or ""),
            {str(k): str(v) for k, v in (raw.get("labels") or {}).items()},
            tuple(
                Port(
                    _port(p.get("container_port")),
                    _port(p.get("host_port")),
                    str(p.get("ip") or ""),
                    str(p.get("proto") or "tcp"),
                )
                for p in raw.get("ports") or ()
            ),
            str(raw.get("id") or ""),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON row the modules return (bai_agent_info's RV containers)."""
        return {
            "id": self.id,
            "name": self.name,
            "state": self.state,
            "status": self.status,
            "image": self.image,
            "labels": dict(self.labels),
            "ports": [p.to_dict() for p in self.ports],
            "agent": self.agent,
        }

    def at(self, agent: str) -> ContainerRow:
        """The same row, as inventory agent ``agent``'s read lists it."""
        return ContainerRow(
            self.name, agent, self.state, self.status, self.image, self.labels, self.ports, self.id
        )

    def label(self, key: str) -> str | None:
        """The value of label ``key``, or None."""
        return self.labels.get(key)


def _port(value: Any) -> int | None:
    return None if value in (None, "") else int(value)
