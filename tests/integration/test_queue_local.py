"""The queue of PENDING sessions (session_queue / --queue, docs/placement.md "The queue")
on this machine's engine: virtual agents (``bai_agent_id`` slots of one engine) with a
small declared offer. The truth is read from
Docker - which containers run, of which session, with which session id - never from the
ledger alone.

- Two sessions that each need the whole offer: the second is queued (exit 0, PENDING,
  with its reason and place), a third queued one is cancelled by destroy, and the
  destroy of the first starts the second (the CLI's destroy runs a scheduler pass);
  its lifetime counts from its start, not from its submission. The destroy playbook does
  the same (one scheduler pass while sessions wait), unless told not to.
- By priority (``bai_session_policies.queue.order: priority`` in the inventory): of two
  owners racing for the capacity one of them holds, the lighter owner's session starts
  first when it frees, though submitted later; ``session explain`` said so beforehand.
- Backfill (``bai_session_policies.queue.backfill``): a short session starts ahead of a
  blocked one in what a destroy freed, ``session explain`` says when the blocked one could
  start, and it starts once its capacity is free.
- Four concurrent queued creates (two run, two wait), then two scheduler passes from two
  controllers at once after a destroy: each session starts exactly once (one session id
  per name) and what runs never exceeds the offer.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO, VENV_BIN, ansible_playbook, bai_cli, create_at_once
from conftest import virtual_agents as make_inventory
from labtools import LABEL_SESSION

pytestmark = pytest.mark.integration

LABEL_SESSION_ID = "ai.backend.cluster.session-id"


def cli(tmp: Path, inventory: Path, *argv: str) -> dict | list:
    run = bai_cli(tmp, "-i", str(inventory), "--json", *argv)
    assert run.returncode == 0, (argv, run.stdout, run.stderr)
    return json.loads(run.stdout)


def running(docker_client, prefix: str) -> dict[str, set[str]]:
    """Session name -> the session ids of its running containers (names PREFIX*)."""
    found: dict[str, set[str]] = {}
    for c in docker_client.containers.list(filters={"label": LABEL_SESSION}):
        name = c.labels[LABEL_SESSION]
        if name.startswith(prefix):
            found.setdefault(name, set()).add(c.labels[LABEL_SESSION_ID])
    return found


def containers(docker_client, prefix: str) -> int:
    """Running containers of sessions named PREFIX* (each takes one CPU of the two)."""
    return sum(
        1
        for c in docker_client.containers.list(filters={"label": LABEL_SESSION})
        if c.labels[LABEL_SESSION].startswith(prefix)
    )


def cleanup(tmp: Path, inventory: Path, names) -> None:
    for name in names:
        bai_cli(tmp, "-i", str(inventory), "--quiet", "session", "destroy", name)


def test_a_queued_session_starts_when_the_one_before_it_is_destroyed(docker_client, tmp_path):
    inventory = make_inventory(tmp_path, ("qa1",), cpu=2)
    whole = ("-n", "2", "--cpu", "1", "--mem", "128m")  # the agent's whole offer
    names = ["it-q-first", "it-q-second", "it-q-third"]
    try:
        first = cli(tmp_path, inventory, "session", "create", names[0], *whole)
        assert first["action"] == "create" and first["pending"] is None, first

        second = cli(
            tmp_path, inventory, "session", "create", names[1], *whole, "--queue",
            "--lifetime", "600",
        )  # fmt: skip
        submitted = time.monotonic()  # it was submitted before this
        assert second["action"] == "queued" and second["containers"] == [], second
        assert second["pending"]["position"] == 1 and "cpu" in second["pending"]["reason"]
        third = cli(tmp_path, inventory, "session", "create", names[2], *whole, "--queue")
        assert third["pending"]["position"] == 2, third
        assert set(running(docker_client, "it-q-")) == {names[0]}

        rows = {r["name"]: r for r in cli(tmp_path, inventory, "session", "list")}
        assert rows[names[1]]["state"] == "PENDING" and rows[names[1]]["position"] == 1
        assert rows[names[2]]["position"] == 2 and rows[names[0]]["state"] == "running"
        shown = cli(tmp_path, inventory, "session", "show", names[2])
        assert shown["state"] == "PENDING" and shown["pending"]["position"] == 2, shown

        # Cancelled: it leaves the queue, nothing of it ever ran.
        cancelled = cli(tmp_path, inventory, "session", "destroy", names[2])
        assert cancelled["cancelled"] is True and cancelled["containers"] == [], cancelled
        # Waiting behind it was only second, which still does not fit.
        assert cancelled["schedule"]["started"] == [], cancelled

        # Let time pass in the queue: the lifetime is counted from the start, not this.
        time.sleep(5)
        began = time.monotonic()
        queued_for = began - submitted
        done = cli(tmp_path, inventory, "session", "destroy", names[0])
        took = time.monotonic() - began
        assert done["schedule"]["started"] == [names[1]], done
        now = running(docker_client, "it-q-")
        assert set(now) == {names[1]} and len(now[names[1]]) == 1, now
        assert containers(docker_client, "it-q-") == 2
        print(f"destroy of {names[0]} until {names[1]} ran: {took:.1f} s")

        rows = {r["name"]: r for r in cli(tmp_path, inventory, "session", "list")}
        since_destroy = time.monotonic() - began  # it started after the destroy began
        assert set(rows) == {names[1]} and rows[names[1]]["state"] == "running", rows
        # Counted from its start: at most the time since the destroy began is gone (1 s
        # for the clocks), never its time in the queue before that.
        left = rows[names[1]]["time_left"]
        assert 600 - since_destroy - 1 <= left <= 600, (left, since_destroy, queued_for)
        assert queued_for > 5, queued_for
    finally:
        cleanup(tmp_path, inventory, names)
    assert running(docker_client, "it-q-") == {}


def test_the_destroy_playbook_starts_the_queued_session_as_the_cli_does(docker_client, tmp_path):
    """ansible-playbook session_destroy.yml runs one scheduler pass while sessions wait
    (playbooks/session_schedule_pass.yml); -e session_schedule_after=false runs none."""
    inventory = make_inventory(tmp_path, ("qp1",), cpu=2)
    whole = ("-n", "2", "--cpu", "1", "--mem", "128m")
    names = ["it-qp-first", "it-qp-second", "it-qp-third"]
    try:
        cli(tmp_path, inventory, "session", "create", names[0], *whole)
        for name in names[1:]:
            assert (
                cli(tmp_path, inventory, "session", "create", name, *whole, "--queue")["action"]
                == "queued"
            )

        done = ansible_playbook(
            "session_destroy.yml", extra_vars={"session_name": names[0]}, inventory=str(inventory)
        )
        assert done.rc == 0, done
        assert done.stats["bai_schedule"]["start"] == [names[1]], done.stats
        assert done.stats["bai_session"]["name"] == names[1], done.stats
        now = running(docker_client, "it-qp-")
        assert set(now) == {names[1]} and len(now[names[1]]) == 1, now
        assert containers(docker_client, "it-qp-") == 2

        # Switched off: the capacity the destroy frees waits for the next pass.
        off = ansible_playbook(
            "session_destroy.yml",
            extra_vars={"session_name": names[1], "session_schedule_after": False},
            inventory=str(inventory),
        )
        assert off.rc == 0, off
        assert "bai_schedule" not in off.stats, off.stats
        assert running(docker_client, "it-qp-") == {}
        rows = {r["name"]: r for r in cli(tmp_path, inventory, "session", "list")}
        assert set(rows) == {names[2]} and rows[names[2]]["state"] == "PENDING", rows
    finally:
        cleanup(tmp_path, inventory, names)
    assert running(docker_client, "it-qp-") == {}


def test_by_priority_the_lighter_owner_s_session_starts_first(docker_client, tmp_path):
    inventory = make_inventory(tmp_path, ("qf1",), cpu=2)
    book = yaml.safe_load(inventory.read_text())
    # Usage forgotten within minutes, so that seconds of use already weigh.
    book["all"]["vars"]["bai_session_policies"] = {
        "queue": {"order": "priority", "half_life_s": 600}
    }
    inventory.write_text(yaml.safe_dump(book))
    whole = ("-n", "2", "--cpu", "1", "--mem", "128m")
    names = ["it-qf-run", "it-qf-heavy", "it-qf-light"]
    try:
        cli(tmp_path, inventory, "session", "create", names[0], *whole, "--owner", "heavy")
        queued = cli(
            tmp_path, inventory, "session", "create", names[1], *whole, "--queue",
            "--owner", "heavy",
        )  # fmt: skip
        assert queued["pending"]["position"] == 1, queued
        time.sleep(5)  # heavy's running session accrues usage
        light = cli(
            tmp_path, inventory, "session", "create", names[2], *whole, "--queue",
            "--owner", "light",
        )  # fmt: skip
        assert light["action"] == "queued", light

        why = {name: cli(tmp_path, inventory, "session", "explain", name) for name in names[1:]}
        assert (why[names[2]]["position"], why[names[1]]["position"]) == (1, 2), why
        assert why[names[2]]["order"] == "priority" and why[names[1]]["owner"] == "heavy"
        fair = {name: why[name]["factors"]["fairshare"]["value"] for name in names[1:]}
        assert fair[names[1]] < fair[names[2]] == 1.0, why
        text = bai_cli(tmp_path, "-i", str(inventory), "session", "explain", names[1])
        assert text.returncode == 0, text.stderr
        assert "number 2 in the queue" in text.stdout and "owner heavy:" in text.stdout
        listed = cli(tmp_path, inventory, "queue")
        assert [(r["name"], r["position"]) for r in listed] == [(names[2], 1), (names[1], 2)]
        assert listed[1]["explain"]["priority"] < listed[0]["explain"]["priority"], listed

        cli(tmp_path, inventory, "session", "destroy", names[0])
        now = running(docker_client, "it-qf-")
        assert set(now) == {names[2]} and len(now[names[2]]) == 1, now  # Docker says so
        rows = {r["name"]: r for r in cli(tmp_path, inventory, "session", "list")}
        assert rows[names[1]]["state"] == "PENDING", rows
    finally:
        cleanup(tmp_path, inventory, names)
    assert running(docker_client, "it-qf-") == {}


def test_backfill_starts_a_short_session_ahead_of_a_blocked_one(docker_client, tmp_path):
    """One virtual agent of 2 CPUs: hold (1 CPU, an hour) and rest (1 CPU, no lifetime)
    run; big (2 CPUs) and short (1 CPU, 10 min) are queued. When rest goes, big still
    waits for hold's end, and the pass starts short in the CPU rest freed. Once hold
    and short are gone, big starts."""
    inventory = make_inventory(tmp_path, ("qb1",), cpu=2)
    book = yaml.safe_load(inventory.read_text())
    book["all"]["vars"]["bai_session_policies"] = {"queue": {"backfill": True}}
    inventory.write_text(yaml.safe_dump(book))
    one = ("-n", "1", "--cpu", "1", "--mem", "128m")
    names = ["it-qb-hold", "it-qb-rest", "it-qb-big", "it-qb-short"]
    try:
        cli(tmp_path, inventory, "session", "create", names[0], *one, "--lifetime", "3600")
        cli(tmp_path, inventory, "session", "create", names[1], *one)
        big = cli(tmp_path, inventory, "session", "create", names[2], "-n", "2", "--cpu", "1",
                  "--mem", "128m", "--queue")  # fmt: skip
        short = cli(tmp_path, inventory, "session", "create", names[3], *one, "--queue",
                    "--lifetime", "600")  # fmt: skip
        assert (big["action"], short["action"]) == ("queued", "queued"), (big, short)
        cli(tmp_path, inventory, "session", "destroy", names[1])
        now = running(docker_client, "it-qb-")
        assert set(now) == {names[0], names[3]}, now  # Docker: short started, big did not
        rows = {r["name"]: r for r in cli(tmp_path, inventory, "session", "list")}
        assert rows[names[2]]["state"] == "PENDING", rows
        # explain says what the pass does: big claims qb1 until hold's hour is up.
        why = cli(tmp_path, inventory, "session", "explain", names[2])["pass"]
        assert (why["starts"], why["claims"]) == (False, ["qb1"]), why
        assert 3000 < why["earliest_start_in_s"] <= 3600, why
        # The head still starts when its capacity frees: hold and short gone.
        cli(tmp_path, inventory, "session", "destroy", names[0])
        assert set(running(docker_client, "it-qb-")) == {names[3]}  # short holds 1 of 2
        cli(tmp_path, inventory, "session", "destroy", names[3])
        now = running(docker_client, "it-qb-")
        assert set(now) == {names[2]} and len(now[names[2]]) == 1, now
    finally:
        cleanup(tmp_path, inventory, names)
    assert running(docker_client, "it-qb-") == {}


def test_four_concurrent_queued_creates_start_once_each_from_two_controllers(
    run_playbook, docker_client, tmp_path
):
    inventory = make_inventory(tmp_path, ("qa1", "qa2"), cpu=1)
    names = [f"it-qc{i}" for i in range(4)]
    ledger = yaml.safe_load(inventory.read_text())["all"]["vars"]["bai_ledger_path"]
    runs = create_at_once(names, {"cpu": 1, "mem": "128m"}, inventory=str(inventory), queue=True)
    ids: dict[str, set[str]] = {}
    try:
        assert all(run.rc == 0 for run in runs), [r.failures for r in runs if r.rc]
        first = running(docker_client, "it-qc")
        assert len(first) == 2 and containers(docker_client, "it-qc") == 2, first
        book = json.loads(Path(ledger).read_text())
        assert sorted(book["queue"]) == sorted(set(names) - set(first)), book["queue"]
        for name, sid in first.items():
            ids.setdefault(name, set()).update(sid)

        # Destroy what runs (without the destroy's own pass), then two controllers'
        # scheduler passes at the same moment: between them they start the two that wait,
        # never one of them twice.
        gone = sorted(running(docker_client, "it-qc"))
        done = run_playbook(
            "session_destroy.yml",
            extra_vars={"session_names": gone, "session_schedule_after": False},
            inventory=str(inventory),
        )
        assert done.rc == 0, done
        schedule = [str(VENV_BIN / "bai-cluster"), "-i", str(inventory), "--json"]
        schedule += ["session", "schedule"]
        passes = [
            subprocess.Popen(
                schedule, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for _pass in range(2)
        ]
        outs = [p.communicate(timeout=600) for p in passes]
        assert all(p.returncode == 0 for p in passes), outs
        started = [json.loads(out)["started"] for out, _err in outs]
        # Never the same session twice, and never beyond the offer.
        assert not set(started[0]) & set(started[1]), started
        now = running(docker_client, "it-qc")
        assert sorted(now) == sorted(started[0] + started[1]), (now, started)
        assert containers(docker_client, "it-qc") == 2, now
        for name, sid in now.items():
            assert name not in ids, f"{name} started again"
            ids.setdefault(name, set()).update(sid)
        assert sorted(ids) == sorted(names) and all(len(s) == 1 for s in ids.values()), ids
        assert "queue" not in json.loads(Path(ledger).read_text())
    finally:
        cleanup(tmp_path, inventory, names)
    assert running(docker_client, "it-qc") == {}
