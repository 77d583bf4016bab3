#!/usr/bin/python
"""Ansible module bai_session_ledger: place and reserve under the ledger's lock."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bai_session_ledger
short_description: Place a session and reserve what it needs, safely against concurrent creates
description:
  - Keeps the session ledger (docs/placement.md) and changes it in one atomic step per
    run. Every create of the cluster, from any controller, places its session through
    this module, so two creates never hand out the same CPU, memory or GPU device, and two
    creates of one name make one session.
  - O(store=swarm) (a cluster with a swarm) keeps the ledger in the swarm's replicated
    raft store, the labels of config C(bai-session-ledger), through the engine of the
    manager this runs on (C(delegate_to) any manager that answers). Each write names the
    version it read; a write that meets a newer one reads again and redoes its step
    (compare-and-swap, at most 40 times). Nothing depends on which manager serves it.
  - O(store=file) keeps it in a JSON file on this host (O(path)), changed under an
    exclusive C(flock) lock, written atomically and fsynced with its folder.
  - The ledger's clock is this host's, never run backwards past the last write; every
    reservation time and RV(ledger_time) comes from it. The step (read, place, write)
    takes milliseconds and never spans the creation of containers.
  - O(state=reserved) places the session like M(bai.cluster.bai_session_plan) (same options
    O(spec) and O(agent_info), same results) with each reserved session counted by its
    reservation, not only by the running containers the agents report; a new session's
    reservation is written as C(creating) and expires after O(ttl) seconds unless
    O(state=ready) confirms it. A session found on the agents but not in the ledger (made
    before it) is taken into the ledger as it is.
  - With O(agents) (the inventory's agents), the ledger also keeps each agent's last read
    and places with kept reads where they are recent enough (O(read_max_age)), taken under
    the same declaration and know the request's images and mount sources. When it needs
    fresh reads it places nothing and returns RV(need_read), the agents to read (with
    M(bai.cluster.bai_agent_info)) and pass in O(agent_info) next time; agents that may
    hold the session are always among them. A kept read only ever says yes - every
    reserved session counts on it by its reservation, and a placement that fails with
    kept reads asks for those agents afresh before it reports PENDING.
  - An agent without a recent kept read is placed by a hint (its declared capacity, an
    older read's, or the swarm node list's) with the ledger's sessions as its load; such a
    placement reserves nothing and asks for reads of those agents only (RV(need_read)).
    Down, paused and drained agents are passed over (RV(unavailable)). So a create reads
    only the agents it places on, whatever the size of the cluster.
  - O(state=ready) confirms this run's reservation (matched by O(session_id)); it lasts
    until the session is destroyed. It fails when that reservation is gone (it expired
    while the create still ran), so the create removes what it made instead of reporting
    a session the ledger does not count.
  - O(state=absent) drops the reservation of O(name) (only O(session_id)'s when given, so a
    failed create never drops the session of a run that won the name). With O(left_on) (a
    forced destroy, whose part on those agents was not removed because they did not
    answer) the session's id is remembered, so that O(state=reconciled) removes its
    leftovers there once they answer, never adopts them.
  - O(state=read) returns the ledger; with O(name), only that session's reservation and
    the agents that may hold it (RV(holders)); a missing ledger reads as empty
    (RV(missing)). O(state=identity) returns RV(ledger_id), RV(store) and RV(ledger_time).
  - A C(creating) reservation past its expiry is settled only once fresh reads of its
    agents show what its create left (RV(need_read) names them) - dropped when they run
    nothing of it, adopted (RV(adopted)) when they run all of it, kept (counted, with a
    warning) when they run part of it, until O(state=reconciled) removes that part.
  - O(state=reconciled) makes the ledger agree with fresh reads of the agents (O(agent_info),
    each with every session container of its agent; O(agents), the inventory's). A
    reservation whose agents run nothing of it is dropped (RV(dropped)); one past its expiry
    whose agents run all of it, and a complete session the ledger does not know, are
    adopted (RV(adopted)); what a dead create left incomplete, and an unknown incomplete
    session when every agent was read, is returned in RV(remove) for the caller to remove
    on the agents, and the stopped containers of running sessions in RV(stopped). A
    missing or damaged ledger is rebuilt this way (RV(rebuilt)); a damaged one is kept
    beside it (C(PATH.damaged-EPOCH), or config C(bai-session-ledger-damaged-EPOCH)).
  - O(queue=true) (C(session_queue)) keeps a session that does not fit now, or that the
    owner's limits refuse for now, in the ledger's queue (PENDING, RV(queued)), in the
    step that would have reserved it. Sessions start in priority order within a resource
    group (docs/placement.md, "The queue"); every create places only on what the queued
    sessions ahead of it leave.
  - O(state=scheduled) is the scheduler pass - it decides, by the agents' kept reads,
    which queued sessions start now, records each one's reason, leases the start of at
    most O(limit) of them (RV(start), each with a C(ticket) a create then takes), and may
    preempt (RV(preempt)).
  - A missing or damaged ledger is never read as empty - O(state=reserved) refuses while
    the agents run any session, and names the way to rebuild it.
version_added: "1.0.0"
author: bai-cluster developers (@bai-cluster)
options:
  state:
    description: What to do (see above).
    type: str
    choices: [reserved, ready, absent, read, reconciled, identity, scheduled]
    default: reserved
  name:
    description: Session name, for O(state=ready), O(state=absent) and O(state=read).
    type: str
  session_id:
    description: The session id that O(state=ready) confirms or O(state=absent) limits itself to.
    type: str
  owner:
    description:
      - With O(state=read) and O(name), act for this owner only - the read fails, changing
        nothing, when the session the ledger knows (reserved, running, queued, or the batch
        session of that name that ended last) is held by another owner. A login host's
        users read and destroy their own sessions only (docs/cli.md, session show).
    type: str
  spec:
    description:
      - The validated spec (RV(bai.cluster.bai_session_plan#module:spec)), for
        O(state=reserved).
    type: dict
  agent_info:
    description:
      - The registered C(results) of a looped M(bai.cluster.bai_agent_info) task, for
        O(state=reserved) and O(state=reconciled) (there, read without its
        O(bai.cluster.bai_agent_info#module:name), so that it lists every session).
      - Each read is timed by this host's clock alone - its C(read_after), the
        RV(ledger_time) this module returned with RV(need_read) and the read was given
        (M(bai.cluster.bai_agent_info)'s O(bai.cluster.bai_agent_info#module:read_after)),
        never the agent's own clock. A read without it never proves a session gone or
        settled.
    type: list
    elements: dict
  agents:
    description:
      - The inventory's agents, each C(name), C(group) (C(bai_resource_group)) and
        C(resources) (C(bai_agent_resources), or null), for O(state=reserved); turns on
        kept reads (see above). Without it, O(agent_info) must hold every agent.
      - With O(state=reconciled), the agents that had to be read; an unknown incomplete
        session is removed only when every one of them was (RV(unread)).
      - With O(state=read), the queued sessions' explanations add what the scheduler pass
        would decide for each of them now, changing nothing (C(explain.pass) in
        RV(queued) and RV(queue)).
    type: list
    elements: dict
  read_max_age:
    description: Seconds a kept read of an agent may be used for (0 reads every agent each time).
    type: int
    default: 300
  final:
    description:
      - Place by the kept reads alone, and fail PENDING when they find no room (a create
        that waits retries with this); ask for reads (RV(need_read)) only of the agents
        that may hold the session, once no other run is creating it.
    type: bool
    default: false
  ttl:
    description: Seconds a C(creating) reservation lasts unless confirmed (beyond a create).
    type: int
    default: 900
  lock_timeout:
    description: Seconds to wait for the ledger file's lock before failing (O(store=file)).
    type: int
    default: 60
  adopt_ledgers:
    description:
      - With O(state=reconciled), identities of other session ledgers (their containers'
        C(ai.backend.cluster.ledger) label) gone for good (a swarm made anew, a file ledger
        lost with its C(PATH.id)), whose sessions this ledger adopts from now on.
    type: list
    elements: str
    default: []
  ended:
    description:
      - With O(state=absent) and O(session_id), how a batch session ended (the filter
        C(bai.cluster.bai_job_result)'s answer); the ledger remembers the newest 200, and
        O(state=read) returns it (RV(ended)) once the session is gone - or it queues the
        session again at the head, same id, when its C(restarts) count it (RV(restarted)).
    type: dict
  left_on:
    description:
      - With O(state=absent) and O(session_id), the agents whose part of the session a
        forced destroy left (they did not answer). The reservation goes; its containers
        there count in those agents' kept reads until reconcile removes them (RV(forsaken)).
    type: list
    elements: str
    default: []
  policies:
    description:
      - Per-owner limits (C(bai_session_policies), docs/placement.md) - C(default) and
        C(owners) (name -> limits), each limit C(sessions), C(cpu), C(mem), C(gpu),
        C(lifetime_s), C(restarts); an owner's keys override the default's. With
        O(state=reserved), a new session of the spec's C(owner) past a limit is
        refused in the same step that would reserve it (RV(policy)), counted on the
        ledger's own sessions, so concurrent creates cannot both slip under a limit.
      - The queue's order (docs/placement.md, "Priority"), in the same policies - C(queue)
        (C(order) C(priority), the default, or C(fifo); C(weight_age),
        C(weight_fairshare), C(weight_priority), C(age_max_s), C(half_life_s)), and each
        owner's (or the default's) C(priority) (0-100) and C(share) - for every reading
        of the queue in the step, O(state=read) too; C(backfill), C(backfill_margin_s),
        C(preemption) (default true) and C(preempt_grace_s) for O(state=scheduled).
    type: dict
  queue:
    description:
      - With O(state=reserved), queue the session (PENDING) when it does not fit now or
        the owner's limits refuse it for now, instead of failing; a session that can never
        fit, or whose lifetime is past the owner's longest, still fails.
    type: bool
    default: false
  ticket:
    description:
      - With O(state=reserved), the lease a scheduler pass (O(state=scheduled)) gave to
        start this queued session; without it a queued session stays queued.
    type: str
  authorized_keys:
    description: With O(queue=true), the people's public keys, kept with the queued request.
    type: list
    elements: str
    default: []
  limit:
    description: With O(state=scheduled), how many sessions to lease for starting.
    type: int
    default: 1
  lease_s:
    description:
      - With O(state=scheduled), seconds a start's lease lasts; another pass starts the
        session after that if the create that held it never reserved.
    type: int
    default: 300
  unanswered:
    description:
      - With O(state=reserved), agents this create tried to read that did not answer, so
        not placed on (RV(unavailable)); a session one of them may hold fails.
    type: list
    elements: str
    default: []
  docker_host:
    description: Docker API of the manager (O(store=swarm)); default the local engine.
    type: str
  docker_timeout:
    description: Seconds for each Docker API call.
    type: int
    default: 60
attributes:
  check_mode:
    support: full
    description: Places and reports, writes nothing.
  diff_mode:
    support: none
    description: The ledger's change is the reservation returned.
  idempotent:
    support: full
    description: >-
      A rerun of a session that exists changes nothing; each new session is one new
      reservation.
extends_documentation_fragment:
  - bai.cluster.attributes
  - bai.cluster.ledger_store
"""

EXAMPLES = r"""
- name: Place the session and reserve its resources
  bai.cluster.bai_session_ledger:
    spec: "{{ request.spec }}"
    agent_info: "{{ info.results }}"
    store: swarm
  delegate_to: "{{ groups['manager'][0] }}"
  register: plan

- name: Confirm the reservation once the session runs
  bai.cluster.bai_session_ledger:
    state: ready
    name: "{{ plan.summary.name }}"
    session_id: "{{ plan.session_id }}"
    store: swarm
  delegate_to: "{{ groups['manager'][0] }}"
"""

RETURN = r"""
action:
  description: C(create) or C(exists), with the other results of M(bai.cluster.bai_session_plan).
  returned: O(state=reserved)
  type: str
reservation:
  description: The session's ledger entry (name, session_id, state, kernels); null if none.
  returned: O(state=reserved), O(state=ready), O(state=read) with O(name)
  type: dict
rerun:
  description: With RV(need_read) for a confirmed session and the same request, its entry.
  returned: O(state=reserved), when it reads a confirmed session's agents
  type: dict
ledger:
  description: Every reservation by session name, and per agent what they give out.
  returned: O(state=read) without O(name)
  type: dict
counters:
  description: What the scheduler did over time - ends, restarts, queue waits, passes, retries.
  returned: O(state=read) without O(name)
  type: dict
ledger_bytes:
  description: The ledger's size as the swarm store writes it (C(ledger_max_bytes) - its cap).
  returned: O(state=read) without O(name)
  type: int
ended:
  description: The remembered ends of batch sessions called O(name) (O(ended)), newest first.
  returned: O(state=read) with O(name)
  type: list
  elements: dict
restarted:
  description: A batch session that starts again (its spec's C(restarts)) - C(attempt), C(reason).
  returned: O(state=absent), when O(ended) is an end its policy counts and restarts are left
  type: dict
time_left:
  description: Seconds session O(name) may still run, to its C(deadline); null without a lifetime.
  returned: O(state=read) with O(name)
  type: float
holders:
  description: The agents that may hold session O(name) (its reservation's, or a kept read's).
  returned: O(state=read) with O(name)
  type: list
  elements: str
need_read:
  description: The agents to read before it can place the session (nothing was placed yet).
  returned: when reads are needed
  type: list
  elements: str
ledger_time:
  description:
    - The ledger's time when it asked for RV(need_read) (or answered O(state=read)); pass
      it to M(bai.cluster.bai_agent_info) as
      O(bai.cluster.bai_agent_info#module:read_after).
  returned: when reads are needed, O(state=read) and O(state=identity)
  type: float
read:
  description: The agents whose fresh reads this placement used (null without O(agents)).
  returned: O(state=reserved), placed
  type: list
  elements: str
unavailable:
  description: Agents not placed on - paused, drained or down; a PENDING failure says why.
  returned: O(state=reserved), placed or PENDING
  type: list
  elements: str
kept:
  description: The agents whose kept reads this placement used.
  returned: O(state=reserved), placed
  type: list
  elements: str
dropped:
  description: Reservations this run dropped (their agents run nothing of them, or part).
  returned: O(state=reserved), O(state=reconciled)
  type: list
  elements: str
adopted:
  description: Sessions taken into the ledger as made (run all of it, expired or unknown).
  returned: O(state=reserved), O(state=reconciled)
  type: list
  elements: str
remove:
  description:
    - What the agents must remove (O(state=reconciled) changes the ledger only), one row
      per agent and session - C(agent), C(session), C(session_id), C(containers).
  returned: O(state=reconciled)
  type: list
  elements: dict
in_flight:
  description: Sessions a create is making within its reservation (left alone).
  returned: O(state=reconciled)
  type: list
  elements: str
incomplete:
  description: Confirmed sessions missing containers (a rerun of the create repairs them).
  returned: O(state=reconciled)
  type: list
  elements: str
stopped:
  description: Stopped containers of running sessions, to start again (C(agent), C(session), ...).
  returned: O(state=reconciled)
  type: list
  elements: dict
recheck:
  description: Where to check the mesh of each session of RV(stopped) (C(master), C(hosts), ...).
  returned: O(state=reconciled)
  type: list
  elements: dict
unchecked:
  description: Reservations on agents that were not read (kept).
  returned: O(state=reconciled)
  type: list
  elements: str
spared:
  description: Incomplete sessions the ledger does not know, kept as an agent was not read.
  returned: O(state=reconciled)
  type: list
  elements: str
foreign:
  description: Sessions another ledger counts (C(NAME (ledger ID))), left alone (O(adopt_ledgers)).
  returned: O(state=reconciled)
  type: list
  elements: str
forsaken:
  description: Sessions destroyed by force (O(left_on)); their leftovers go in RV(remove).
  returned: O(state=reconciled)
  type: list
  elements: str
ledger_ids:
  description:
    - The ledger's identity, then those of the ledgers it adopted; pass them to
      M(bai.cluster.bai_session_containers)'s
      O(bai.cluster.bai_session_containers#module:ledger_ids).
  returned: O(state=reserved), O(state=reconciled)
  type: list
  elements: str
conflicts:
  description: Complete sessions the ledger does not know whose name another session holds.
  returned: O(state=reconciled)
  type: list
  elements: str
held:
  description: The session names the ledger holds after the reconcile.
  returned: O(state=reconciled)
  type: list
  elements: str
lifetime_up:
  description: The sessions past their C(deadline) (the ledger's clock); the caller ends them.
  returned: O(state=reconciled)
  type: list
  elements: str
end_signals:
  description: Per agent, the end signals due now (C(agent), C(session), C(session_id), C(signal)).
  returned: O(state=reconciled)
  type: list
  elements: dict
unread:
  description: Agents of O(agents) without a read in O(agent_info).
  returned: O(state=reconciled)
  type: list
  elements: str
rebuilt:
  description: Why the ledger was rebuilt (C(missing), C(damaged - REASON)), or null.
  returned: O(state=reconciled)
  type: str
missing:
  description: True when the ledger does not exist (yet).
  returned: O(state=read) and O(state=identity), when the ledger is missing
  type: bool
damaged:
  description: Why the ledger cannot be read (O(state=identity) only; the other states fail).
  returned: O(state=identity), when the ledger is damaged
  type: str
ledger_id:
  description: The ledger's identity - the swarm's cluster ID, or the file's (C(PATH.id)).
  returned: always
  type: str
store:
  description: C(swarm) or C(file).
  returned: always
  type: str
retried:
  description: True when a write met a newer version of the ledger and was redone.
  returned: when it happened
  type: bool
queued:
  description:
    - The session waits in the queue (O(queue=true)) - C(name), C(state) (PENDING),
      C(owner), C(resource_group), C(mode), C(size), C(type), C(submitted_at),
      C(position) (its place in its group's queue) and C(reason).
  returned: O(state=reserved), when the session is queued
  type: dict
queue:
  description: The queued sessions (as RV(queued)), in queue order.
  returned: O(state=read) without O(name), and O(state=scheduled)
  type: list
  elements: dict
start:
  description:
    - The queued sessions this pass leased for starting - C(name), C(ticket), C(spec)
      (the canonical request) and C(authorized_keys).
  returned: O(state=scheduled)
  type: list
  elements: dict
preempt:
  description:
    - What this pass preempts (docs/placement.md, "Preemption"; {} for nothing) -
      C(session), C(victims) (marked; the caller stops them), C(reason), C(at), and their
      warnings, C(rows) (agent, session, session_id, signal) and C(lead_s).
  returned: O(state=scheduled)
  type: dict
more:
  description: How many more queued sessions start in the next run (one a preemption frees too).
  returned: O(state=scheduled)
  type: int
waiting:
  description: How many sessions the queue holds after this step.
  returned: O(state=scheduled), O(state=absent), O(state=reconciled)
  type: int
pending:
  description: True when the failure is a PENDING placement (waiting may help unless RV(permanent)).
  returned: failure
  type: bool
permanent:
  description: True when waiting cannot help a PENDING placement.
  returned: failure
  type: bool
conflict:
  description: True when the name is taken by a different or incomplete session.
  returned: failure
  type: bool
policy:
  description:
    - True when the owner's limits (O(policies)) refuse the session; the message names the
      limit, where it is set, and what the owner holds.
  returned: failure
  type: bool
"""


from typing import Any

from ansible.module_utils.basic import AnsibleModule

# First: the payload's other imports compile once (see its docstring).
# pylint: disable-next=unused-import
from ansible_collections.bai.cluster.plugins.module_utils.common import compile_once  # noqa: F401

# isort: split
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Busy, StoreError
from ansible_collections.bai.cluster.plugins.module_utils.engine.common import error_text
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    ledger_store as store_,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.ledger_request import (
    ARGUMENT_SPEC,
    LedgerFailure,
    LedgerRequest,
    check,
)


def _step(request: LedgerRequest, store: store_.Store, module: AnsibleModule) -> Any:
    """What this run does inside the store's transaction. An identity read (every session
    playbook's first, on a swarm) loads none of placement, the queue or reconcile."""
    if request.state == "identity":
        return store_.identity_read
    from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps import (
        by_state as steps,
    )

    nodes = steps.swarm_nodes(request, store, module.warn)
    return lambda snapshot, now: steps.step(request, store, snapshot, now, nodes, module.warn)


def run(module: AnsibleModule) -> dict[str, Any]:
    request = LedgerRequest.from_params(module.params, check_mode=module.check_mode)
    try:
        check(request)
    except LedgerFailure as exc:
        module.fail_json(msg=str(exc), **exc.fields)
    store = store_.open_store(module)
    try:
        result = store_.transact(store, _step(request, store, module), write=not module.check_mode)
    except LedgerFailure as exc:
        module.fail_json(msg=str(exc), **exc.fields)
    except Busy:
        module.fail_json(
            msg=f"{store.where} stayed locked for {request.lock_timeout} s (another "
            f"create holds it; if none runs, a stuck process on this host does)"
        )
    except StoreError as exc:
        module.fail_json(msg=str(exc))
    except Exception as exc:  # the engine's (the swarm's store), else raised again
        if not isinstance(exc, store_.engine_errors(store)):
            raise
        module.fail_json(msg=f"{store.where}: {error_text(exc)}")
    if result.pop("attempts", 1) > 1:
        result["retried"] = True
    return {**result, "ledger_id": store.identity(), "store": store.kind}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
