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
  - The ledger's clock is this host's, never run backwards past the last write (another
    manager's clock may have been ahead); every reservation time and RV(ledger_time)
    comes from it, never from the controller or an agent.
  - The step (read, place, write) takes milliseconds and never spans the creation of
    containers. The file lock is dropped by the kernel when the process dies, so a killed
    create blocks nobody.
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
  - An agent without a recent kept read is placed by a hint - its declared capacity
    (C(cpu), C(mem) and C(gpu=0)), an older read's, or the swarm node list's - with the
    ledger's sessions as its load; a placement on hinted agents reserves nothing and asks
    for reads of those agents only (RV(need_read)), then places again. With O(store=swarm)
    the node list (one call) also keeps placement off down nodes; paused and drained
    agents are passed over wherever the cluster or the agent says so (RV(unavailable)).
    So a create reads only the agents it places on, whatever the size of the cluster.
  - O(state=ready) confirms this run's reservation (matched by O(session_id)); it lasts
    until the session is destroyed. It fails when that reservation is gone (it expired
    while the create still ran), so the create removes what it made instead of reporting
    a session the ledger does not count.
  - O(state=absent) drops the reservation of O(name) (only O(session_id)'s when given, so a
    failed create never drops the session of a run that won the name). With O(left_on) (a
    forced destroy, whose part on those agents was not removed because they did not
    answer) the session's id is remembered, so that O(state=reconciled) removes its
    leftovers there once they answer, never adopts them.
  - O(state=read) returns the ledger; with O(name), only that session's reservation
    and the agents that may hold it (RV(holders)). A missing ledger reads as no
    reservation (RV(missing)); a damaged one fails.
  - O(state=identity) only reads the ledger and returns RV(ledger_id), RV(store) and
    RV(ledger_time) (a manager answers it only when the swarm has a quorum).
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
    on the agents. A missing or damaged ledger is rebuilt this way (RV(rebuilt)); a
    damaged one is kept beside it (C(PATH.damaged-EPOCH), or config
    C(bai-session-ledger-damaged-EPOCH)).
  - O(queue=true) (C(session_queue)) keeps a session that does not fit now, or that
    the owner's limits refuse for now, in the ledger's queue (PENDING, RV(queued)) with its
    request, owner, submission time and the reason it waits, in the same step that would
    have reserved it; the same request again finds it there. Sessions start in
    submission order within a resource group (docs/placement.md, "The queue") - every
    create, queued or not, places only on what the queued sessions ahead of it leave,
    so nothing overtakes an older queued session.
  - O(state=scheduled) is the scheduler pass's step - it decides, by the agents' kept
    reads, which queued sessions start now in queue order, records each one's reason and
    gives the start of at most O(limit) of them a lease (RV(start), each with a
    C(ticket)). A create given that O(ticket) starts the session and takes it out of the
    queue in the step that reserves it; if it no longer fits it stays queued, in its place.
  - A missing or damaged ledger is never read as an empty ledger - O(state=reserved)
    refuses while the agents run any session, and names the way to rebuild it.
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
    description:
      - Seconds a C(creating) reservation lasts unless confirmed; longer than a create
        may take.
    type: int
    default: 900
  lock_timeout:
    description: Seconds to wait for the ledger file's lock before failing (O(store=file)).
    type: int
    default: 60
  adopt_ledgers:
    description:
      - With O(state=reconciled), identities of other session ledgers (the label
        C(ai.backend.cluster.ledger) of their sessions' containers) whose sessions this
        ledger takes as its own from now on - for a ledger that is gone for good (a swarm
        made anew, a file ledger lost with its C(PATH.id)). Their sessions are then
        adopted like any other.
    type: list
    elements: str
    default: []
  ended:
    description:
      - With O(state=absent) and O(session_id), how a batch session ended (the filter
        C(bai.cluster.bai_job_result)'s answer - its state, exit code, failed member, start
        and end, each member's agent); the ledger remembers it (the newest 200), and
        O(state=read) returns it (RV(ended)) once the session is gone.
    type: dict
  left_on:
    description:
      - With O(state=absent) and O(session_id), the agents whose part of the session was
        not removed (a destroy forced while they did not answer). The reservation goes;
        the session's containers there keep counting in those agents' kept reads, and
        reconcile removes them when the agents answer again (RV(forsaken)).
    type: list
    elements: str
    default: []
  policies:
    description:
      - Per-owner limits (C(bai_session_policies), docs/placement.md) - C(default) and
        C(owners) (name -> limits), each limit C(sessions), C(cpu), C(mem), C(gpu),
        C(lifetime_s); an owner's keys override the default's. With O(state=reserved), a
        new session of the spec's C(owner) that would take the owner past a limit is
        refused in the same step that would reserve it (RV(policy)), counted on the
        ledger's own sessions, so concurrent creates cannot both slip under a limit.
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
      - With O(state=reserved), agents this create tried to read and that did not answer.
        They are not placed on (RV(unavailable), "does not answer"); a session one of them
        may hold fails, as nothing can tell a rerun from a race there.
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
  description:
    - C(create) or C(exists), as M(bai.cluster.bai_session_plan) returns it; the other
      results of that module come with it (O(state=reserved)).
  returned: O(state=reserved)
  type: str
reservation:
  description:
    - The session's ledger entry (name, session_id, state, kernels with agent and
      resources); null when O(state=read) finds none.
  returned: O(state=reserved), O(state=ready), O(state=read) with O(name)
  type: dict
ledger:
  description: Every reservation by session name, and per agent what they give out.
  returned: O(state=read) without O(name)
  type: dict
ended:
  description:
    - The ends of batch sessions called O(name) that the ledger remembers (O(ended)), newest
      first.
  returned: O(state=read) with O(name)
  type: list
  elements: dict
time_left:
  description:
    - Seconds session O(name) may still run (its lifetime, counted from when it started
      running); null without a lifetime.
  returned: O(state=read) with O(name)
  type: float
holders:
  description:
    - The agents that may hold session O(name) (its reservation's, and those whose kept
      read showed it).
  returned: O(state=read) with O(name)
  type: list
  elements: str
need_read:
  description:
    - The agents to read before this module can place the session (nothing was placed);
      only with O(agents) and without O(final).
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
  description:
    - Agents not placed on - paused or drained (M(bai.cluster.bai_agent_availability) -
      by the ledger's record, the agent's own in its fresh read, or its swarm node's
      availability) or down in the swarm's node list. A PENDING failure lists those of
      the session's resource group too, and its message says why each was passed over.
  returned: O(state=reserved), placed or PENDING
  type: list
  elements: str
kept:
  description: The agents whose kept reads this placement used.
  returned: O(state=reserved), placed
  type: list
  elements: str
dropped:
  description:
    - Reservations this run dropped - past their expiry or confirmed, and their agents run
      nothing of them (or part of one past its expiry, with O(state=reconciled)).
  returned: O(state=reserved), O(state=reconciled)
  type: list
  elements: str
adopted:
  description:
    - Sessions taken into the ledger as made - a reservation past its expiry whose agents
      run all of it, and (O(state=reconciled)) complete sessions the ledger did not know.
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
unchecked:
  description: Reservations on agents that were not read (kept).
  returned: O(state=reconciled)
  type: list
  elements: str
spared:
  description:
    - Incomplete sessions the ledger does not know, not removed because some agent was
      not read (their other part may be there).
  returned: O(state=reconciled)
  type: list
  elements: str
foreign:
  description:
    - Sessions that another ledger counts (C(NAME (ledger ID))), left alone; see
      O(adopt_ledgers).
  returned: O(state=reconciled)
  type: list
  elements: str
forsaken:
  description:
    - Sessions whose destroy was forced while an agent did not answer (O(left_on)); their
      leftovers on the agents read are in RV(remove), never adopted.
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
  description:
    - The sessions whose lifetime is up (C(session_lifetime_s), or the owner's longest
      under O(policies)), counted by the ledger's clock from when each started running;
      the caller ends them (playbooks/session_reconcile.yml destroys them).
  returned: O(state=reconciled)
  type: list
  elements: str
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
  description:
    - The ledger's identity - the swarm's cluster ID, or the file ledger's id (C(PATH.id),
      empty before its first write).
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
  description:
    - The queued sessions (as RV(queued)), in queue order.
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
more:
  description: How many other queued sessions would start now (left for the next run).
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


from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    Busy,
    Pending,
    SessionConflict,
    SpecError,
    StoreError,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    DOCKER_ARGUMENT_SPEC,
    DockerException,
    error_text,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling import admission
from ansible_collections.bai.cluster.plugins.module_utils.scheduling import availability as avail
from ansible_collections.bai.cluster.plugins.module_utils.scheduling import ledger as book
from ansible_collections.bai.cluster.plugins.module_utils.scheduling import ledger_store as store_
from ansible_collections.bai.cluster.plugins.module_utils.scheduling import session_queue as queue_
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import OutOfService
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.policies import (
    Limits,
    lifetime,
    limits_for,
    parse_policies,
    refusal,
    usage,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import (
    Kernel,
    Resources,
    SessionSpec,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.naming import kernel_id
from ansible_collections.bai.cluster.plugins.module_utils.session.plan import (
    agents_from_info,
    placement_failure,
    plan_session,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    expand_kernels,
    normalize_spec,
    spec_canonical,
    spec_hash,
)


def reserve(
    module: AnsibleModule,
    ledger: dict,
    now: float,
    missing: str = "",
    where: str = "",
    ids: list | None = None,
    nodes: dict | None = None,
) -> dict:
    params = module.params
    try:
        spec = normalize_spec(dict(params["spec"] or {}))
    except SpecError as exc:
        module.fail_json(msg=f"invalid session spec: {exc}")
    # Queued already: a rerun of the request finds it waiting; only the create holding
    # the lease of a scheduler pass (ticket) tries to start it.
    queued = queue_.queue_of(ledger).get(spec.name)
    if queued is not None:
        if queued["spec_hash"] != spec_hash(spec):
            module.fail_json(
                msg=f"session {spec.name} is queued (PENDING) with another request; cancel "
                f"it first (bai-cluster session destroy {spec.name}) or choose another "
                f"name; nothing was changed",
                conflict=True,
            )
        if not queue_.holds_ticket(queued, params["ticket"], now):
            return {"changed": False, "queued": queued_view(ledger, spec.name)}
    final = params["final"] and params["agents"] is not None
    # A waiting create (final) places by the kept reads alone: they follow destroys
    # (forget_session), the reads it made before waiting do not.
    fresh = (
        []
        if final
        else [book.on_ledger_clock(r) for r in params["agent_info"] or [] if not r.get("skipped")]
    )
    if missing:
        running = sorted(
            {str(row.get("name")) for r in fresh for row in (r.get("sessions") or {}).values()}
        )
        if missing == "lost" or running:
            how = (
                f"is missing (it was written before: {params['path']}.id is there)"
                if missing == "lost"
                else "does not exist yet"
            )
            seen = (
                f", and the agents run sessions it does not know ({', '.join(running)})"
                if running
                else ""
            )
            module.fail_json(
                msg=f"{where} {how}{seen}: a ledger is never "
                f"read as empty. If this cluster's ledger was lost, {book.REBUILD_HINT}; if "
                f"another ledger serves these agents, use it (bai_ledger_host, "
                f"bai_ledger_path). Nothing was changed."
            )
    others = {
        str(row.get("name")): str(row["ledger"])
        for r in fresh
        for row in (r.get("sessions") or {}).values()
        if ids and row.get("ledger") and row["ledger"] not in ids
    }
    if others:
        module.fail_json(
            msg=f"the agents run {admission.foreign_text(others)}, not by {where} "
            f"({ids[0] if ids else '?'}): two ledgers for one cluster would give its capacity "
            f"out twice. Create through that ledger (the inventory that made them), or, if it "
            f"is gone for good, adopt its sessions: bai-cluster session reconcile "
            f"--adopt-ledger ID. Nothing was changed."
        )
    # Agents this create tried to read and that did not answer are passed over, unless
    # they may hold this session: then nothing can tell a rerun from a race.
    read_now = {str((r.get("agent") or {}).get("name")) for r in fresh}
    away = {
        str(a): "did not answer this create's read (unreachable, or its engine failed)"
        for a in params["unanswered"]
        if a not in read_now
    }
    stuck = sorted(set(away) & book.holders(ledger, spec.name))
    if stuck:
        module.fail_json(
            msg=f"session {spec.name} was not placed: agent(s) {', '.join(stuck)} did not "
            f"answer and may hold it (its reservation or their last read names them); "
            f"nothing was changed. Run the create again once they answer, or destroy the "
            f"session (bai-cluster session destroy --force)."
        )
    expiry = book.expire(ledger, now, fresh)
    dropped = expiry.dropped + book.drop_stale(ledger, fresh)

    def ask_to_read(agents: list) -> dict:
        """Place nothing yet: read these agents and ask again (fresh reads are kept)."""
        return {
            "changed": bool(dropped or expiry.adopted),
            "save": bool(fresh),
            "need_read": agents,
            "ledger_time": now,
            "dropped": dropped,
        }

    if expiry.stuck:
        module.warn(
            f"session(s) {', '.join(expiry.stuck)}: a create died part-way and its agents "
            f"run part of it; it keeps its share until bai-cluster session reconcile "
            f"removes it"
        )
    info, kept, hinted = list(fresh), [], {}
    # Agents that take no new session: paused or drained by their own record (a fresh
    # read says so) or the ledger's, or down in the swarm's node list.
    unavailable = {
        str(r["agent"].get("name")): avail.describe(r["agent"]["availability"])
        for r in fresh
        if (r.get("agent") or {}).get("availability")
    }
    if params["agents"] is not None:  # the inventory's agents: kept reads for the rest
        declared = declarations(module)
        book.remember(ledger, fresh, now, declared)
        read = {str((r.get("agent") or {}).get("name")) for r in fresh}
        found = book.sources(
            ledger,
            params["agents"],
            name=spec.name,
            images=[role.image for role in spec.roles],
            paths=[mount.src for mount in spec.mounts],
            fresh=read,
            now=now,
            max_age=params["read_max_age"],
            nodes=nodes,
            # A missing ledger is never read as empty: every agent is read first.
            hints=not missing,
            away=away,
        )
        # A waiting create (final) reads only what an expired reservation needs.
        overdue = [a for a in book.overdue_agents(ledger, now) if a not in read and a not in away]
        need = overdue if final else found.read
        if need:
            return ask_to_read(need)
        # Only a fresh read of its agents tells a rerun from a race: a session this run
        # has not seen is read first (a waiting run meets it once the other run made it).
        holding = book.holders(ledger, spec.name) - read
        held = ledger["sessions"].get(spec.name)
        if holding and not (held and held.get("state") == book.CREATING):
            return ask_to_read(sorted(holding))
        records = ledger.get("agents") or {}
        kept, hinted = found.kept, found.hinted
        unavailable = {**found.unavailable, **unavailable}
    else:
        unavailable.update(away)
        paused = avail.records(ledger)
        for r in fresh:
            agent = r.get("agent") or {}
            why = avail.unavailable(
                str(agent.get("name")), str(agent.get("id") or ""), paused, None
            )
            if why:
                unavailable.setdefault(str(agent.get("name")), why)
    if unavailable:
        # Down, drained or paused agents take no new session (a holder's read stays).
        info = [
            r
            for r in fresh
            if (r.get("agent") or {}).get("name") not in unavailable or r.get("containers")
        ]
    if params["agents"] is not None:
        info += [book.kept_result(records[a]) for a in kept] + list(hinted.values())
    entry = ledger["sessions"].get(spec.name)
    counted = book.adjust(info, ledger)
    try:
        agents, existing, inventory = agents_from_info(None, None, counted)
    except SpecError as exc:
        module.fail_json(msg=f"bai_session_ledger: {exc}")
    read_at = min((float(r.get("read_at") or 0) for r in info if "agent" in r), default=0.0)
    try:
        if entry is not None:
            entry = {**entry, "name": spec.name}
        if book.before_placing(entry, existing, read_at) == "place" and entry is not None:
            del ledger["sessions"][spec.name]  # stale: its containers are gone
        policies = parse_policies(params["policies"])
        limits = limits_for(policies, spec.owner)
        if spec.name not in ledger["sessions"] and not existing:
            refuse_past_limits(module, spec, limits, ledger)
        # Without a lifetime of its own, a session gets its owner's longest.
        spec = replace(spec, lifetime_s=int(lifetime(limits, spec.lifetime_s)))
        passed_over = out_of_service(params["agents"], fresh, unavailable)
        usable = list(agents or [])
        if not existing and queue_.queue_of(ledger):
            # Only what the queued sessions ahead of it leave (docs/placement.md).
            me = queue_.waiting_of(
                spec,
                float(queued["submitted_at"]) if queued else now,
                int(queued["seq"]) if queued else queue_.next_seq(ledger),
            )
            room = queue_.room(
                queue_.waiting(ledger),
                me,
                usable,
                out_of_service=passed_over,
                refuse=owner_refusal(policies, ledger),
            )
            try:
                plan = plan_session(
                    spec, room.usable(), existing, inventory=inventory, out_of_service=passed_over
                )
            except Pending:
                ahead = room.ahead(me)
                if not ahead:
                    raise
                # It would fit but for the older queued sessions: it waits its turn.
                plan_session(
                    spec, usable, existing, inventory=inventory, out_of_service=passed_over
                )
                raise Pending(
                    f"waits behind {', '.join(ahead)} (queued before it, waiting for "
                    f"agents this session would use)"
                ) from None
        else:
            plan = plan_session(
                spec, usable, existing, inventory=inventory, out_of_service=passed_over
            )
    except PolicyWait as exc:
        return wait_in_queue(module, ledger, spec, queued, now, str(exc), dropped)
    except (Pending, SpecError) as exc:
        if kept and not final:
            # Kept reads only ever say yes: read those agents before saying no.
            return ask_to_read(kept)
        # Queued, unless waiting cannot help or the name is another run's right now.
        if (
            isinstance(exc, Pending)
            and not exc.permanent
            and (params["queue"] or queued)
            and spec.name not in ledger["sessions"]
        ):
            return wait_in_queue(module, ledger, spec, queued, now, exc.reason, dropped)
        if queued:
            # The scheduled start of a queued session that can never start here.
            queue_.dequeue(ledger, spec.name)
            return {
                **placement_failure(spec.name, exc),
                "failed": True,
                "changed": True,
                "msg": f"{placement_failure(spec.name, exc)['msg']}; it left the queue",
            }
        failure = placement_failure(spec.name, exc)
        if isinstance(exc, Pending):
            failure["dropped"] = dropped
            failure["unavailable"] = sorted(
                a.name
                for a in out_of_service(params["agents"], fresh, unavailable)
                if a.group == spec.resource_group
            )
        module.fail_json(**failure)
    except SessionConflict as exc:
        module.fail_json(**placement_failure(spec.name, exc))
    # Placed by hints (capacity without a recent read): read those agents, place again.
    unverified = [a for a in plan["agents"] if a in hinted]
    if unverified:
        return ask_to_read(unverified)
    plan = {
        **plan,
        "requested_mode": spec.mode,
        "spec": spec_canonical(spec),
        "spec_hash": spec_hash(spec),
        "size": spec.size,
        "read": sorted(read) if params["agents"] is not None else None,
        "kept": kept,
        "unavailable": sorted(unavailable),
    }
    # Keeping the agents' reads is bookkeeping, not a change to the cluster.
    changed = bool(dropped or expiry.adopted)
    if spec.name not in ledger["sessions"]:
        entry = book.reservation(plan, now=now, ttl=params["ttl"])
        if plan["action"] == "exists":  # made before the ledger: take it in as it is
            entry.update(state=book.READY, expires_at=None, ready_at=now)
        if queued:  # the scheduled start: it leaves the queue in this very step
            queue_.dequeue(ledger, spec.name)
            entry["submitted_at"] = queued["submitted_at"]
        ledger["sessions"][spec.name] = entry
        changed = True
    return {
        **plan,
        "changed": changed,
        "reservation": ledger["sessions"][spec.name],
        "dropped": dropped,
        "adopted": expiry.adopted,
        "save": bool(fresh),
    }


class PolicyWait(Exception):
    """The owner's limits refuse the session for now; with O(queue) it waits."""


def total(kernels: Iterable[Kernel]) -> Resources:
    """The resources of ``kernels`` in all."""
    request = Resources(0.0, 0, 0)
    for kernel in kernels:
        request = request + kernel.resources
    return request


def refuse_past_limits(
    module: AnsibleModule, spec: SessionSpec, limits: Limits, ledger: dict
) -> None:
    """Fail, changing nothing, when the owner's ``limits`` refuse a new session ``spec``
    (with O(queue), raise PolicyWait unless its lifetime is past the owner's longest,
    which waiting cannot change)."""
    held = usage(ledger["sessions"].values(), spec.owner)
    why = refusal(limits, held, spec.name, total(expand_kernels(spec)), spec.lifetime_s)
    if not why:
        return
    cap = limits.lifetime_s
    forever = cap is not None and spec.lifetime_s > cap.value
    if not forever and (module.params["queue"] or spec.name in queue_.queue_of(ledger)):
        raise PolicyWait(f"refused for now by the owner's limits: {why}")
    module.fail_json(msg=f"refused by the owner's limits: {why}; nothing was created", policy=True)


def owner_refusal(
    policies: dict, ledger: dict
) -> Callable[[queue_.Waiting, Sequence[queue_.Waiting]], str]:
    """For the queue's pass: why the owner's limits hold a queued session back, counting
    the ledger's sessions and those this pass starts before it."""

    def refuse(session: queue_.Waiting, started: Sequence[queue_.Waiting]) -> str:
        limits = limits_for(policies, session.owner)
        held = usage(ledger["sessions"].values(), session.owner)
        for other in started:
            if other.owner == session.owner:
                held = held.plus(other.name, total(other.kernels))
        return refusal(limits, held, session.name, total(session.kernels))

    return refuse


def queued_view(ledger: dict, name: str) -> dict:
    entry = queue_.queue_of(ledger)[name]
    return queue_.queued_view(entry, queue_.positions(ledger)[name])


def wait_in_queue(
    module: AnsibleModule,
    ledger: dict,
    spec: SessionSpec,
    queued: dict | None,
    now: float,
    reason: str,
    dropped: list,
) -> dict:
    """Queue ``spec`` (or keep it queued, in its place, with the new reason): PENDING."""
    if queued is None:
        queue_.enqueue(
            ledger, spec, now=now, reason=reason, authorized_keys=module.params["authorized_keys"]
        )
    else:
        queued["reason"] = reason
        queued.pop("lease", None)
    return {"changed": True, "queued": queued_view(ledger, spec.name), "dropped": dropped}


def out_of_service(declared: list | None, fresh: list, unavailable: dict) -> list:
    """The agents placement passed over (``unavailable``: name -> why), with their
    resource groups (the inventory's, else their reads')."""
    groups = {str(r["agent"].get("name")): r["agent"].get("group") for r in fresh if "agent" in r}
    groups.update({str(a["name"]): a.get("group") or "default" for a in declared or []})
    return [
        OutOfService(name, str(groups.get(name) or "default"), why)
        for name, why in sorted(unavailable.items())
    ]


def declarations(module: AnsibleModule) -> dict:
    """O(agents) as the ledger keeps declarations (agent name -> group, resources)."""
    try:
        return book.declarations(module.params["agents"])
    except (KeyError, TypeError):
        module.fail_json(
            msg="bai_session_ledger: agents must be a list of {name, group, resources}"
        )


def reconciled(module: AnsibleModule, ledger: dict, now: float, ids: list) -> dict:
    """state=reconciled: the ledger made to agree with the agents' reads."""
    params = module.params
    reads = [
        book.on_ledger_clock(r)
        for r in params["agent_info"] or []
        if not r.get("skipped") and not r.get("failed") and "agent" in r
    ]
    names = {str(r["agent"].get("name")) for r in reads}
    # Its reads skip GPU detection, so they are not kept as the agents' records; reconcile()
    # forgets the sessions it dropped or removed.
    inventory = list(declarations(module)) if params["agents"] is not None else sorted(names)
    unread = [a for a in inventory if a not in names]
    done = book.reconcile(ledger, reads, now=now, every_agent_read=not unread, ledgers=ids)
    return {
        "changed": bool(done.adopted or done.dropped or done.remove),
        "save": True,
        **done._asdict(),
        "unread": unread,
        "held": sorted(ledger["sessions"]),
        "lifetime_up": book.lifetimes_up(ledger, now),
        "waiting": len(queue_.queue_of(ledger)),
    }


def queue_list(ledger: dict) -> list:
    """Every queued session as list and show give it, in queue order."""
    places = queue_.positions(ledger)
    entries = queue_.queue_of(ledger)
    return [
        queue_.queued_view(entries[name], places[name])
        for name in sorted(
            entries,
            key=lambda n: (
                entries[n]["group"],
                float(entries[n]["submitted_at"]),
                int(entries[n]["seq"]),
                n,
            ),
        )
    ]


def scheduled(module: AnsibleModule, ledger: dict, now: float, nodes: dict | None) -> dict:
    """state=scheduled: which queued sessions start now (by the agents' kept reads, or
    their declared capacity), each one's reason recorded, and a lease for at most
    O(limit) of them."""
    params = module.params
    entries = queue_.queue_of(ledger)
    if not entries:
        return {"changed": False, "start": [], "more": 0, "waiting": 0, "queue": []}
    records = ledger.get("agents") or {}
    paused = avail.records(ledger)
    info, unavailable = [], {}
    for declared in params["agents"] or []:
        name = str(declared["name"])
        record = records.get(name)
        node = book.node_of(nodes, name, record)
        identity = str(((record or {}).get("agent") or {}).get("id") or "")
        why = avail.unavailable(name, identity, paused, node)
        if why:
            unavailable[name] = why
            continue
        same = record is not None and record.get("declared") == book.declarations([declared])[name]
        if same and record is not None:
            info.append(book.kept_result(record))
            continue
        found = book.hint(declared, record if same else None, node)
        if found is not None:
            info.append(found)
    try:
        agents = agents_from_info(None, None, book.adjust(info, ledger))[0]
    except SpecError as exc:
        module.fail_json(msg=f"bai_session_ledger: {exc}")
    decisions = queue_.schedule(
        queue_.waiting(ledger),
        agents or [],
        out_of_service=out_of_service(params["agents"], [], unavailable),
        refuse=owner_refusal(parse_policies(params["policies"]), ledger),
    )
    changed, more = False, 0
    start: list[dict] = []
    for decision in decisions:
        entry = entries[decision.session.name]
        if decision.starts:
            if queue_.leased(entry, now):
                continue
            if len(start) >= params["limit"]:
                more += 1
                continue
            ticket = kernel_id()
            queue_.lease(entry, ticket, now, params["lease_s"])
            changed = True
            start.append(
                {
                    "name": entry["name"],
                    "ticket": ticket,
                    "spec": entry["spec"],
                    "authorized_keys": list(entry.get("authorized_keys") or []),
                }
            )
        elif entry.get("reason") != decision.reason:
            entry["reason"] = decision.reason
            changed = True
    return {
        "changed": changed,
        "start": start,
        "more": more,
        "waiting": len(entries),
        "queue": queue_list(ledger),
    }


def node_table(module: AnsibleModule, store: store_.Store) -> dict | None:
    """The swarm's node list by node ID and hostname (one call on this manager), for a
    placement; None without a swarm, or when the list cannot be had (then every agent
    counts as up)."""
    if module.params["state"] not in ("reserved", "scheduled") or not isinstance(
        store, store_.SwarmStore
    ):
        return None
    try:
        return book.node_table(store.api.nodes())
    except DockerException as exc:
        module.warn(f"the swarm's node list: {error_text(exc)}; placing without it")
        return None


def step(
    module: AnsibleModule,
    store: store_.Store,
    snapshot: store_.Snapshot,
    now: float,
    nodes: dict | None = None,
) -> dict:
    """What O(state) does with one read of the ledger (the store writes it when asked)."""
    params = module.params
    state, where = params["state"], store.where
    ledger, missing = snapshot.ledger, snapshot.missing
    if snapshot.damaged and state == "identity":
        return {"changed": False, "ledger_time": now, "damaged": snapshot.damaged}
    if snapshot.damaged and state != "reconciled":
        damaged = snapshot.damaged
        module.fail_json(msg=f"{where}: {damaged}; {book.REBUILD_HINT}; nothing was changed")
    # Its identity (and those it adopted): on the session's containers, checked by agents.
    ids = store_.ledger_ids(
        store.identity(create=state in ("reserved", "reconciled") and not module.check_mode),
        ledger,
    )
    if state == "reconciled":
        for other in params["adopt_ledgers"]:
            if other not in ids:
                ledger.setdefault("aliases", []).append(other)
                ids.append(other)
        rebuilt = (
            f"damaged - {snapshot.damaged}"
            if snapshot.damaged
            else ("missing" if missing == "lost" else "new" if missing else None)
        )
        # Rebuilt from the agents' labels; a damaged ledger is kept beside it.
        done = reconciled(module, ledger, now, ids)
        return {**done, "rebuilt": rebuilt, "set_aside": True, "ledger_ids": ids}
    if state == "reserved":
        placed = reserve(module, ledger, now, missing, where, ids, nodes)
        return {**placed, "ledger_ids": ids}
    if state == "scheduled":
        return scheduled(module, ledger, now, nodes)
    if state == "ready":
        held = ledger["sessions"].get(params["name"])
        gone = held is None or held["session_id"] != params["session_id"]
        # In check mode nothing was reserved, so there is nothing to confirm.
        if gone and not module.check_mode:
            # Its containers were made by an agent that admitted them, but the ledger no
            # longer counts them: this create must not report success.
            module.fail_json(
                msg=f"session {params['name']}: this create's reservation is gone from "
                f"{where} (it outlived session_reservation_ttl_s and a check of its agents "
                f"found nothing of it, or the ledger was rebuilt); the session is not confirmed"
            )
        changed = book.mark_ready(ledger, params["name"], params["session_id"], now)
        return {"changed": changed, "reservation": held}
    if state == "absent" and params["left_on"]:
        forsaken = book.forsake(
            ledger, params["name"], params["session_id"], params["left_on"], now
        )
        return {"changed": forsaken}
    if state == "absent" and not params["session_id"] and params["name"] in queue_.queue_of(ledger):
        # A queued session is cancelled: it leaves the queue (it holds nothing else).
        queue_.dequeue(ledger, params["name"])
        return {"changed": True, "cancelled": True, "waiting": len(queue_.queue_of(ledger))}
    if state == "absent":
        released = book.release(ledger, params["name"], params["session_id"])
        if params["ended"] and params["session_id"]:
            book.record_end(ledger, params["name"], params["session_id"], params["ended"], now)
        return {
            "changed": released or bool(params["ended"] and params["session_id"]),
            "waiting": len(queue_.queue_of(ledger)),
        }
    read: dict = {"changed": False, "ledger_time": now}
    if missing:
        read["missing"] = True
    if state == "identity":
        return read
    if params["name"]:
        held = ledger["sessions"].get(params["name"])
        return {
            **read,
            "reservation": held,
            "time_left": book.time_left(held, now) if held else None,
            "holders": sorted(book.holders(ledger, params["name"])),
            "ended": book.ends_of(ledger, params["name"]),
            "queued": (
                queued_view(ledger, params["name"])
                if params["name"] in queue_.queue_of(ledger)
                else None
            ),
        }
    return {
        **read,
        "ledger": {"sessions": ledger["sessions"], "given_out": book.given_out(ledger)},
        "queue": queue_list(ledger),
    }


def run(module: AnsibleModule) -> dict:
    params = module.params
    state = params["state"]
    if state in ("ready", "absent") and not params["name"]:
        module.fail_json(msg=f"bai_session_ledger: state={state} needs name")
    if state == "absent" and params["left_on"] and not params["session_id"]:
        module.fail_json(msg="bai_session_ledger: left_on needs session_id")
    if state == "ready" and not params["session_id"]:
        module.fail_json(msg="bai_session_ledger: state=ready needs session_id")
    if state == "reserved" and (
        params["spec"] is None or (params["agent_info"] is None and params["agents"] is None)
    ):
        module.fail_json(
            msg="bai_session_ledger: state=reserved needs spec and agent_info or agents"
        )
    if state == "reconciled" and params["agent_info"] is None:
        module.fail_json(msg="bai_session_ledger: state=reconciled needs agent_info")
    try:  # bad limits are refused before anything is read
        parse_policies(params["policies"])
    except SpecError as exc:
        module.fail_json(msg=f"bai_session_ledger: {exc}; nothing was changed")
    store = store_.open_store(module)
    nodes = node_table(module, store)
    try:
        result = store_.transact(
            store,
            lambda snapshot, now: step(module, store, snapshot, now, nodes),
            write=not module.check_mode,
        )
    except Busy:
        module.fail_json(
            msg=f"{store.where} stayed locked for {params['lock_timeout']} s (another "
            f"create holds it; if none runs, a stuck process on this host does)"
        )
    except StoreError as exc:
        module.fail_json(msg=str(exc))
    except (DockerException, OSError) as exc:
        module.fail_json(msg=f"{store.where}: {error_text(exc)}")
    if result.pop("attempts", 1) > 1:
        result["retried"] = True
    return {**result, "ledger_id": store.identity(), "store": store.kind}


ARGUMENT_SPEC = {
    "state": {
        "type": "str",
        "choices": ["reserved", "ready", "absent", "read", "reconciled", "identity", "scheduled"],
        "default": "reserved",
    },
    "name": {"type": "str"},
    "session_id": {"type": "str"},
    "spec": {"type": "dict"},
    "agent_info": {"type": "list", "elements": "dict"},
    "agents": {"type": "list", "elements": "dict"},
    "read_max_age": {"type": "int", "default": 300},
    "final": {"type": "bool", "default": False},
    "ttl": {"type": "int", "default": 900},
    "lock_timeout": {"type": "int", "default": 60},
    **store_.STORE_ARGUMENT_SPEC,
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


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
