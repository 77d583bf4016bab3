"""The cluster's metrics (``bai-cluster metrics``, docs/metrics.md) against the truth of
this machine's engine: a virtual agent (a ``bai_agent_id`` slot of 2 CPUs) with its own
file ledger. After each step - a create, a queued create, a paused agent and a scheduler
pass, a destroy that starts the queued session, the last destroy - one collection is
parsed with the reference parser and compared with what ``docker ps`` shows (the
sessions' containers, by agent label) and with what the step did (ends, waits, passes).
Then ``--textfile`` writes the same text for node_exporter: world-readable, renamed into
place (a new inode each time), and a folder that is not there is refused."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from conftest import agent_containers, bai_cli, cli_ok, virtual_agents
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.integration

AGENT = "m-agent1"
WHERE = {"agent": AGENT, "resource_group": "default"}


def metrics(tmp: Path, inventory: Path) -> dict:
    """One collection: {(name, sorted labels): value}."""
    run = bai_cli(tmp, "-i", str(inventory), "--quiet", "metrics", "--format", "prometheus")
    assert run.returncode == 0, (run.stdout, run.stderr)
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(run.stdout)
        for s in family.samples
    }


def get(found: dict, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def total(found: dict, name: str, **match: str) -> float:
    """The sum of ``name``'s samples whose labels include ``match``."""
    return sum(
        v for (n, labels), v in found.items() if n == name and match.items() <= dict(labels).items()
    )


def test_the_metrics_agree_with_the_engine_after_each_step(docker_client, tmp_path):
    inventory = virtual_agents(tmp_path, (AGENT,), cpu=2)
    names = ["it-m-run", "it-m-big"]
    try:
        cli_ok(tmp_path, inventory, "session", "create", names[0], "-n", "2", "--cpu", "0.5",
               "--mem", "128m")  # fmt: skip
        found = metrics(tmp_path, inventory)
        count, sessions = agent_containers(docker_client, AGENT)
        assert (count, sessions) == (2, {names[0]})
        assert get(found, "bai_agent_session_containers", **WHERE) == count
        assert get(found, "bai_agent_sessions", **WHERE) == 1
        assert get(found, "bai_agent_cpus", **WHERE) == 2
        assert get(found, "bai_agent_cpus_allocated", **WHERE) == 1.0
        assert total(found, "bai_sessions", state="running", type="interactive") == 1
        assert get(found, "bai_queue_wait_seconds_count", resource_group="default") == 1
        assert get(found, "bai_queue_wait_seconds_bucket", resource_group="default", le="1") == 1

        # The whole agent: it waits, because of the resources.
        cli_ok(tmp_path, inventory, "session", "create", names[1], "-n", "1", "--cpu", "2",
               "--mem", "128m", "--queue")  # fmt: skip
        found = metrics(tmp_path, inventory)
        assert agent_containers(docker_client, AGENT) == (2, {names[0]})
        assert get(found, "bai_sessions_pending", resource_group="default", reason="resources") == 1
        assert total(found, "bai_sessions_pending") == 1
        assert total(found, "bai_sessions", state="PENDING") == 1
        assert get(found, "bai_queue_oldest_pending_seconds", resource_group="default") > 0

        # Paused, the agent is out of service; the next pass says the queue waits for that.
        cli_ok(tmp_path, inventory, "agent", "pause", AGENT, "--reason", "metrics test")
        cli_ok(tmp_path, inventory, "session", "schedule")
        found = metrics(tmp_path, inventory)
        assert get(found, "bai_agent_availability", availability="paused", **WHERE) == 1
        assert get(found, "bai_agent_availability", availability="active", **WHERE) == 0
        assert get(found, "bai_agent_in_service", **WHERE) == 0
        assert get(found, "bai_agent_up", **WHERE) == 1
        assert get(found, "bai_sessions_pending", resource_group="default", reason="no_agents") == 1
        assert get(found, "bai_scheduler_passes_total") >= 1
        assert get(found, "bai_scheduler_last_pass_timestamp_seconds") > time.time() - 120
        cli_ok(tmp_path, inventory, "agent", "activate", AGENT)

        # The destroy frees the agent and its scheduler pass starts the queued session.
        time.sleep(2)
        cli_ok(tmp_path, inventory, "session", "destroy", names[0])
        found = metrics(tmp_path, inventory)
        count, sessions = agent_containers(docker_client, AGENT)
        assert (count, sessions) == (1, {names[1]})
        assert get(found, "bai_agent_session_containers", **WHERE) == count
        assert get(found, "bai_agent_cpus_allocated", **WHERE) == 2
        assert total(found, "bai_sessions_pending") == 0
        assert get(found, "bai_session_ends_total", type="interactive", result="destroyed") == 1
        assert get(found, "bai_queue_wait_seconds_count", resource_group="default") == 2
        assert get(found, "bai_queue_wait_seconds_sum", resource_group="default") >= 2

        cli_ok(tmp_path, inventory, "session", "destroy", names[1])
        found = metrics(tmp_path, inventory)
        assert agent_containers(docker_client, AGENT) == (0, set())
        assert get(found, "bai_agent_session_containers", **WHERE) == 0
        assert get(found, "bai_session_ends_total", type="interactive", result="destroyed") == 2
        assert total(found, "bai_sessions") == 0
    finally:
        bai_cli(tmp_path, "-i", str(inventory), "--quiet", "agent", "activate", AGENT)
        for name in names:
            bai_cli(tmp_path, "-i", str(inventory), "--quiet", "session", "destroy", name)


def test_the_textfile_is_renamed_into_place_world_readable(tmp_path):
    inventory = virtual_agents(tmp_path, (AGENT,), cpu=2)
    target = tmp_path / "textfile" / "bai_cluster.prom"
    target.parent.mkdir()
    cli_ok(tmp_path, inventory, "metrics", "--textfile", str(target))
    first = os.stat(target)
    assert first.st_mode & 0o777 == 0o644
    text = target.read_text()
    assert "# TYPE bai_session_ends_total counter" in text and "# EOF" not in text
    assert {f.name for f in text_string_to_metric_families(text)} >= {
        "bai_agent_up",
        "bai_ledger_up",
    }
    cli_ok(tmp_path, inventory, "metrics", "--textfile", str(target))
    assert os.stat(target).st_ino != first.st_ino  # a new file renamed over the old one
    assert [p.name for p in target.parent.iterdir()] == ["bai_cluster.prom"]  # no temporary

    missing = bai_cli(
        tmp_path, "-i", str(inventory), "metrics", "--textfile", "/nonexistent/x.prom"
    )
    assert missing.returncode == 2 and "/nonexistent is not a folder" in missing.stderr
