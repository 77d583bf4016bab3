"""What bai_agent_availability does (plugins/modules/bai_agent_availability.py): an
agent's availability written or read, in its own record or in the cluster's.

The records and their rules are scheduling/ledger/availability.py's; this does the I/O: the
agent's own record under its engine's admission lock, the cluster's in the session ledger
(a transaction of ledger_store.py), and the agent's swarm node. The functions take the
AnsibleModule (its ``params``, ``check_mode``, ``warn`` and ``fail_json``).

    on_agent(module, api)     scope=agent: this agent's record and the sessions it holds
    in_cluster(module)        scope=cluster: the ledger's records, and the swarm node
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Busy, StoreError
from ansible_collections.bai.cluster.plugins.module_utils.common.locks import locked
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    APIError,
    error_text,
    session_rows,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    availability as avail,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import document, roster
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    ledger_store as store_,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_identity import (
    SLOT_SEPARATOR,
    agent_identity,
    engine_identity,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import admission


@dataclass(frozen=True)
class Change:
    """What bai_agent_availability is asked to set: O(availability) (None: only read),
    for agent O(agent), by whom, why, and whose record it is (O(purpose))."""

    availability: str | None
    agent: str
    by: str
    reason: str
    purpose: str

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> Change:
        return cls(
            params["availability"],
            params["agent"],
            params["by"],
            params["reason"],
            params["purpose"],
        )

    def wanted(self, identity: str, now: float) -> document.Availability | None:
        """The record it asks for (None: active)."""
        if self.availability in (None, avail.ACTIVE):
            return None
        return avail.make_record(
            self.availability,
            name=self.agent,
            identity=identity,
            by=self.by,
            reason=self.reason,
            now=now,
            purpose=self.purpose,
        )


def apply(
    change: Change,
    own: dict[str, document.Availability],
    slot: str,
    identity: str,
    in_swarm: bool,
) -> bool:
    """Change the agent's own records ``own`` as asked; whether that changed anything.
    O(purpose=setup) writes or clears only site.yml's hold (availability.setup_step)."""
    now = time.time()
    if change.purpose != avail.SETUP:
        return avail.set_entry(own, slot, change.wanted(identity, now))
    hold = change.availability != avail.ACTIVE
    step = avail.setup_step(own.get(slot), hold=hold, in_swarm=in_swarm)
    if step == "write":
        return avail.set_entry(own, slot, change.wanted(identity, now))
    if step == "clear":
        return avail.set_entry(own, slot, None)
    return False


def on_agent(module: Any, api: Any) -> dict[str, Any]:
    """scope=agent: this agent's own record, under its engine's admission lock (``api``:
    its engine's low-level Docker client)."""
    params = module.params
    info = api.info()
    identity = agent_identity(engine_identity(info), params["agent_id"])
    slot = params["agent_id"] or ""
    listed = session_rows(api)
    result: dict[str, Any] = {"identity": identity}
    in_swarm = (info.get("Swarm") or {}).get("LocalNodeState") == "active"
    if params["availability"] is None:
        result["record"] = _json(avail.read_marker(params["state_dir"]).get(slot))
    elif module.check_mode:
        own = avail.read_marker(params["state_dir"])
        trial = dict(own)
        changed = apply(Change.of(params), trial, slot, identity, in_swarm)
        result.update(changed=changed, previous=_json(own.get(slot)), record=_json(trial.get(slot)))
    else:
        with locked(
            admission.lock_path(params["lock_dir"], str(info.get("ID") or "")),
            params["lock_timeout"],
        ):
            own = avail.read_marker(params["state_dir"])
            previous = own.get(slot)
            changed = apply(Change.of(params), own, slot, identity, in_swarm)
            if changed:
                avail.write_marker(params["state_dir"], own)
            # Listed under the lock: no container is admitted after this list.
            listed = session_rows(api)
        result.update(changed=changed, previous=_json(previous), record=_json(own.get(slot)))
    result["sessions"] = avail.sessions_held(admission.holdings(listed, slot))
    return result


def in_cluster(module: Any) -> dict[str, Any]:
    """scope=cluster: the record in the session ledger, and the agent's swarm node."""
    params = module.params
    store = store_.open_store(module)
    name = params["agent"]
    found: dict[str, Any] = {}

    def step(snapshot: store_.Snapshot, now: float) -> dict[str, Any]:
        if snapshot.damaged:
            module.fail_json(msg=f"{store.where}: {snapshot.damaged}; {document.REBUILD_HINT}")
        ledger = snapshot.ledger
        found["records"] = avail.records(ledger)
        if name is None:
            found["given_out"] = _given_out(ledger)
            return {"changed": False}
        identity = params["identity"] or roster.known_identity(ledger, name)
        found["identity"] = identity
        previous = avail.record_of(found["records"], name, identity)
        new = Change.of(params).wanted(identity, now)
        changed = params["availability"] is not None and avail.set_availability(
            ledger, new, name=name, identity=identity
        )
        found.update(
            previous=previous, record=avail.record_of(avail.records(ledger), name, identity)
        )
        found["records"] = avail.records(ledger)
        return {"changed": changed}

    try:
        done = store_.transact(store, step, write=not module.check_mode)
    except Busy:
        module.fail_json(msg=f"{store.where} stayed locked for {params['lock_timeout']} s")
    except StoreError as exc:
        module.fail_json(msg=str(exc))
    result: dict[str, Any] = {
        "changed": done["changed"],
        "records": {key: row.to_dict() for key, row in found["records"].items()},
    }
    if name is None:
        result["given_out"] = found["given_out"]
        if isinstance(store, store_.SwarmStore):
            result["nodes"] = {
                row.id: row.to_dict() for row in roster.node_table(store.api.nodes()).values()
            }
        return result
    result.update(
        identity=found["identity"],
        previous=_json(found["previous"]),
        record=_json(found["record"]),
    )
    result["node"] = None
    if isinstance(store, store_.SwarmStore) and params["availability"] is not None:
        result["node"], moved = _swarm_node(module, store.api, name, found["identity"])
        result["changed"] = result["changed"] or moved
    return result


def _json(record: document.Availability | None) -> dict[str, Any] | None:
    """A record as the module returns it."""
    return record.to_dict() if record is not None else None


def _given_out(ledger: document.Ledger) -> dict[str, dict[str, Any]]:
    """Per agent: what the reservations give out, and the sessions they are for."""
    out = roster.given_out(ledger)
    for session, entry in ledger.sessions.items():
        for kernel in entry.kernels:
            names = out[kernel.agent].setdefault("sessions", [])
            if session not in names:
                names.append(session)
    return out


def _swarm_node(module: Any, api: Any, name: str, identity: str) -> tuple[Any, bool]:
    """Set the agent's swarm node to O(availability) (a whole-engine agent only)."""
    if SLOT_SEPARATOR in identity:
        return None, False  # a slot of an engine: other agents share its node
    nodes = api.nodes()
    node = next((n for n in nodes if identity and n.get("ID") == identity), None)
    if node is None and not identity:
        node = next(
            (n for n in nodes if (n.get("Description") or {}).get("Hostname") == name), None
        )
    if node is None:
        module.warn(f"agent {name}: no swarm node has identity {identity or '(unknown)'}")
        return None, False
    want = module.params["availability"]
    for _attempt in range(10):
        spec = avail.node_spec(node, want)
        if spec is None or module.check_mode:
            break
        try:
            api.update_node(node["ID"], int(node["Version"]["Index"]), spec)
            break
        except APIError as exc:
            if "out of sequence" not in error_text(exc):
                module.fail_json(msg=f"agent {name}: swarm node {node['ID']}: {error_text(exc)}")
            node = api.inspect_node(node["ID"])
    row = roster.node_table([node])[node["ID"]].to_dict()
    return {**row, "availability": want}, spec is not None
