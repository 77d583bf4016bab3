"""bai-cluster session app (bai_cli/commands/apps.py, api/apps.py): the variables it gives
playbooks/session_app.yml, what it prints, create --app's two forms, and the login host's
gate letting users open their own sessions' apps. No Ansible run, no Docker."""

from __future__ import annotations

import json

from bai_cli import __main__ as cli
from bai_cli import api, runner
from bai_cli.login import gate
from bai_cli.runner import PlaybookResult

URL = "https://10.210.1.12:10206/lab?bai_token=" + "s" * 43
JUPYTER = {
    "name": "jupyter",
    "protocol": "http",
    "port": 8090,
    "declared": False,
    "host_port": 30000,
    "state": "started",
    "url_path": "/lab",
}
WEB = {
    "name": "web",
    "protocol": "http",
    "port": 8000,
    "declared": True,
    "host_port": 30001,
    "state": "idle",
}


def fake(monkeypatch, stats, seen):
    def run(playbook, extravars, **kwargs):
        seen.append((playbook, dict(extravars)))
        return PlaybookResult(
            rc=0, status="successful", stats=stats(playbook), failures=[], ok_results={}
        )

    monkeypatch.setattr(runner, "run_playbook", run)


def opened(playbook):
    if playbook == api.APP:
        return {
            "bai_session_app": {
                "session": "s1",
                "agent": "agent1",
                "apps": [JUPYTER, WEB],
                "app": JUPYTER,
                "started": True,
                "url": URL,
                "proxy_port": 10206,
            }
        }
    return {
        "bai_session": {
            "name": "s1",
            "session_id": "i1",
            "action": "create",
            "containers": [],
            "mode": "single-node",
        }
    }


def test_session_app_opens_one_and_prints_its_link(monkeypatch, capsys):
    seen: list = []
    fake(monkeypatch, opened, seen)
    assert cli.main(["session", "app", "s1", "jupyter", "--start-timeout", "30"]) == 0
    assert seen == [
        (api.APP, {"session_name": "s1", "app_name": "jupyter", "app_start_timeout_s": 30})
    ]
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"app jupyter of session s1 (started): {URL}"
    assert "credential" in out[1]


def test_session_app_lists_the_apps_without_a_link(monkeypatch, capsys):
    seen: list = []
    listed = {
        "bai_session_app": {
            "session": "s1",
            "agent": "agent1",
            "apps": [{**JUPYTER, "state": "running"}, WEB],
            "app": None,
            "url": None,
        }
    }
    fake(monkeypatch, lambda _p: listed, seen)
    assert cli.main(["session", "app", "s1", "--json"]) == 0
    assert seen == [(api.APP, {"session_name": "s1"})]
    data = json.loads(capsys.readouterr().out)
    assert data["url"] is None and [a["name"] for a in data["apps"]] == ["jupyter", "web"]
    assert cli.main(["session", "app", "s1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["APP", "PROTOCOL", "PORT", "STATE", "KIND", "LINK"]
    assert lines[1].split() == ["jupyter", "http", "8090", "running", "image", "-"]
    assert lines[2].split() == ["web", "http", "8000", "idle", "declared", "-"]
    assert not any("credential" in line for line in lines)


def test_session_app_lists_an_opened_apps_link(monkeypatch, capsys):
    link = "https://10.210.1.12:10206/lab?bai_token=abc"
    listed = {
        "bai_session_app": {
            "session": "s1",
            "agent": "agent1",
            "apps": [{**JUPYTER, "state": "running", "url": link, "proxy_port": 10206}, WEB],
        }
    }
    fake(monkeypatch, lambda _p: listed, [])
    assert cli.main(["session", "app", "s1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["jupyter", "http", "8090", "running", "image", link]
    assert lines[2].split()[-1] == "-"
    assert "credential" in lines[-1]
    assert cli.main(["session", "app", "s1", "--json"]) == 0
    (jupyter, web) = json.loads(capsys.readouterr().out)["apps"]
    assert (jupyter["url"], jupyter["proxy_port"], web["url"]) == (link, 10206, None)


def test_create_app_declares_ports_and_opens_apps_after_the_create(monkeypatch, capsys):
    seen: list = []
    fake(monkeypatch, opened, seen)
    code = cli.main(
        [
            "session",
            "create",
            "s1",
            "-n",
            "2",
            "--image",
            "bai/session-apps",
            "--app",
            "web=http:8000",
            "--app",
            "jupyter",
        ]
    )
    assert code == 0
    (create, create_vars), (app, app_vars) = seen
    assert create == api.CREATE and create_vars["session_apps"] == ["web=http:8000"]
    assert app == api.APP and app_vars == {"session_name": "s1", "app_name": "jupyter"}
    assert f"app jupyter of session s1 (started): {URL}" in capsys.readouterr().out


def test_a_login_hosts_user_may_open_apps_of_their_own_sessions_only():
    who = gate.Caller(name="alice", uid=1001, admin=False)
    argv = gate.screen(["session", "app", "s1", "jupyter"], who)
    assert argv == ["session", "app", "s1", "jupyter", "--owner", "alice"]
    refused = None
    try:
        gate.screen(["session", "app", "s1", "--owner", "bob"], who)
    except gate.Refused as exc:
        refused = str(exc)
    assert refused == "--owner bob: you act as alice only"


def test_create_app_as_json_is_one_record_with_the_opened_apps(monkeypatch, capsys):
    seen: list = []
    fake(monkeypatch, opened, seen)
    assert cli.main(["--json", "session", "create", "s1", "-n", "1", "--app", "jupyter"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["name"] == "s1" and [a["url"] for a in data["apps"]] == [URL]
