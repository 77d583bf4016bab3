"""Unit tests of plugins/module_utils/appproxy.py: the app proxy's route logic
(port allocation, route files, listening ports, people's keys, address choice)."""

from __future__ import annotations

import io
import tarfile

import pytest
from ansible_collections.bai.cluster.plugins.module_utils import appproxy as ap

RANGE = (10205, 10300)
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl a@b"


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
@pytest.mark.parametrize(
    ("text", "expected"),
    [("10205-10300", (10205, 10300)), (" 10205 - 10205 ", (10205, 10205)), ("80", (80, 80))],
)
def test_port_range_parses(text, expected):
    assert ap.parse_port_range(text) == expected


@pytest.mark.parametrize("text", ["", "10300-10205", "0-10", "10205-70000", "a-b", "1-2-3", None])
def test_bad_port_range_is_refused_with_the_expected_form(text):
    with pytest.raises(ap.RouteError, match="port range"):
        ap.parse_port_range(text)


@pytest.mark.parametrize("name", ["ap1", "a", "train-2", "x" * 32])
def test_session_names_accepted(name):
    assert ap.check_session(name) == name


@pytest.mark.parametrize("name", ["", "-a", "a-", "A", "a/b", "../x", "x" * 33, None, 3])
def test_session_names_refused(name):
    with pytest.raises(ap.RouteError, match="not a session name"):
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
    with pytest.raises(ap.RouteError, match=r"no free port left in 10205-10206.*widen"):
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
    with pytest.raises(ap.RouteError, match=message):
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


# --- people's keys --------------------------------------------------------------------
def test_public_keys_pass():
    ecdsa = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTY="
    assert ap.public_key_errors([KEY, ecdsa, KEY.rsplit(" ", 1)[0]]) == []
    assert ap.public_key_errors([]) == []


def test_bad_keys_are_named_by_position_without_echoing_them():
    private = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
    problems = ap.public_key_errors([KEY, private, "ssh-ed25519", KEY + "\nssh-rsa AAAA", 5])
    assert [p.split(":", maxsplit=1)[0] for p in problems] == ["[1]", "[2]", "[3]", "[4]"]
    assert "private key" in problems[0]
    assert "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ" not in " ".join(problems)
    assert ap.public_key_errors(KEY) == ["expected a list of public keys, got str"]


def test_authorized_keys_tar_is_one_root_owned_readable_file():
    data = ap.authorized_keys_tar([KEY, " " + KEY + " "])
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        (member,) = tar.getmembers()
        assert member.name == "authorized_keys2"
        assert (member.uid, member.gid, member.mode) == (0, 0, 0o644)
        assert tar.extractfile(member).read().decode() == f"{KEY}\n{KEY}\n"


# --- addresses ------------------------------------------------------------------------
IP_ADDR = [
    "1: lo    inet 127.0.0.1/8 scope host lo",
    "2: docker0    inet 10.200.0.1/24 brd 10.200.0.255 scope global docker0",
    "40: eth0    inet 10.210.3.21/24 brd 10.210.3.255 scope global eth0",
]


def test_the_address_inside_the_zone_is_picked():
    assert ap.pick_address(IP_ADDR, "10.210.3.0/24") == "10.210.3.21"
    assert ap.pick_address(["10.200.0.1", "10.210.1.12"], "10.210.1.0/24") == "10.210.1.12"
    assert ap.pick_address(["10.210.1.12/24"], "10.210.1.0/24") == "10.210.1.12"


def test_no_address_in_the_zone_or_no_zone_gives_none():
    assert ap.pick_address(IP_ADDR, "192.0.2.0/24") is None
    assert ap.pick_address(IP_ADDR, None) is None
