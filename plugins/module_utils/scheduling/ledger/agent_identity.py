"""An agent's identity (docs/placement.md, "Admission").

An agent is its engine: the Swarm node ID where the engine is in a swarm, else the Docker
engine ID (``engine_identity``). Several inventory agents on one engine on purpose
(virtual agents) each declare ``bai_agent_id``, a *slot* of that engine with its own
offer: the agent's identity is then ``ENGINE/SLOT`` (``agent_identity``). Each container
carries its agent's identity (LABEL_AGENT_ID); admission on an engine groups its
containers by slot, so the engine part (which changes when an engine joins a swarm) never
matters there. Containers made before the label existed count against every slot.

Standard library only: the ledger, the agents' reads and the swarm's node table all
name agents this way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SLOT_SEPARATOR = "/"


def engine_identity(info: Mapping[str, Any]) -> str:
    """An engine's identity from ``docker info``: its Swarm node ID when it is in a
    swarm, else its engine ID."""
    swarm = info.get("Swarm") or {}
    node = str(swarm.get("NodeID") or "")
    if node and str(swarm.get("LocalNodeState") or "active") != "inactive":
        return node
    engine = str(info.get("ID") or "")
    if not engine:
        raise ValueError("the engine reports no ID (docker info)")
    return engine


def agent_identity(engine: str, slot: str | None) -> str:
    """The identity of an agent: its engine's, with ``/SLOT`` for a declared
    ``bai_agent_id``."""
    if not slot:
        return engine
    if SLOT_SEPARATOR in slot or not slot.strip():
        raise ValueError(f"bai_agent_id {slot!r}: any non-blank text without {SLOT_SEPARATOR!r}")
    return f"{engine}{SLOT_SEPARATOR}{slot}"


def slot_of(identity: str) -> str:
    """The slot part of an agent identity ('' for an agent that is its whole engine)."""
    return identity.split(SLOT_SEPARATOR, 1)[1] if SLOT_SEPARATOR in identity else ""


def engine_of(identity: str) -> str:
    """The engine part of an agent identity (its swarm node ID, in a swarm)."""
    return identity.split(SLOT_SEPARATOR, 1)[0]
