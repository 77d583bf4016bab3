"""Unit tests of plugins/modules/bai_appproxy_route.py with its I/O in
plugins/module_utils/network/appproxy_routes.py: the route files, HAProxy's check, its
reload and the wait for the port, against a simulated app proxy host (``FakeHost``: the
``service`` and ``haproxy`` commands, and which ports listen). The route logic itself is
test_appproxy.py's."""

from __future__ import annotations

import os

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.network.appproxy import parse_route
from appproxy_fake import PRESENT, FakeHost, run


@pytest.fixture
def host(tmp_path):
    return FakeHost(str(tmp_path))


def test_a_route_is_written_loaded_and_then_left_alone(host, tmp_path):
    done = run(host, **PRESENT)
    assert done["changed"] is True and done["reloaded"] is True
    assert done["port"] == 10205 and done["public_address"] == "10.210.1.5"
    assert done["path"] == str(tmp_path / "s1.cfg")
    assert done["route"]["backend_host"] == "10.210.3.11"
    assert parse_route((tmp_path / "s1.cfg").read_text())["session_id"] == "id-1"
    assert ["service", "haproxy", "reload"] in host.commands

    again = run(host, **PRESENT)
    assert again["changed"] is False and again["reloaded"] is False
    assert again["port"] == 10205


def test_check_mode_reports_the_port_and_writes_nothing(host, tmp_path):
    done = run(host, check_mode=True, _ansible_diff=True, **PRESENT)
    assert done["changed"] is True and done["port"] == 10205
    assert done["diff"]["before"] == "" and "bai-session-s1" in done["diff"]["after"]
    assert not (tmp_path / "s1.cfg").exists()
    assert host.commands == [["ip", "-o", "-4", "addr", "show"]]


def test_a_route_haproxy_refuses_is_taken_back(tmp_path):
    host = FakeHost(str(tmp_path), valid=False)
    done = run(host, **PRESENT)
    assert done["failed"] is True
    assert done["msg"] == (
        "HAProxy refuses the route of session s1 ([ALERT] parsing [routes.d/s1.cfg:5]: bad "
        "bind); the previous configuration was kept"
    )
    assert not (tmp_path / "s1.cfg").exists()


def test_a_port_haproxy_does_not_open_fails_after_the_wait(host):
    host.load = lambda: None  # HAProxy reloads but never listens
    done = run(host, **PRESENT)
    assert done["msg"] == (
        "HAProxy did not open port 10205 within 0s after the reload; check the proxy's log "
        "and who else listens there (ss -ltnp)"
    )


def test_absent_removes_the_route_and_waits_for_the_port_to_close(host, tmp_path):
    run(host, **PRESENT)
    done = run(host, session="s1", state="absent", _ansible_diff=True)
    assert done["changed"] is True and done["reloaded"] is True and done["port"] == 10205
    assert done["diff"]["after"] == "" and done["public_address"] is None
    assert not (tmp_path / "s1.cfg").exists() and host.listening == set()
    assert run(host, session="s1", state="absent")["changed"] is False


def test_without_a_backend_or_a_routes_folder_it_says_what_to_do(host, tmp_path):
    done = run(host, **{**PRESENT, "backend_network": "10.9.0.0/24"})
    assert done["msg"] == (
        "session s1: no backend address: none of the agent's addresses (1 given) lies in "
        "backend_network 10.9.0.0/24; set backend_host, or check bai_zone_cidrs.compute"
    )
    gone = FakeHost(str(tmp_path / "missing"))
    assert run(gone, **PRESENT)["msg"] == (
        f"{tmp_path / 'missing'} does not exist on this host: converge the app proxy first "
        f"(ansible-playbook site.yml --tags appproxy)"
    )


# --- an app's route (docs/apps.md) -----------------------------------------------------
APP = {**PRESENT, "app": "jupyter", "backend_port": 30002, "url_path": "/lab"}


def test_an_app_route_is_https_with_its_own_secret_and_a_root_only_file(host, tmp_path):
    ssh = run(host, **PRESENT)
    done = run(host, _ansible_diff=True, **APP)
    path = tmp_path / "s1.jupyter.cfg"
    assert done["changed"] is True and done["port"] == ssh["port"] + 1
    assert (path.stat().st_mode & 0o777) == 0o600
    header = parse_route(path.read_text())
    secret = header["secret"]
    assert done["url"] == f"https://10.210.1.5:{done['port']}/lab?bai_token={secret}"
    assert "secret" not in done["route"] and "diff" not in done  # the secret stays in the file
    text = path.read_text()
    assert f"bind :{done['port']} ssl crt /etc/haproxy/certs/appproxy.pem" in text
    assert f"req.cook(bai_route_{done['port']}) -m str -- {secret}" in text
    assert "server main1 10.210.3.11:30002" in text and "mode http" in text
    # The sshd's route is another file, untouched.
    assert parse_route((tmp_path / "s1.cfg").read_text())["port"] == ssh["port"]


def test_an_app_route_keeps_its_link_for_its_session_and_not_for_a_new_one(host, tmp_path):
    first = run(host, **APP)
    again = run(host, **APP)
    assert again["changed"] is False and again["url"] == first["url"]
    renewed = run(host, **{**APP, "session_id": "id-2"})
    assert renewed["changed"] is True and renewed["url"] != first["url"]
    assert renewed["port"] == first["port"]


def test_absent_without_an_app_removes_every_route_of_the_session_only(host, tmp_path):
    run(host, **PRESENT)
    run(host, **APP)
    run(host, **{**APP, "app": "tb", "backend_port": 30003})
    other = run(host, **{**APP, "session": "s10", "session_id": "id-9"})
    done = run(host, session="s1", state="absent")
    assert done["changed"] is True and len(done["removed"]) == 3
    assert sorted(os.listdir(tmp_path)) == [".lock", "s10.jupyter.cfg"]
    assert host.listening == {other["port"]}


def test_absent_with_an_app_removes_that_app_route_only(host, tmp_path):
    run(host, **PRESENT)
    run(host, **APP)
    done = run(host, session="s1", app="jupyter", state="absent")
    assert done["removed"] == [str(tmp_path / "s1.jupyter.cfg")]
    assert (tmp_path / "s1.cfg").exists()
