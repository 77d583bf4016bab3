"""Unit tests of plugins/module_utils/network/appproxy.py: the app proxy's route logic
(port allocation, route files, listening ports)."""

from __future__ import annotations

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import RouteError, SpecError
from ansible_collections.bai.cluster.plugins.module_utils.network import appproxy as ap

RANGE = (10205, 10300)


def route(session: str, port: int, **extra) -> dict:
    return {
        "session": session,
        "port": port,
        "backend_host": "10.210.3.21",
        "backend_port": 30001,
        "target_host": "main1",
        "target_port": 2200,
        **extra,
    }


# --- inputs ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["ap1", "a", "train-2", "x" * 32])
def test_session_names_accepted(name):
    assert ap.check_session(name) == name


@pytest.mark.parametrize("name", ["", "-a", "a-", "A", "a/b", "../x", "x" * 33, None, 3])
def test_session_names_refused(name):
    with pytest.raises(RouteError, match="not a session name"):
        ap.check_session(name)


# --- allocation -----------------------------------------------------------------------
def test_first_route_gets_the_first_port():
    assert ap.allocate_port(RANGE, taken=set()) == 10205


def test_lowest_free_port_fills_gaps():
    assert ap.allocate_port(RANGE, taken={10205, 10206, 10208}) == 10207


def test_port_is_stable_for_its_session():
    assert ap.allocate_port(RANGE, taken={10205}, current=10250) == 10250


def test_current_port_outside_the_range_is_replaced():
    assert ap.allocate_port((10205, 10210), taken=set(), current=10300) == 10205


def test_current_port_claimed_by_another_route_is_replaced():
    assert ap.allocate_port(RANGE, taken={10205}, current=10205) == 10206


def test_ports_another_program_listens_on_are_skipped():
    assert ap.allocate_port(RANGE, taken={10205}, busy={10206, 10207}) == 10208


def test_exhausted_range_says_what_to_do():
    with pytest.raises(RouteError, match=r"no free port left in 10205-10206.*widen"):
        ap.allocate_port((10205, 10206), taken={10205}, busy={10206})


def test_plan_keeps_the_sessions_port_and_follows_a_new_backend():
    routes = {"a": route("a", 10205), "b": route("b", 10206)}
    got = ap.plan_route(
        routes,
        session="b",
        session_id="id-b",
        backend_host="10.210.3.22",
        backend_port=30007,
        port_range=RANGE,
        listening={10205, 10206},
    )
    assert got["port"] == 10206
    assert (got["backend_host"], got["backend_port"], got["session_id"]) == (
        "10.210.3.22",
        30007,
        "id-b",
    )


@pytest.mark.parametrize("host", ["10.210.3.21", "fd00::5", "agent1.example.org", "agent-1"])
def test_plan_accepts_addresses_and_names(host):
    got = ap.plan_route(
        {}, session="s", session_id=None, backend_host=host, backend_port=30001, port_range=RANGE
    )
    assert got["backend_host"] == host


def test_plan_for_a_new_session_skips_routed_and_foreign_listeners():
    routes = {"a": route("a", 10205)}
    got = ap.plan_route(
        routes,
        session="new",
        session_id=None,
        backend_host="10.210.3.21",
        backend_port="30002",
        port_range=RANGE,
        listening={10205, 10206, 22},
    )
    assert got["port"] == 10207
    assert got["backend_port"] == 30002
    assert "session_id" not in got


@pytest.mark.parametrize(
    ("host", "port", "message"),
    [
        ("", 30001, "no backend address"),
        ("bad host!", 30001, "not an IP address or a host name"),
        ("10.0.0.1\n    bind :22", 30001, "not an IP address or a host name"),
        ("10.0.0.1", 0, "backend port"),
        ("h", "x", "port"),
    ],
)
def test_plan_refuses_bad_backends(host, port, message):
    # RouteError, or a port's SpecError (RouteError is one): the module reports either.
    with pytest.raises(SpecError, match=message):
        ap.plan_route(
            {}, session="s", session_id=None, backend_host=host, backend_port=port, port_range=RANGE
        )


# --- route files ----------------------------------------------------------------------
def test_rendered_route_is_a_tcp_listen_section_with_a_readable_header():
    text = ap.render_route(route("ap1", 10205, session_id="sid"))
    lines = text.splitlines()
    assert "listen bai-session-ap1" in lines
    assert "    mode tcp" in lines
    assert "    bind :10205" in lines
    assert "    server main1 10.210.3.21:30001" in lines
    assert ap.parse_route(text) == route("ap1", 10205, session_id="sid")


def test_bind_address_and_ipv6_backends_are_bracketed():
    text = ap.render_route(route("s", 10210, backend_host="fd00::5", bind_address="10.210.1.12"))
    assert "    bind 10.210.1.12:10210" in text.splitlines()
    assert "    server main1 [fd00::5]:30001" in text.splitlines()


@pytest.mark.parametrize(
    "text",
    [
        "listen mine\n    bind :10250\n",  # an operator's own file: not ours
        "# bai-route {not json\n",
        '# bai-route ["a list"]\n',
        '# bai-route {"session": "x", "port": "nope"}\n',
        '# bai-route {"session": "../etc", "port": 10205}\n',
    ],
)
def test_foreign_or_damaged_files_are_not_routes(text):
    assert ap.parse_route(text) is None


# --- listening ports ------------------------------------------------------------------
PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:27DD 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1
   2: 0C01D20A:27DD 1F01D20A:D2B4 01 00000000:00000000 00:00000000 00000000     0        0 3 1
   3: 0C01D20A:9C40 1F01D20A:0016 06 00000000:00000000 00:00000000 00000000     0        0 4 1
"""
PROC_NET_TCP6 = """\
  sl  local_address                         remote_address                        st
   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A 0 0
"""


def test_listening_ports_are_read_from_proc_net_tcp():
    # 0x27DD = 10205 and 0x16 = 22 listen; established (01) and TIME_WAIT (06) do not count.
    assert ap.listening_ports(PROC_NET_TCP) == {10205, 22}
    assert ap.listening_ports(PROC_NET_TCP6) == {22}
    assert ap.listening_ports("") == set()
