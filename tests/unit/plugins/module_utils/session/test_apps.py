"""Unit tests of plugins/module_utils/session/apps.py (a session's apps: the image label,
the session's own, the service definition) and of the app route's HAProxy text
(network/appproxy.py)."""

from __future__ import annotations

import json

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import RouteError, SpecError
from ansible_collections.bai.cluster.plugins.module_utils.network import appproxy as ap
from ansible_collections.bai.cluster.plugins.module_utils.session import apps
from ansible_collections.bai.cluster.plugins.module_utils.session.spec import (
    normalize_spec,
    spec_canonical,
    spec_hash,
)
from hypothesis import given
from hypothesis import strategies as st


def test_the_image_label_lists_its_http_apps_and_skips_what_the_proxy_does_not_carry():
    found = apps.parse_service_ports("jupyter:http:8090, sshd:tcp:2201,ttyd:pty:7681")
    assert found == (apps.App("jupyter", "http", 8090),)
    assert apps.parse_service_ports("") == () and apps.parse_service_ports(None) == ()


@pytest.mark.parametrize(
    "label", ["jupyter:http", "jupyter:gopher:8090", "Jupyter:http:8090", "j:http:80"]
)
def test_a_malformed_image_label_is_an_error(label):
    with pytest.raises(SpecError):
        apps.parse_service_ports(label)


def test_a_session_declares_its_own_ports_in_either_form():
    found = apps.parse_declared(["tb=http:6006", "web:http:8000", {"name": "m", "port": 9000}])
    assert [a.as_dict() for a in found] == [
        {"name": "tb", "protocol": "http", "port": 6006, "declared": True},
        {"name": "web", "protocol": "http", "port": 8000, "declared": True},
        {"name": "m", "protocol": "http", "port": 9000, "declared": True},
    ]
    assert apps.parse_declared("tb=http:6006")[0].port == 6006
    assert apps.parse_declared(None) == apps.parse_declared([]) == ()


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (["tb=http:2200"], "not usable"),
        (["tb=http:80"], "not usable"),
        (["tb=tcp:6006"], "routes http only"),
        (["tb=http:6006", "tb=http:6007"], "declared twice"),
        (["tb=http:6006", "tc=http:6006"], "declared twice"),
        (["TB=http:6006"], "app name"),
        (["tb=http:6006; rm -rf /"], "not NAME=PROTOCOL:PORT"),
        ([{"name": "tb", "port": 6006, "cmd": "x"}], "unknown key"),
        ([f"a{i}=http:{7000 + i}" for i in range(9)], "at most 8"),
    ],
)
def test_a_bad_declaration_is_refused_with_what_is_wrong(value, says):
    with pytest.raises(SpecError, match=says):
        apps.parse_declared(value)


def test_a_declared_app_may_not_take_an_image_apps_name_or_port():
    image = apps.parse_service_ports("jupyter:http:8090")
    assert apps.merged(image, apps.parse_declared(["tb=http:6006"]))[1].name == "tb"
    for clash in ("jupyter=http:7000", "x=http:8090"):
        with pytest.raises(SpecError, match="collides"):
            apps.merged(image, apps.parse_declared([clash]))


def test_the_service_definition_gives_the_argv_with_the_port_and_its_path():
    app = apps.App("jupyter", "http", 8090)
    definition = json.dumps(
        {"command": ["jupyter", "lab", "--port={ports[0]}"], "url_path": "/lab"}
    )
    assert apps.service_command(definition, app) == ["jupyter", "lab", "--port=8090"]
    assert apps.url_path(definition) == "/lab"
    assert apps.url_path('{"url_path": "/x?y"}') == apps.url_path("not json") == "/"
    for bad in ('{"command": "jupyter lab"}', '{"command": []}', "[1]", "{"):
        with pytest.raises(SpecError):
            apps.service_command(bad, app)


def test_declared_apps_are_in_the_spec_and_its_hash_only_when_given():
    base = {"name": "s", "size": 2}
    plain = normalize_spec(base)
    with_apps = normalize_spec({**base, "apps": ["tb=http:6006"]})
    assert "apps" not in spec_canonical(plain)
    assert spec_canonical(with_apps)["apps"] == ["tb:http:6006"]
    assert spec_hash(plain) != spec_hash(with_apps)
    # The canonical form (what the ledger keeps) reads back the same.
    again = normalize_spec(spec_canonical(with_apps))
    assert again.apps == with_apps.apps and spec_hash(again) == spec_hash(with_apps)
    with pytest.raises(SpecError, match="batch session has no apps"):
        normalize_spec({**base, "type": "batch", "command": "true", "apps": ["tb=http:6006"]})


@given(
    st.lists(
        st.tuples(st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True), st.integers(1024, 65535)),
        max_size=8,
    )
)
def test_the_label_form_reads_back_what_it_wrote(entries):
    names = {name for name, _port in entries}
    ports = {port for _name, port in entries}
    if len(names) != len(entries) or len(ports) != len(entries) or 2200 in ports:
        with pytest.raises(SpecError):
            apps.parse_declared([f"{n}=http:{p}" for n, p in entries])
        return
    declared = apps.parse_declared([f"{n}=http:{p}" for n, p in entries])
    assert (
        apps.parse_declared(apps.render_label(declared).split(",") if declared else []) == declared
    )


def test_where_names_main1s_agent_or_why_not():
    read = {
        "reservation": {
            "session_id": "i1",
            "kernels": [{"host": "main1", "agent": "agent2"}, {"host": "sub1", "agent": "agent1"}],
        }
    }
    assert apps.where(read, "s") == {"agent": "agent2", "session_id": "i1", "why": ""}
    assert apps.where({}, "s")["why"] == "no such session s"
    assert "queued" in apps.where({"queued": {"session_id": "q"}}, "s")["why"]
    batch = {"reservation": {**read["reservation"], "type": "batch"}}
    assert "batch session" in apps.where(batch, "s")["why"]


ROUTE = {
    "session": "s1",
    "session_id": "i1",
    "port": 10206,
    "backend_host": "10.210.3.11",
    "backend_port": 30002,
    "target_host": "main1",
    "target_port": 8090,
    "app": "jupyter",
    "secret": "A" * 43,
    "tls_cert": "/etc/haproxy/certs/appproxy.pem",
}


def test_an_app_route_lets_in_only_its_token_or_its_cookie():
    text = ap.render_route(ROUTE)
    assert ap.parse_route(text)["app"] == "jupyter"
    lines = [line.strip() for line in text.splitlines()]
    assert "acl bai_token urlp(bai_token) -m str -- " + "A" * 43 in lines
    redirect = next(line for line in lines if line.startswith("http-request redirect"))
    assert redirect.startswith("http-request redirect location %[path] code 303 set-cookie")
    assert redirect.endswith('; Secure; HttpOnly; SameSite=Lax" if bai_token')
    refuse = next(line for line in lines if line.startswith("http-request return status 403"))
    assert refuse.endswith("unless bai_cookie")
    # The token never reaches a log line: the log format has the path (%HP), not the URI.
    log = next(line for line in lines if line.startswith("log-format"))
    fields = log.removeprefix("log-format").strip(' "').split()
    assert "%HP" in fields and "%HU" not in fields and "%r" not in fields


def test_a_secret_that_begins_with_a_dash_is_a_pattern_not_a_flag():
    """token_urlsafe gives 1 secret in 64 a leading "-", which HAProxy took for an ACL
    flag and refused the route (found by CI: test_apps_lab's fresh session, once)."""
    secret = "-" + "A" * 42
    lines = [line.strip() for line in ap.render_route({**ROUTE, "secret": secret}).splitlines()]
    assert f"acl bai_token urlp(bai_token) -m str -- {secret}" in lines
    assert f"acl bai_cookie req.cook(bai_route_10206) -m str -- {secret}" in lines


@pytest.mark.parametrize(
    "change",
    [
        {"secret": "short"},
        {"secret": "A" * 40 + " x"},
        {"tls_cert": "rel.pem"},
        {"tls_cert": "/a b.pem"},
        {"app": "Bad"},
    ],
)
def test_an_app_route_without_a_usable_secret_or_certificate_is_refused(change):
    with pytest.raises((RouteError, SpecError)):
        ap.render_route({**ROUTE, **change})


def plan_jupyter_route(routes, session_id):
    """The route plan of session s1's jupyter app, offered the new secret "B" * 43."""
    return ap.plan_route(
        routes,
        session="s1",
        session_id=session_id,
        backend_host="10.0.0.1",
        backend_port=30002,
        port_range=(10205, 10300),
        app="jupyter",
        new_secret="B" * 43,
        tls_cert="/c.pem",
    )


def test_an_app_route_keeps_its_secret_for_its_session_id_only():
    routes = {"s1.jupyter": ROUTE}
    kept = plan_jupyter_route(routes, session_id="i1")
    assert kept["secret"] == "A" * 43 and kept["port"] == 10206
    new = plan_jupyter_route(routes, session_id="i2")
    assert new["secret"] == "B" * 43
