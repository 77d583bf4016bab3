"""What one run of bai_session_ledger is asked (:class:`LedgerRequest`, from its options,
``ARGUMENT_SPEC``), and how a step of it fails (:class:`LedgerFailure`).

The steps (steps.py, reserve.py, schedule.py) take a request, never the AnsibleModule, so
they can be called directly; the module turns a :class:`LedgerFailure` into its
``fail_json`` with the same message and keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    Failure,
    SpecError,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.common import (
    DOCKER_ARGUMENT_SPEC,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    ledger_store,
    roster,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.queue.queue_order import (
    Policies,
)

# The module's options (plugins/modules/bai_session_ledger.py documents each one).
ARGUMENT_SPEC = {
    "state": {
        "type": "str",
        "choices": ["reserved", "ready", "absent", "read", "reconciled", "identity", "scheduled"],
        "default": "reserved",
    },
    "name": {"type": "str"},
    "session_id": {"type": "str"},
    "owner": {"type": "str"},
    "spec": {"type": "dict"},
    "agent_info": {"type": "list", "elements": "dict"},
    "agents": {"type": "list", "elements": "dict"},
    "read_max_age": {"type": "int", "default": 300},
    "final": {"type": "bool", "default": False},
    "ttl": {"type": "int", "default": 900},
    "lock_timeout": {"type": "int", "default": 60},
    **ledger_store.STORE_ARGUMENT_SPEC,
    "adopt_ledgers": {"type": "list", "elements": "str", "default": []},
    "left_on": {"type": "list", "elements": "str", "default": []},
    "ended": {"type": "dict"},
    "unanswered": {"type": "list", "elements": "str", "default": []},
    "policies": {"type": "dict"},
    "queue": {"type": "bool", "default": False},
    "ticket": {"type": "str", "no_log": False},
    "authorized_keys": {"type": "list", "elements": "str", "default": [], "no_log": False},
    "limit": {"type": "int", "default": 1},
    "lease_s": {"type": "int", "default": 300},
    **DOCKER_ARGUMENT_SPEC,
}


class LedgerFailure(Failure):
    """A ledger step that fails: its message, and the other keys its ``fail_json``
    reports (``conflict``, ``policy``, ``pending``, ...)."""

    def __init__(self, msg: str, **fields: Any) -> None:
        super().__init__(msg)
        self.fields = fields


@dataclass(frozen=True)
class LedgerRequest:
    """bai_session_ledger's options that its steps read (the module documents each one),
    and whether it runs in check mode."""

    state: str = "reserved"
    name: str | None = None
    session_id: str | None = None
    owner: str | None = None  # state=read: act for this owner only
    spec: dict[str, Any] | None = None
    agent_info: list[dict[str, Any]] | None = None
    agents: list[dict[str, Any]] | None = None
    read_max_age: int = 300
    final: bool = False
    ttl: int = 900
    lock_timeout: int = 60
    path: str = "/var/lib/bai-cluster/ledger.json"
    adopt_ledgers: list[str] = field(default_factory=list)
    left_on: list[str] = field(default_factory=list)
    ended: dict[str, Any] | None = None
    unanswered: list[str] = field(default_factory=list)
    policies: dict[str, Any] | None = None
    queue: bool = False
    ticket: str | None = None
    authorized_keys: list[str] = field(default_factory=list)
    limit: int = 1
    lease_s: int = 300
    check_mode: bool = False

    @cached_property
    def policy(self) -> Policies:
        """``policies`` parsed (SpecError naming the field; :func:`check` refuses it
        before anything is read)."""
        return Policies.of(self.policies)

    @cached_property
    def inventory(self) -> dict[str, roster.Declared]:
        """O(agents) by name ({} when none is given), read once; LedgerFailure when one is
        not {name, group, resources}."""
        try:
            return {d.name: d for d in map(roster.Declared.of, self.agents or ())}
        except (KeyError, TypeError, AttributeError):
            raise LedgerFailure(
                "bai_session_ledger: agents must be a list of {name, group, resources, topology}"
            ) from None

    @cached_property
    def levels(self) -> tuple[str, ...]:
        """The cluster's topology levels, widest first, as the inventory's declarations
        give them (each agent's ``bai_topology`` in ``bai_topology_levels``' order)."""
        for declared in self.inventory.values():
            if declared.topology:
                return tuple(level for level, _domain in declared.topology)
        return ()

    @cached_property
    def labels(self) -> dict[str, dict[str, str]]:
        """Each declared agent's labels for placement (its topology): one tree for the
        whole run, whatever read of the agent it places by."""
        return {name: declared.labels for name, declared in self.inventory.items()}

    @classmethod
    def from_params(cls, params: Mapping[str, Any], check_mode: bool = False) -> LedgerRequest:
        """The request a module's ``params`` make (options it does not read are left out)."""
        names = {f.name for f in fields(cls)} - {"check_mode"}
        return cls(**{k: params[k] for k in names if k in params}, check_mode=check_mode)


def check(request: LedgerRequest) -> Policies:
    """Refuse, before anything is read, a request that lacks what its state needs or
    whose owners' limits are bad; the policies, parsed (kept on the request)."""
    state = request.state
    if state in ("ready", "absent") and not request.name:
        raise LedgerFailure(f"bai_session_ledger: state={state} needs name")
    if state == "absent" and request.left_on and not request.session_id:
        raise LedgerFailure("bai_session_ledger: left_on needs session_id")
    if state == "ready" and not request.session_id:
        raise LedgerFailure("bai_session_ledger: state=ready needs session_id")
    if state == "reserved" and (
        request.spec is None or (request.agent_info is None and request.agents is None)
    ):
        raise LedgerFailure(
            "bai_session_ledger: state=reserved needs spec and agent_info or agents"
        )
    if state == "reconciled" and request.agent_info is None:
        raise LedgerFailure("bai_session_ledger: state=reconciled needs agent_info")
    try:  # bad limits are refused before anything is read
        return request.policy  # parsed once, here, for every step of the run
    except SpecError as exc:
        raise LedgerFailure(f"bai_session_ledger: {exc}; nothing was changed") from None
