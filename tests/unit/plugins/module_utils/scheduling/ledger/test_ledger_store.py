"""The ledger's stores (module_utils/scheduling/ledger/ledger_store.py): the transaction protocol.

The swarm store is shown against the real raft store in
tests/integration/test_swarm_ledger_lab.py; here a stand-in with the same contract as the
engine's config API (a label update names the version it read; an older one gets "update
out of sequence") shows the retry loop and what it never does: retry other errors, lose
a write, or write a step that failed.
"""

import copy
import json
import threading

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import StoreError
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    APIError,
    NotFound,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import document
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    ledger_store as store_,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    Reservation,
)


class FakeResponse:
    def __init__(self, status, text=""):
        self.status_code, self.text = status, text


class VersionedConfigs:
    """Stand-in for the engine's config API (the swarm's raft store is not reachable from a
    unit test): inspect/create by name, label updates checked against the version."""

    def __init__(self):
        self.lock = threading.Lock()
        self.configs = {}  # id -> {"ID", "Version": {"Index"}, "Spec": {"Name", "Labels", "Data"}}
        self.index = 10
        self.updates = 0
        self.fail_next = None  # an APIError to raise on the next update

    def inspect_config(self, name):
        with self.lock:
            for item in self.configs.values():
                if item["Spec"]["Name"] == name:
                    return copy.deepcopy(item)
        error = NotFound("no such config")
        error.response = FakeResponse(404)
        raise error

    def create_config(self, name, data, labels=None):
        with self.lock:
            if any(c["Spec"]["Name"] == name for c in self.configs.values()):
                error = APIError("conflict")
                error.response = FakeResponse(409)
                raise error
            self.index += 1
            cid = f"id{self.index}"
            self.configs[cid] = {
                "ID": cid,
                "Version": {"Index": self.index},
                "Spec": {"Name": name, "Labels": dict(labels or {}), "Data": data},
            }
            return {"ID": cid}

    def _url(self, template, *args):
        return template.format(*args)

    def _post_json(self, url, data, params):
        cid = url.split("/")[2]
        with self.lock:
            if self.fail_next is not None:
                error, self.fail_next = self.fail_next, None
                raise error
            item = self.configs[cid]
            if params["version"] != item["Version"]["Index"]:
                return FakeResponse(500, "rpc error: code = Unknown desc = update out of sequence")
            assert data["Name"] == item["Spec"]["Name"] and "Data" not in data
            self.index += 1
            item["Version"]["Index"] = self.index
            item["Spec"]["Labels"] = dict(data["Labels"])
            self.updates += 1
            return FakeResponse(200)

    def _raise_for_status(self, response):
        if response.status_code >= 400:
            error = APIError(response.text)
            error.response = response
            error.explanation = response.text
            raise error

    def ledger(self):
        labels = self.inspect_config(store_.CONFIG_NAME)["Spec"]["Labels"]
        return json.loads(labels[store_.LEDGER_LABEL])


def add_one(name):
    def step(snapshot, now):
        snapshot.ledger.sessions[name] = Reservation.from_dict({"name": name, "reserved_at": now})
        return {"changed": True}

    return step


def swarm_store(*sessions):
    """A swarm store of cluster c over VersionedConfigs, the ledger holding ``sessions``
    (each written by a transaction of its own); the configs and the store."""
    api = VersionedConfigs()
    swarm = store_.SwarmStore(api, "c")
    for name in sessions:
        store_.transact(swarm, add_one(name))
    return api, swarm


def add_at_once(store, count):
    """Sessions s0 to s<count - 1> added through ``store`` at once, each by a thread of
    its own; their names, once every thread is done."""
    names = [f"s{i}" for i in range(count)]
    threads = [threading.Thread(target=store_.transact, args=(store, add_one(n))) for n in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return names


def test_a_swarm_ledger_is_created_once_and_then_updated_by_version():
    api = VersionedConfigs()
    swarm = store_.SwarmStore(api, "cluster-1")
    assert swarm.load().missing == "new"
    store_.transact(swarm, add_one("a"), clock=lambda: 100.0)
    store_.transact(swarm, add_one("b"), clock=lambda: 101.0)
    assert sorted(api.ledger()["sessions"]) == ["a", "b"]
    assert api.inspect_config(store_.CONFIG_NAME)["Spec"]["Data"] == store_.CONFIG_DATA
    assert swarm.identity() == "cluster-1"


def test_a_stale_writer_reads_again_and_loses_nothing():
    """Two writers read version N; the second write is out of sequence, so the second
    writer's step runs again on what the first wrote: both sessions are kept."""
    api, swarm = swarm_store("first")
    runs = []

    def racing(snapshot, now):
        runs.append(sorted(snapshot.ledger.sessions))
        if len(runs) == 1:  # another writer gets in between this read and this write
            store_.transact(swarm, add_one("other"))
        snapshot.ledger.sessions["mine"] = Reservation.from_dict({"name": "mine"})
        return {"changed": True}

    result = store_.transact(swarm, racing)
    assert result["attempts"] == 2
    assert runs == [["first"], ["first", "other"]]
    assert sorted(api.ledger()["sessions"]) == ["first", "mine", "other"]


def test_many_threads_reserving_through_the_swarm_store_lose_no_write():
    api, swarm = swarm_store()
    names = add_at_once(swarm, 24)
    assert sorted(api.ledger()["sessions"]) == sorted(names)


def test_other_errors_are_not_retried_and_write_nothing():
    api, swarm = swarm_store("a")
    error = APIError("rpc error: code = Unavailable desc = the swarm does not have a leader")
    error.explanation = str(error)
    api.fail_next = error
    calls = []

    def step(snapshot, now):
        calls.append(1)
        return add_one("b")(snapshot, now)

    with pytest.raises(StoreError, match="does not have a leader"):
        store_.transact(swarm, step)
    assert len(calls) == 1
    assert sorted(api.ledger()["sessions"]) == ["a"]


def test_a_step_that_fails_writes_nothing():
    api, swarm = swarm_store("a")

    def failing(snapshot, now):
        snapshot.ledger.sessions.clear()
        raise RuntimeError("fail_json")

    with pytest.raises(RuntimeError):
        store_.transact(swarm, failing)
    assert sorted(api.ledger()["sessions"]) == ["a"]


def test_the_retry_loop_is_bounded():
    api, swarm = swarm_store("a")

    def always_overtaken(snapshot, now):
        store_.transact(swarm, add_one(f"x{len(snapshot.ledger.sessions)}"))
        return add_one("mine")(snapshot, now)

    with pytest.raises(StoreError, match="changed under this write 3 times"):
        store_.transact(swarm, always_overtaken, attempts=3)
    assert "mine" not in api.ledger()["sessions"]


def test_check_mode_reads_and_writes_nothing():
    api, swarm = swarm_store()
    result = store_.transact(swarm, add_one("a"), write=False)
    assert result == {"changed": True, "attempts": 1}
    assert api.configs == {}


def test_the_ledger_clock_never_runs_backwards_across_managers():
    """Written through a manager whose clock is ahead, then read through one that lags:
    the ledger's time is still the later one, so nothing written is in its future."""
    api, swarm = swarm_store()
    store_.transact(swarm, add_one("a"), clock=lambda: 2000.0)
    seen = []

    def look(snapshot, now):
        seen.append(now)
        return {"changed": False}

    store_.transact(swarm, look, clock=lambda: 1990.0)
    assert seen == [2000.0]
    assert api.ledger()["sessions"]["a"]["reserved_at"] == 2000.0


def test_a_damaged_swarm_ledger_is_reported_and_set_aside_on_request():
    api, swarm = swarm_store()
    api.create_config(store_.CONFIG_NAME, b"x", labels={store_.LEDGER_LABEL: "{not json"})
    snapshot = swarm.load()
    assert "not JSON" in snapshot.damaged and snapshot.ledger == document.empty()

    def rebuild(snapshot, now):
        return {"changed": True, "set_aside": True}

    result = store_.transact(swarm, rebuild, clock=lambda: 1234.0)
    assert result["set_aside_as"] == f"{store_.CONFIG_NAME}-damaged-1234"
    aside = api.inspect_config(result["set_aside_as"])
    assert aside["Spec"]["Data"] == b"{not json"
    assert api.ledger()["sessions"] == {}


def test_a_ledger_past_the_store_limit_is_refused():
    api, swarm = swarm_store()

    def huge(snapshot, now):
        snapshot.ledger.sessions["big"] = Reservation.from_dict(
            {"pad": "x" * (store_.MAX_LEDGER_BYTES + 1)}
        )
        return {"changed": True}

    with pytest.raises(StoreError, match="past the"):
        store_.transact(swarm, huge)
    assert api.configs == {}


def test_a_host_that_is_no_manager_cannot_serve_the_swarm_ledger():
    class Worker:
        def info(self):
            return {"Swarm": {"LocalNodeState": "active", "ControlAvailable": False}}

    with pytest.raises(StoreError, match="agent1 is not a manager"):
        store_.SwarmStore.connect(Worker(), "agent1")


def test_the_file_store_keeps_its_identity_and_tells_lost_from_new(tmp_path):
    path = str(tmp_path / "ledger.json")
    files = store_.FileStore(path, lock_timeout=5)
    assert files.load().missing == "new" and files.identity() == ""
    store_.transact(files, add_one("a"))
    identity = files.identity()
    assert len(identity) == 32
    assert sorted(document.loads((tmp_path / "ledger.json").read_text()).sessions) == ["a"]
    (tmp_path / "ledger.json").unlink()
    assert files.load().missing == "lost"
    (tmp_path / "ledger.json").write_text("")
    assert "empty" in files.load().damaged


def test_threads_through_the_file_store_lose_no_write(tmp_path):
    files = store_.FileStore(str(tmp_path / "ledger.json"), lock_timeout=30)
    names = add_at_once(files, 16)
    ledger = document.loads((tmp_path / "ledger.json").read_text())
    assert sorted(ledger.sessions) == sorted(names)


def test_a_manager_waits_for_its_swarm_to_elect_a_leader():
    """Right after the leader is lost, a manager's docker info gives no cluster until an
    election ends: it is asked again, and serves once there is a leader."""
    answers = [
        {"LocalNodeState": "active", "ControlAvailable": True, "NodeID": "m2"},
        {
            "LocalNodeState": "active",
            "ControlAvailable": False,
            "NodeID": "m2",
            "RemoteManagers": [{"NodeID": "m2"}, {"NodeID": "m3"}],
        },
        {
            "LocalNodeState": "active",
            "ControlAvailable": True,
            "NodeID": "m2",
            "Cluster": {"ID": "cluster-1"},
        },
    ]
    slept = []

    class Electing:
        def info(self):
            return {"Swarm": answers.pop(0)}

    swarm = store_.SwarmStore.connect(Electing(), "manager2", sleep=slept.append)
    assert swarm.identity() == "cluster-1" and len(slept) == 2


def test_a_manager_without_a_quorum_gives_up_after_the_wait():
    class Leaderless:
        def info(self):
            return {"Swarm": {"LocalNodeState": "active", "ControlAvailable": True}}

    with pytest.raises(StoreError, match="no leader for 0 s"):
        store_.SwarmStore.connect(Leaderless(), "manager2", wait=0, sleep=lambda s: None)
