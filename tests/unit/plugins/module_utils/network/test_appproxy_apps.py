"""Unit tests of what an app proxy host tells of the sessions' apps
(plugins/module_utils/network/appproxy_apps.py and plugins/modules/bai_appproxy_apps.py):
route files that bai_appproxy_route really wrote (against test_appproxy_route_module's
simulated app proxy host), read back without their secrets or, for one session, with
their links; the app start counts, recorded under the routes' lock; and the filter
bai_app_links that gives `session app NAME`'s list its links."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.network import (
    appproxy_apps,
    appproxy_routes,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.apps import with_links
from ansible_collections.bai.cluster.plugins.modules import bai_appproxy_apps
from appproxy_fake import PRESENT, FakeHost
from appproxy_fake import run as route
from docker_fake import FakeEngine, run_module


def apps(host: FakeHost, *, check_mode: bool = False, **args: Any) -> dict[str, Any]:
    patches = {(AnsibleModule, "run_command"): host.run_command}
    params = {"routes_dir": host.routes_dir, **args}
    return run_module(
        bai_appproxy_apps, params, FakeEngine(), check_mode=check_mode, patches=patches
    )


@pytest.fixture
def host(tmp_path):
    host = FakeHost(str(tmp_path))
    route(host, **PRESENT)  # s1's SSH route: not an app's
    route(host, **{**PRESENT, "backend_port": 30002}, app="jupyter", url_path="/lab")
    route(
        host, **{**PRESENT, "session": "s2", "session_id": "id-2", "backend_port": 30003}, app="tb"
    )
    return host


def test_the_routes_are_read_without_their_secrets(host, tmp_path):
    done = apps(host)
    assert done["changed"] is False and done["counts"] == {}
    assert [(r["session"], r["app"], r["port"]) for r in done["routes"]] == [
        ("s1", "jupyter", 10206),
        ("s2", "tb", 10207),
    ]
    secrets = [
        json.loads(line[len("# bai-route ") :])["secret"]
        for p in tmp_path.glob("*.*.cfg")
        for line in p.read_text().splitlines()
        if line.startswith("# bai-route ")
    ]
    assert len(secrets) == 2 and not any(s in json.dumps(done) for s in secrets)
    only = apps(host, session="s2")["routes"]
    assert [(r["session"], r["app"]) for r in only] == [("s2", "tb")]


def test_one_sessions_links_carry_its_secret_and_recorded_path(host):
    done = apps(host, session="s1", links=True, public_network="10.210.1.0/24")
    (jupyter,) = done["routes"]
    opened = route(host, **{**PRESENT, "backend_port": 30002}, app="jupyter", url_path="/lab")
    assert jupyter["url"] == opened["url"]
    assert jupyter["url"].startswith("https://10.210.1.5:10206/lab?bai_token=")
    assert done["public_address"] == "10.210.1.5"


def test_links_need_a_session(host):
    assert apps(host, links=True)["failed"] is True


def test_a_start_and_a_failed_start_are_counted_and_check_mode_writes_nothing(host, tmp_path):
    assert apps(host, record_app="jupyter", record_event="started")["changed"] is True
    apps(host, record_app="jupyter", record_event="started")
    done = apps(host, record_app="jupyter", record_event="failed")
    assert done["counts"] == {"jupyter": {"started": 2, "failed": 1}}
    would = apps(host, check_mode=True, record_app="tb", record_event="started")
    assert would["changed"] is True and would["counts"]["tb"] == {"started": 1, "failed": 0}
    assert apps(host)["counts"] == {"jupyter": {"started": 2, "failed": 1}}
    # The counts file is not a route HAProxy would load.
    assert not (tmp_path / appproxy_apps.COUNTS_FILE).name.endswith(".cfg")


def test_a_bad_app_name_or_event_changes_nothing(host, tmp_path):
    assert apps(host, record_app="Bad Name", record_event="started")["failed"] is True
    assert apps(host, record_app="jupyter", record_event="exploded")["failed"] is True
    assert apps(host, record_app="jupyter")["failed"] is True  # record_event with it
    assert not (tmp_path / appproxy_apps.COUNTS_FILE).exists()


def test_no_routes_folder_says_what_to_do(tmp_path):
    done = apps(FakeHost(str(tmp_path / "missing")))
    assert done["failed"] is True and "site.yml --tags appproxy" in done["msg"]


@pytest.mark.parametrize(
    "text",
    [None, "", "not json", "[]", '{"jupyter": 3}', '{"Bad": {"started": 1}}'],
)
def test_a_damaged_counts_file_counts_as_zero(text):
    counts = appproxy_apps.read_counts(text)
    assert all(row == {"started": 0, "failed": 0} for row in counts.values())
    assert "Bad" not in counts


def test_counts_only_grow_and_round_trip():
    counts = appproxy_apps.read_counts('{"jupyter": {"started": 2, "failed": -4, "x": 1}}')
    assert counts == {"jupyter": {"started": 2, "failed": 0}}
    more = appproxy_apps.record(counts, "jupyter", "failed")
    assert appproxy_apps.read_counts(appproxy_apps.render_counts(more)) == {
        "jupyter": {"started": 2, "failed": 1}
    }
    assert counts["jupyter"]["failed"] == 0  # the input is left as it was
    with pytest.raises(SpecError):
        appproxy_apps.record(counts, "jupyter", "crashed")


def test_the_list_gets_the_links_of_this_session_ids_routes_only():
    listed = [{"name": "jupyter", "state": "running"}, {"name": "tb", "state": "idle"}]
    routes = [
        {
            "session": "s1",
            "session_id": "id-1",
            "app": "jupyter",
            "port": 10206,
            "url": "https://x",
        },
        # An earlier session of the name left it: it leads nowhere.
        {"session": "s1", "session_id": "id-0", "app": "tb", "port": 10207, "url": "https://y"},
    ]
    out = with_links(listed, routes, "id-1")
    assert [(a["name"], a["url"], a["proxy_port"]) for a in out] == [
        ("jupyter", "https://x", 10206),
        ("tb", None, None),
    ]


def test_the_lock_is_the_routes_lock(host, tmp_path, monkeypatch):
    """A count is written under the same lock bai_appproxy_route takes, so two runs at
    once never lose one (the file is replaced whole)."""
    taken = []
    real = appproxy_routes.Proxy.locked

    def spy(self):
        taken.append(self.dir)
        return real(self)

    monkeypatch.setattr(appproxy_routes.Proxy, "locked", spy)
    apps(host, record_app="jupyter", record_event="started")
    assert taken == [str(tmp_path)]
