"""Reconcile and the ledger file, on this machine's engine: one virtual agent (its own
``bai_agent_id`` slot, so other tests' sessions are not in its reads) and a ledger file
per test. Each test leaves what a dead create, a hand, or a lost disk leaves, then
asserts on what the engine runs and what the ledger says after ``session_reconcile.yml``
(or ``bai-cluster session reconcile``).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO, VENV_BIN, ansible_playbook
from test_ledger_local import containers_of, outcome, read_ledger, start

pytestmark = pytest.mark.integration

AGENT = "rc1"
CAPACITY = {"cpu": 2, "mem": "2g", "gpu": 0}
SMALL = {"cpu": 1, "mem": "256m"}


@pytest.fixture
def inventory(tmp_path) -> str:
    """One agent, this machine's engine, as virtual agent rc1 offering 2 CPUs."""
    path = tmp_path / "inventory.yml"
    agents = {
        "hosts": {AGENT: {"bai_agent_id": AGENT}},
        "vars": {
            "ansible_connection": "local",
            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
            "bai_agent_resources": CAPACITY,
        },
    }
    ledger = {"bai_ledger_path": str(tmp_path / "ledger.json")}
    path.write_text(yaml.safe_dump({"all": {"vars": ledger, "children": {"agents": agents}}}))
    return str(path)


@pytest.fixture
def ledger(inventory) -> Path:
    return Path(inventory).parent / "ledger.json"


@pytest.fixture
def made(inventory, ledger):
    """Sessions to destroy after the test, whatever happened."""
    names: list[str] = []
    yield names
    for name in names:
        run = ansible_playbook(
            "session_destroy.yml", extra_vars={"session_name": name}, inventory=inventory
        )
        assert run.rc == 0, run


def create(name: str, ledger: Path, inventory: str) -> tuple[int, str]:
    return outcome(start(name, ledger, None, inventory, size=2, resources=SMALL))


def reconcile(inventory: str, *args: str) -> dict:
    """``bai-cluster session reconcile --json`` on the inventory; its outcome."""
    proc = subprocess.run(
        [str(VENV_BIN / "bai-cluster"), "-i", inventory, "session", "reconcile", "--json", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def rewrite(ledger: Path, name: str, **changes) -> None:
    book = json.loads(ledger.read_text())
    book["sessions"][name].update(changes)
    ledger.write_text(json.dumps(book))


def held_on_slot(docker_client) -> float:
    """CPUs the session containers of slot rc1 hold on the engine, in any state."""
    return sum(
        c.attrs["HostConfig"]["NanoCpus"] / 1e9
        for c in docker_client.containers.list(
            all=True, filters={"label": "ai.backend.cluster.agent-id"}
        )
        if c.labels["ai.backend.cluster.agent-id"].endswith("/" + AGENT)
    )


def test_a_create_that_died_after_making_its_session_is_adopted(
    docker_client, inventory, ledger, made
):
    """Case 1: a create made both containers, then died before it confirmed; its
    reservation is past its expiry. Reconcile finds the whole session on the agent and
    adopts it (it holds its share until destroyed); nothing is removed."""
    made.append("it-rc-whole")
    assert create("it-rc-whole", ledger, inventory)[0] == 0
    rewrite(ledger, "it-rc-whole", state="creating", expires_at=time.time() - 1, ready_at=None)
    done = reconcile(inventory)
    assert done["adopted"] == ["it-rc-whole"] and done["remove"] == [], done
    assert read_ledger(ledger)["it-rc-whole"]["state"] == "ready"
    assert len(containers_of(docker_client, "it-rc-whole")) == 2
    assert reconcile(inventory)["adopted"] == []  # a second run finds them agreeing


def test_what_a_dead_create_left_incomplete_is_removed(docker_client, inventory, ledger, made):
    """Case 1: a create made one of its two containers and died. A create placed beside
    it is PENDING (the expired reservation counts until its agent was checked: a read
    shows part of it); reconcile removes that part and drops the reservation, and the
    next create gets the capacity."""
    made += ["it-rc-part", "it-rc-next"]
    assert create("it-rc-part", ledger, inventory)[0] == 0
    containers_of(docker_client, "it-rc-part")[0].remove(force=True)
    rewrite(ledger, "it-rc-part", state="creating", expires_at=time.time() - 1, ready_at=None)
    rc, msg = create("it-rc-next", ledger, inventory)
    assert rc != 0 and "PENDING" in msg, msg
    assert containers_of(docker_client, "it-rc-next") == []
    done = reconcile(inventory)
    sid = done["remove"][0]["session_id"]
    assert done["remove"] == [
        {"agent": AGENT, "session": "it-rc-part", "session_id": sid, "containers": 1}
    ], done
    assert done["dropped"] == ["it-rc-part"], done
    assert containers_of(docker_client, "it-rc-part") == []
    assert "it-rc-part" not in read_ledger(ledger)
    assert create("it-rc-next", ledger, inventory)[0] == 0
    assert held_on_slot(docker_client) <= CAPACITY["cpu"]


def test_a_reservation_whose_containers_are_gone_is_dropped(docker_client, inventory, ledger, made):
    made.append("it-rc-gone")
    assert create("it-rc-gone", ledger, inventory)[0] == 0
    for c in containers_of(docker_client, "it-rc-gone"):
        c.remove(force=True)
    time.sleep(6)  # past the margin in which a read may predate a confirmed session
    done = reconcile(inventory)
    assert done["dropped"] == ["it-rc-gone"] and done["remove"] == [], done
    assert read_ledger(ledger) == {}


def test_a_lost_ledger_is_refused_until_reconcile_rebuilds_it(
    docker_client, inventory, ledger, made
):
    """Case 7: the ledger file is deleted while a session runs. A create is refused (a
    missing ledger is never read as empty) and names the way back; reconcile --check
    says what it would do and writes nothing; reconcile rebuilds the ledger from the
    labels, and the next create counts the session again (PENDING: the agent is full)."""
    made += ["it-rc-kept", "it-rc-after"]
    assert create("it-rc-kept", ledger, inventory)[0] == 0
    sid = read_ledger(ledger)["it-rc-kept"]["session_id"]
    ledger.unlink()
    rc, msg = create("it-rc-after", ledger, inventory)
    assert rc != 0 and "is missing" in msg and "session reconcile" in msg, msg
    looked = reconcile(inventory, "--check")
    assert looked["check"] and looked["adopted"] == ["it-rc-kept"], looked
    assert not ledger.exists()
    done = reconcile(inventory)
    assert done["rebuilt"] == "missing" and done["adopted"] == ["it-rc-kept"], done
    entry = read_ledger(ledger)["it-rc-kept"]
    assert entry["session_id"] == sid and entry["state"] == "ready"
    assert sorted(k["host"] for k in entry["kernels"]) == ["main1", "sub1"]
    rc, msg = create("it-rc-after", ledger, inventory)
    assert rc != 0 and "PENDING" in msg, msg
    assert containers_of(docker_client, "it-rc-after") == []


def test_a_truncated_ledger_is_refused_until_reconcile_rebuilds_it(
    docker_client, inventory, ledger, made
):
    made.append("it-rc-trunc")
    assert create("it-rc-trunc", ledger, inventory)[0] == 0
    ledger.write_text("")
    rc, msg = create("it-rc-more", ledger, inventory)
    assert rc != 0 and "empty (truncated?)" in msg and "session reconcile" in msg, msg
    done = reconcile(inventory)
    assert done["rebuilt"].startswith("damaged") and done["adopted"] == ["it-rc-trunc"], done
    assert [p.name.split("-")[0] for p in ledger.parent.glob("ledger.json.damaged-*")] == [
        "ledger.json.damaged"
    ]
    assert read_ledger(ledger)["it-rc-trunc"]["state"] == "ready"
    assert containers_of(docker_client, "it-rc-more") == []


def test_a_second_ledger_is_refused_until_it_adopts_the_first(
    docker_client, inventory, ledger, made
):
    """Case 5 by identity: the ledger's disk is lost with its identity file (PATH.id), so a
    new ledger with a new identity serves the agent. The session's containers name the old
    ledger (label ai.backend.cluster.ledger): reconcile reports it as another ledger's and
    leaves it alone, a create through the new ledger is refused naming the old identity,
    and once reconcile --adopt-ledger takes the old ledger's sessions in, they count again
    (the next create is PENDING: the agent is full)."""
    made += ["it-rc-old", "it-rc-new"]
    assert create("it-rc-old", ledger, inventory)[0] == 0
    old = Path(f"{ledger}.id").read_text().strip()
    labels = [c.labels for c in containers_of(docker_client, "it-rc-old")]
    assert [lab.get("ai.backend.cluster.ledger") for lab in labels] == [old, old]
    ledger.unlink()
    Path(f"{ledger}.id").unlink()
    done = reconcile(inventory)
    assert done["foreign"] == [f"it-rc-old (ledger {old})"] and done["adopted"] == [], done
    new = Path(f"{ledger}.id").read_text().strip()
    assert new != old and done["ledger_ids"] == [new]
    rc, msg = create("it-rc-new", ledger, inventory)
    assert rc != 0 and "counted by another session ledger" in msg and old in msg, msg
    assert containers_of(docker_client, "it-rc-new") == []
    done = reconcile(inventory, "--adopt-ledger", old)
    assert done["adopted"] == ["it-rc-old"] and done["ledger_ids"] == [new, old], done
    rc, msg = create("it-rc-new", ledger, inventory)
    assert rc != 0 and "PENDING" in msg, msg
