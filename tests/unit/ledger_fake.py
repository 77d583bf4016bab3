"""What the reservation ledger's tests share: agent reads, a create through the ledger
(expire, adjust, place, reserve), container rows, and the cluster property's strategy."""

from dataclasses import replace

from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_CPU,
    LABEL_GPU,
    LABEL_GPU_DEVICES,
    LABEL_MEM,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    document,
    reservations,
    roster,
    usage,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.agent_read import (
    AgentRead,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.plan import (
    agents_from_reads,
    plan_session,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import normalize_spec
from ansible_collections.bai.cluster.plugins.modules import bai_session_ledger
from docker_fake import FakeEngine, run_module
from hypothesis import given
from hypothesis import strategies as st

GI = 1024**3


def info(name, cpu=16, mem_g=32, gpus=(), read_at=1000.0, sessions=None, used=(0.0, 0, 0)):
    """One registered bai_agent_info result, as the agent reported it at read_at."""
    return {
        "agent": {
            "name": name,
            "group": "default",
            "cpu": cpu,
            "mem": mem_g * GI,
            "gpu": len(gpus),
            "used_cpu": used[0],
            "used_mem": used[1],
            "used_gpu": used[2],
            "gpu_devices": list(gpus),
            "gpu_in_use": sorted({d for s in (sessions or {}).values() for d in s["gpu_devices"]}),
        },
        "containers": [],
        "images": {},
        "paths": {},
        "sessions": sessions or {},
        "read_at": read_at,
    }


def fresh_read(cpu=8, name="a1"):
    """A fresh read of agent ``name`` (id ``id-NAME``, 16 GiB) that runs nothing, taken
    after the ledger asked (``read_after``): what a create hands bai_session_ledger."""
    found = info(name, cpu=cpu, mem_g=16)
    found["agent"]["id"] = f"id-{name}"
    return {**found, "read_after": 999.0}


# The one agent of the module-level ledger tests, as the inventory declares it.
ONE_AGENT = [{"name": "a1", "group": "default", "resources": None}]


def ledger_step(path, **args):
    """bai_session_ledger run as a module over the file ledger at ``path``."""
    return run_module(bai_session_ledger, {"path": str(path), **args}, FakeEngine())


def reserve(path, spec, *, queue=False, ticket=None, keys=(), **more):
    """A create's reservation of ``spec`` on ONE_AGENT, read afresh (state=reserved)."""
    args = {"state": "reserved", "spec": spec, "agents": ONE_AGENT, "agent_info": [fresh_read()]}
    args.update(queue=queue, authorized_keys=list(keys), **more)
    if ticket:
        args["ticket"] = ticket
    return ledger_step(path, **args)


def ledger_of(**keys):
    """A ledger as read from a document of these top-level keys (and the version): the
    keys it is not given stay absent. A reservation given as a record goes in as that
    very record, so what the ledger's steps do to it shows on it."""
    records = {
        name: entry
        for name, entry in (keys.get("sessions") or {}).items()
        if isinstance(entry, document.Reservation)
    }
    if records:
        keys["sessions"] = {**keys["sessions"], **{n: e.to_dict() for n, e in records.items()}}
    ledger = document.Ledger.from_dict({"version": document.VERSION, **keys})
    ledger.sessions.update(records)
    return ledger


def reads_of(results):
    """The AgentReads of bai_agent_info results, as a create makes them (kept ones too)."""
    return [
        r if isinstance(r, AgentRead) else AgentRead.of(r)
        for r in results
        if isinstance(r, AgentRead) or not r.get("skipped")
    ]


def place(ledger, name, reads, now=1000.0, **request):
    """What bai_session_ledger does under the lock: expire, adjust, place, reserve."""
    spec = normalize_spec({"name": name, **request})
    reads = reads_of(reads)
    reservations.expire(ledger, now, reads)
    agents, existing, inventory = agents_from_reads(usage.adjust(reads, ledger))
    plan = replace(plan_session(spec, agents, existing, inventory=inventory), spec_hash="h")
    ledger.sessions[name] = reservations.reservation(plan, now=now, ttl=60)
    return plan


def seen(sid, containers, name="s", cpu=1.0):
    """An agent read's ``sessions`` row: ``containers`` of session ``sid`` there."""
    return {
        sid: {
            "name": name,
            "cpu": cpu * containers,
            "mem": 0,
            "gpu": 0,
            "gpu_devices": [],
            "containers": containers,
        }
    }


def dead_create(ledger, name="dead", size=2, now=1000.0):
    """A create that reserved at ``now`` (TTL 60 s) and died; its session id."""
    place(ledger, name, [info("a1", cpu=8)], now=now, size=size, resources={"cpu": 1})
    return ledger.sessions[name].session_id


# Random clusters (CPUs per agent, GPU devices per agent) and create requests (size,
# CPUs, GPUs, multi-node), for the properties of test_usage.py and test_kept_reads.py.
clusters_and_requests = given(
    offered=st.lists(st.integers(1, 16), min_size=1, max_size=4),
    gpus=st.lists(st.integers(0, 4), min_size=4, max_size=4),
    requests=st.lists(
        st.tuples(st.integers(1, 4), st.integers(1, 6), st.integers(0, 2), st.booleans()),
        min_size=1,
        max_size=12,
    ),
)


def offered_reads(offered, gpus):
    """One read of each agent ``a<i>`` of a random cluster: offered[i] CPUs, 2 GiB of
    memory per CPU and gpus[i] GPU devices, running nothing."""
    return [
        info(f"a{i}", cpu=cpu, mem_g=cpu * 2, gpus=tuple(range(gpus[i])))
        for i, cpu in enumerate(offered)
    ]


def place_request(ledger, n, reads, request):
    """The n-th random create request (size, CPUs, GPUs, multi-node) placed by ``reads``
    as session ``s<n>``, each container given that many CPUs, GiB of memory and GPUs;
    Pending where it does not fit."""
    size, cpu, gpu, multi = request
    return place(
        ledger,
        f"s{n}",
        reads,
        size=size,
        mode="multi-node" if multi else "single-node",
        resources={"cpu": cpu, "mem": f"{cpu}g", "gpu": gpu},
    )


def assert_within_offer(ledger, offered, gpus):
    """What the reservations give out stays within each agent ``a<i>``'s CPUs (offered),
    memory (2 GiB per CPU) and GPU devices, and no device is given twice."""
    for agent, out in roster.given_out(ledger).items():
        i = int(agent[1:])
        assert out["cpu"] <= offered[i]
        assert out["mem"] <= offered[i] * 2 * GI
        assert len(out["gpu_devices"]) == len(set(out["gpu_devices"]))
        assert set(out["gpu_devices"]) <= set(range(gpus[i]))


def row(name, sid, host, agent="a1", size=2, cpu=1.0, devices=""):
    """A bai_agent_info container row with the labels a session container carries."""
    labels = {
        "ai.backend.cluster.session": name,
        LABEL_SESSION_ID: sid,
        "ai.backend.cluster.host": host,
        "ai.backend.cluster.size": str(size),
        "ai.backend.cluster.spec-hash": "h",
        "ai.backend.cluster.agent": agent,
        LABEL_CPU: str(cpu),
        LABEL_MEM: str(GI),
        LABEL_GPU: str(len(devices.split(","))) if devices else "0",
    }
    if devices:
        labels[LABEL_GPU_DEVICES] = devices
    return {"name": f"{name}-{host}", "state": "running", "labels": labels}


def read_with(agent, rows, read_at=2000.0):
    return {**info(agent, cpu=8, read_at=read_at), "containers": rows}
