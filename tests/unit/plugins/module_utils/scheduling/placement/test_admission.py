"""Admission on the agent (scheduling/placement/admission.py): pure logic, and the property that
whatever the session ledger decides (stale reads, expired reservations, creates that die
part-way, sessions stopped and started again by hand or by Docker's restart policy), the
containers that exist on an engine never hold more than the agent offers, nor one GPU
device twice, as long as every create and every start the toolkit makes is admitted."""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import replace

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Pending, SpecError
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_AGENT_ID,
    LABEL_CPU,
    LABEL_GPU,
    LABEL_GPU_DEVICES,
    LABEL_LEDGER,
    LABEL_MEM,
    LABEL_SESSION,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.container_row import ContainerRow
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    document,
    kept_reads,
    reservations,
    usage,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    ledger_store as store_,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_identity import (
    agent_identity,
    engine_identity,
    engine_of,
    slot_of,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.roster import Declared
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement import admission
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.admission import (
    Holding,
    Offer,
    admit,
    holdings,
    of_slot,
    offer_of,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.plan import (
    agents_from_reads,
    plan_session,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import normalize_spec
from hypothesis import example, given, settings
from hypothesis import strategies as st
from ledger_fake import reads_of

GI = 1024**3


def container(name, session, cpu, mem_g, devices=(), state="running", identity="E"):
    labels = {
        LABEL_SESSION: session,
        LABEL_SESSION_ID: f"id-{session}",
        LABEL_CPU: str(cpu),
        LABEL_MEM: str(mem_g * GI),
        LABEL_GPU: str(len(devices)),
        LABEL_GPU_DEVICES: ",".join(map(str, devices)),
    }
    if identity is not None:
        labels[LABEL_AGENT_ID] = identity
    return {"Names": [f"/{name}"], "State": state, "Labels": labels}


def rows(items):
    """The engine's list entries as the agent reads them."""
    return [ContainerRow.of_engine(item) for item in items]


def ask(name, cpu, mem_g, devices=()):
    return Holding(name, "new", "id-new", "new", float(cpu), mem_g * GI, tuple(devices))


# --- identities ----------------------------------------------------------------------------
def test_an_engine_is_its_swarm_node_else_its_engine_id():
    alone = {"ID": "AB:CD", "Swarm": {"NodeID": "", "LocalNodeState": "inactive"}}
    assert engine_identity(alone) == "AB:CD"
    active = {"ID": "AB:CD", "Swarm": {"NodeID": "n0de", "LocalNodeState": "active"}}
    assert engine_identity(active) == "n0de"
    assert engine_identity({"ID": "AB:CD"}) == "AB:CD"
    with pytest.raises(ValueError, match="no ID"):
        engine_identity({})


def test_an_agent_identity_s_engine_part_is_its_node():
    assert engine_of("n0de/va3") == "n0de" and engine_of("n0de") == "n0de"
    assert engine_of(agent_identity("AB:CD", "va3")) == "AB:CD"


def test_a_virtual_agent_is_a_slot_of_its_engine():
    assert agent_identity("n0de", None) == "n0de" and slot_of("n0de") == ""
    assert agent_identity("n0de", "va3") == "n0de/va3" and slot_of("n0de/va3") == "va3"
    # The engine part does not matter on the engine: it changes when the engine joins a swarm.
    assert slot_of("AB:CD/va3") == slot_of("n0de/va3")
    for bad in ("a/b", " "):
        with pytest.raises(ValueError, match="bai_agent_id"):
            agent_identity("n0de", bad)


def test_each_slot_holds_its_own_containers_and_old_ones_count_for_every_slot():
    listed = [
        container("a", "s1", 1, 1, identity="E"),
        container("b", "s2", 1, 1, identity="E/va1"),
        container("c", "s3", 1, 1, identity="OTHER/va1"),  # same slot, engine since renamed
        container("d", "s4", 1, 1, identity=None),  # made before the label existed
        {"Names": ["/x"], "State": "running", "Labels": {}},  # not a session container
    ]
    assert [c.name for c in of_slot(rows(listed), "")] == ["a", "d"]
    assert [h.container for h in holdings(rows(listed), "va1")] == ["b", "c", "d"]


# --- the rule -----------------------------------------------------------------------------
def test_stopped_paused_and_created_containers_hold_their_share():
    offer = Offer(4.0, 8 * GI, (0, 1))
    listed = [
        container("a", "s1", 1, 2, (0,), state="exited"),
        container("b", "s1", 1, 2, state="paused"),
        container("c", "s2", 1, 2, (1,), state="created"),
    ]
    held = holdings(rows(listed), "")
    assert admit(offer, held, [ask("n1", 1, 2)]).admitted
    refused = admit(offer, held, [ask("n1", 1.5, 1)])
    assert not refused.admitted
    assert "short of cpu (free 1)" in refused.reason
    assert "s1: 2 container(s), exited, paused" in refused.reason
    assert "GPU devices 0,1" in refused.reason
    assert "it offers cpu 4, mem 8g, GPU devices 0,1" in refused.reason


@pytest.mark.parametrize(
    ("request_", "why"),
    [
        ([ask("n", 0.5, 5)], "mem (free 4g)"),
        ([ask("n", 0.5, 1, (0,))], "GPU device(s) 0 (held)"),
        ([ask("n", 0.5, 1, (7,))], "GPU device(s) 7 (not offered)"),
        ([ask("n", 0.5, 1, (1,)), ask("m", 0.5, 1, (1,))], "GPU device(s) 1 (asked twice)"),
    ],
)
def test_each_refusal_says_what_is_short(request_, why):
    held = holdings(rows([container("a", "s1", 1, 4, (0,))]), "")
    decision = admit(Offer(4.0, 8 * GI, (0, 1)), held, request_)
    assert not decision.admitted and why in decision.reason, decision.reason


def test_cpu_sums_are_compared_with_an_epsilon():
    held = [ask(f"c{i}", 0.1, 0) for i in range(3)]
    assert admit(Offer(0.4, GI), held, [ask("n", 0.1, 0)]).admitted


def test_the_offer_is_the_declaration_else_the_engine():
    info = {"NCPU": 8, "MemTotal": 16 * GI}
    offer, gpus = offer_of(None, info, {})
    assert offer == Offer(8.0, 16 * GI, ()) and gpus["source"] == "none"
    offer, gpus = offer_of({"cpu": 2, "gpu": 2}, info, {})
    assert offer == Offer(2.0, 16 * GI, (0, 1)) and gpus["source"] == "declared"
    with pytest.raises(SpecError):
        offer_of({"cpus": 2}, info, {})


# --- the property: the engine never holds more than the agent offers ------------------------
OFFER_CPU = 4
OFFER_GPUS = (0, 1)
OFFER = Offer(float(OFFER_CPU), OFFER_CPU * 2 * GI, OFFER_GPUS)


def read(engine, now):
    """What bai_agent_info reports of the engine (every state counts), as the ledger gets it."""
    listed = list(engine.values())
    held = holdings(rows(listed), "")
    return {
        "agent": {
            "name": "a1",
            "group": "default",
            "cpu": OFFER.cpu,
            "mem": OFFER.mem,
            "gpu": len(OFFER_GPUS),
            "used_cpu": round(sum(h.cpu for h in held), 6),
            "used_mem": sum(h.mem for h in held),
            "used_gpu": sum(len(h.gpu_devices) for h in held),
            "gpu_devices": list(OFFER_GPUS),
            "gpu_in_use": sorted({d for h in held for d in h.gpu_devices}),
        },
        "containers": [],
        "images": {},
        "paths": {},
        "sessions": usage.observed_sessions(rows(listed)),
        "read_at": now,
    }


def make(engine, plan, upto):
    """An agent's module run: admit the plan's first ``upto`` containers, then create them
    (nothing when refused); returns whether it was admitted."""
    kernels = plan.to_dict()["kernels"][:upto]  # the module's arguments
    if any(k["container_name"] in engine for k in kernels):
        return False  # the names are another instance's: the module refuses
    request = [
        Holding(
            k["container_name"],
            "x",
            plan.session_id,
            "new",
            float(k["resources"]["cpu"]),
            int(k["resources"]["mem"]),
            tuple(k["gpu_devices"]),
        )
        for k in kernels
    ]
    if not admit(OFFER, holdings(rows(list(engine.values())), ""), request).admitted:
        return False
    for k in kernels:
        engine[k["container_name"]] = {
            "Names": [f"/{k['container_name']}"],
            "State": "running",
            "Labels": {**k["labels"], LABEL_AGENT_ID: "E"},
        }
    return True


def assert_engine_within_offer(engine):
    held = holdings(rows(list(engine.values())), "")
    assert sum(h.cpu for h in held) <= OFFER.cpu + 1e-6
    assert sum(h.mem for h in held) <= OFFER.mem
    devices = [d for h in held for d in h.gpu_devices]
    assert len(devices) == len(set(devices)) and set(devices) <= set(OFFER_GPUS)


steps = st.lists(
    st.tuples(
        st.sampled_from(["create", "die", "confirm", "expire", "destroy", "stop", "start", "read"]),
        st.integers(0, 7),  # which session / container
        st.integers(1, 3),  # size
        st.sampled_from([0.5, 1, 2]),  # cpu each
        st.integers(0, 1),  # gpus each
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(steps)
# Always tried: a create that died leaves containers and its reservation expires; a
# stopped session read, another create, then the stopped one started again; a stale read
# after a destroy.
@example([("die", 0, 2, 2, 0), ("expire", 0, 1, 1, 0), ("create", 1, 2, 2, 0)])
@example(
    [
        ("create", 0, 2, 1, 1),
        ("stop", 0, 1, 1, 0),
        ("stop", 1, 1, 1, 0),
        ("read", 0, 1, 1, 0),
        ("create", 1, 2, 1, 1),
        ("start", 0, 1, 1, 0),
        ("start", 1, 1, 1, 0),
    ]
)
@example(
    [("create", 0, 2, 2, 0), ("destroy", 1, 1, 1, 0), ("read", 0, 1, 1, 0), ("create", 2, 2, 2, 0)]
)
def test_property_no_ledger_mistake_puts_more_on_an_engine_than_it_offers(ops):
    """Random interleavings of reserve (create), a create that dies part-way (die: some
    containers made, never confirmed), confirm, expiry of every creating reservation,
    destroy, stop and start (by hand, or Docker's restart policy: no admission), and fresh
    or stale reads. The ledger may be wrong in every way the issue lists; the engine's
    truth stays within the offer because every create is admitted."""
    engine: dict[str, dict] = {}
    ledger = document.empty()
    reads = [read(engine, 0.0)]
    plans: dict[str, dict] = {}
    now = 1000.0
    for op, n, size, cpu, gpu in ops:
        now += 1.0
        name = f"s{n}"
        if op in ("create", "die"):
            stale = reads[n % len(reads)]  # any read this run has seen, however old
            resources = {"cpu": cpu, "mem": f"{cpu}g", "gpu": gpu}
            spec = normalize_spec({"name": name, "size": size, "resources": resources})
            with contextlib.suppress(Pending):
                reservations.expire(ledger, now)
                agents, _existing, inventory = agents_from_reads(
                    usage.adjust(reads_of([stale]), ledger)
                )
                plan = plan_session(spec, agents, [], inventory=inventory)
                plan = replace(plan, spec_hash="h")
                ledger.sessions[name] = reservations.reservation(plan, now=now, ttl=30)
                plans[name] = plan
                made = make(engine, plan, size if op == "create" else max(size - 1, 1))
                if made and op == "create":
                    reservations.mark_ready(ledger, name, plan.session_id, now)
                elif not made:
                    reservations.release(ledger, name, plan.session_id)
        elif op == "confirm" and name in plans:
            reservations.mark_ready(ledger, name, plans[name].session_id, now)
        elif op == "expire":
            reservations.expire(ledger, now + 10_000)
        elif op == "destroy":
            for cname in [c for c in engine if c.startswith(f"bai-{name}-")]:
                del engine[cname]
            reservations.release(ledger, name)
        elif op in ("stop", "start") and engine:
            key = sorted(engine)[n % len(engine)]
            engine[key]["State"] = "exited" if op == "stop" else "running"
        elif op == "read":
            reads.append(read(engine, now))
        assert_engine_within_offer(engine)


def test_sessions_another_ledger_counts_are_foreign():
    """Containers name the ledger that counts them; those of another ledger are foreign
    (any slot of the engine), unlabelled ones (older versions) belong to any ledger, and
    without an identity nothing is foreign."""
    listed = [
        {"Labels": {LABEL_SESSION: "mine", LABEL_LEDGER: "cluster-a"}},
        {"Labels": {LABEL_SESSION: "adopted", LABEL_LEDGER: "old-file"}},
        {"Labels": {LABEL_SESSION: "theirs", LABEL_LEDGER: "cluster-b"}},
        {"Labels": {LABEL_SESSION: "legacy"}},
        {"Labels": {"other": "x", LABEL_LEDGER: "cluster-b"}},
    ]
    found = admission.foreign(rows(listed), ["cluster-a", "old-file"])
    assert found == {"theirs": "cluster-b"}
    assert admission.foreign(rows(listed), []) == {}
    assert admission.foreign_text(found) == (
        "session(s) theirs counted by another session ledger (cluster-b)"
    )


# --- the same, with the ledger in its store and placement by hints -----------------------
AGENT = Declared("a1", "default", None)


def place_through_store(store, engine, name, spec, clock):
    """bai_session_ledger's create steps, each one transaction of the real file store:
    place by what the ledger knows (a kept read, else a hint from the agent's earlier read),
    read only the agent a hint placed on, place again with that read, reserve. Returns the
    plan, or None (PENDING)."""
    fresh: list[dict] = []
    for _round in range(3):

        def step(snapshot, now, fresh=tuple(fresh)):
            fresh = list(fresh)
            ledger = snapshot.ledger
            reservations.expire(ledger, now, reads_of(fresh))
            kept_reads.remember(ledger, reads_of(fresh), now, {AGENT.name: AGENT})
            found = kept_reads.sources(
                ledger,
                [AGENT],
                name=name,
                images=[],
                paths=[],
                fresh={r["agent"]["name"] for r in fresh},
                now=now,
                max_age=5,
            )
            if found.read:
                return {"need": found.read, "save": True}
            kept = [kept_reads.kept_result(ledger.agents[a]) for a in found.kept]
            info = fresh + kept + list(found.hinted.values())
            agents, _existing, inventory = agents_from_reads(usage.adjust(reads_of(info), ledger))
            try:
                plan = plan_session(spec, agents, [], inventory=inventory)
            except Pending:
                return {"pending": True, "save": bool(fresh)}
            if any(a in found.hinted for a in plan.agents):
                return {"need": plan.agents, "save": bool(fresh)}
            ledger.sessions[name] = reservations.reservation(
                replace(plan, spec_hash="h"), now=now, ttl=30
            )
            return {"plan": plan, "changed": True}

        done = store_.transact(store, step, clock=clock)
        if "need" not in done:
            return done.get("plan")
        fresh = [read(engine, clock())]
    return None


@settings(max_examples=150, deadline=None)
@given(steps)
@example([("create", 0, 2, 2, 0), ("read", 0, 1, 1, 0), ("create", 1, 2, 2, 0)])
def test_property_the_store_and_hints_never_put_more_on_an_engine_than_it_offers(ops):
    """Random interleavings of create (placed by kept reads and hints through the real
    file store, reading only the agent placed on), a create that dies part-way, confirm,
    expiry, destroy, stop, start and a container removed by hand: what the engine runs
    stays within the offer, and the ledger file stays readable throughout."""
    engine: dict[str, dict] = {}
    clock = iter(range(1_000, 1_000_000, 3))
    with tempfile.TemporaryDirectory() as folder:
        store = store_.FileStore(os.path.join(folder, "ledger.json"), lock_timeout=5)

        def tick() -> float:  # the ledger's clock, 3 s a step
            return float(next(clock))

        store_.transact(store, lambda snap, now: {"save": True}, clock=tick)
        store_.transact(
            store,
            lambda snap, now: (
                kept_reads.remember(
                    snap.ledger, reads_of([read(engine, now)]), now, {AGENT.name: AGENT}
                )
                or {"save": True}
            ),
            clock=tick,
        )
        plans: dict[str, dict] = {}

        def change(what) -> None:  # one ledger step: what(ledger, now) -> changed
            store_.transact(
                store, lambda snap, now: {"changed": what(snap.ledger, now)}, clock=tick
            )

        for op, n, size, cpu, gpu in ops:
            name = f"s{n}"
            if op in ("create", "die"):
                resources = {"cpu": cpu, "mem": f"{cpu}g", "gpu": gpu}
                spec = normalize_spec({"name": name, "size": size, "resources": resources})
                plan = place_through_store(store, engine, name, spec, tick)
                if plan is not None:
                    plans[name] = plan
                    made = make(engine, plan, size if op == "create" else max(size - 1, 1))
                    sid = plan.session_id
                    if made and op == "create":
                        change(
                            lambda led, now, n=name, s=sid: reservations.mark_ready(led, n, s, now)
                        )
                    elif not made:
                        change(lambda led, now, n=name, s=sid: reservations.release(led, n, s))
            elif op == "confirm" and name in plans:
                sid = plans[name].session_id
                change(lambda led, now, n=name, s=sid: reservations.mark_ready(led, n, s, now))
            elif op == "expire":
                change(lambda led, now: bool(reservations.expire(led, now + 10_000).dropped))
            elif op == "destroy":
                for cname in [c for c in engine if c.startswith(f"bai-{name}-")]:
                    del engine[cname]
                change(lambda led, now, n=name: reservations.release(led, n))
            elif op in ("stop", "start") and engine:
                key = sorted(engine)[n % len(engine)]
                engine[key]["State"] = "exited" if op == "stop" else "running"
            elif op == "read" and engine:  # "kill": a container removed by hand
                del engine[sorted(engine)[n % len(engine)]]
            assert_engine_within_offer(engine)
        assert store.load().damaged == ""
