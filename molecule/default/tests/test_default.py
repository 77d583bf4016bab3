"""Verify the converged node from inside: the engine docker_engine configured answers,
uses the configuration the role wrote, and runs a session container with limits."""

import json

import pytest


@pytest.fixture(scope="module")
def daemon_json(host):
    f = host.file("/etc/docker/daemon.json")
    assert f.exists and f.user == "root"
    return json.loads(f.content_string)


def test_daemon_json_is_valid_and_has_pools(daemon_json):
    pools = daemon_json["default-address-pools"]
    assert pools and all("base" in p and "size" in p for p in pools)
    assert "live-restore" not in daemon_json  # would break Swarm


def test_engine_answers_with_that_config(host, daemon_json):
    out = host.check_output("docker info --format '{{json .}}'")
    info = json.loads(out)
    assert info["ServerVersion"]
    assert info["LoggingDriver"] == daemon_json.get("log-driver", "json-file")


def test_engine_runs_a_limited_container(host):
    cid = host.check_output(
        "docker run -d --rm --cpus 0.5 --memory 64m --entrypoint sleep bai/session:latest 30"
    )
    try:
        cfg = json.loads(host.check_output(f"docker inspect {cid}"))[0]["HostConfig"]
        assert cfg["NanoCpus"] == 500_000_000
        assert cfg["Memory"] == 64 * 1024 * 1024
        assert host.run(f"docker exec {cid} true").rc == 0
    finally:
        host.run(f"docker rm -f {cid}")
