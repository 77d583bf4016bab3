"""plugins/filter/bai_firewall.py: from openings and addresses to the host's nft rules."""

import pytest
from ansible_collections.bai.cluster.plugins.filter import bai_firewall as fw

ZONES = {"public": "10.210.1.0/24", "management": "10.210.2.0/24", "compute": "10.210.3.0/24"}
GROUPS = {
    "all": ["webserver", "manager", "appproxy", "agent1", "agent2"],
    "webserver": ["webserver"],
    "manager": ["manager"],
    "appproxy": ["appproxy"],
    "agents": ["agent1", "agent2"],
}
ADDRESSES = {
    "webserver": ["10.210.1.10", "10.210.2.10"],
    "manager": ["10.210.2.11", "10.210.3.11"],
    "appproxy": ["10.210.1.12", "10.210.3.12"],
    "agent1": ["10.210.3.21"],
    "agent2": ["10.210.3.22"],
}
SWARM = [
    {"port": 2377, "proto": "tcp", "purpose": "swarm", "on_groups": ["manager"]},
    {"port": 7946, "proto": "tcp", "purpose": "gossip", "on_groups": ["manager", "agents"]},
    {"port": 7946, "proto": "udp", "purpose": "gossip", "on_groups": ["manager", "agents"]},
    {"port": 4789, "proto": "udp", "purpose": "vxlan", "on_groups": ["manager", "agents"]},
]
SWARM = [dict(o, from_groups=["manager", "agents"]) for o in SWARM]
RPC = {
    "port": [6001, 6009],
    "proto": "tcp",
    "purpose": "agent RPC",
    "on_groups": ["agents"],
    "from_groups": ["manager"],
}
WEB = {
    "port": [8080, 443],
    "proto": "tcp",
    "purpose": "webserver",
    "on_groups": ["webserver"],
    "from_zones": ["public"],
}


def plan(host, groups_of_host, openings, **kw):
    args = {
        "groups": GROUPS,
        "host_addresses": ADDRESSES,
        "zone_cidrs": ZONES,
        "admin_cidrs": ["10.210.2.0/24"],
    }
    args.update(kw)
    return fw.plan(openings, host, groups_of_host, **args)


def rules(result):
    return [r["rule"] for r in result["input"]]


def test_agent_gets_swarm_and_rpc_from_its_peers_only():
    # One rule per protocol and port, ordered by port.
    got = plan("agent1", ["agents"], [*SWARM, RPC, WEB])
    assert got["problems"] == []
    assert rules(got) == [
        "udp dport 4789 ip saddr { 10.210.2.11, 10.210.3.11, 10.210.3.21, 10.210.3.22 } accept",
        "tcp dport { 6001, 6009 } ip saddr { 10.210.2.11, 10.210.3.11 } accept",
        "tcp dport 7946 ip saddr { 10.210.2.11, 10.210.3.11, 10.210.3.21, 10.210.3.22 } accept",
        "udp dport 7946 ip saddr { 10.210.2.11, 10.210.3.11, 10.210.3.21, 10.210.3.22 } accept",
    ]
    # The manager-only port and the webserver's ports are not opened on an agent.
    assert not any("2377" in r or "8080" in r for r in rules(got))


def test_webserver_opens_user_ports_from_the_public_zone():
    got = plan("webserver", ["webserver"], [*SWARM, RPC, WEB])
    assert rules(got) == ["tcp dport { 443, 8080 } ip saddr { 10.210.1.0/24 } accept"]
    assert got["input"][0]["comment"] == "webserver from zone public"


def test_anywhere_renders_both_families():
    opening = dict(WEB, from_zones=None, from_cidrs=["0.0.0.0/0", "::/0"])
    got = plan("webserver", ["webserver"], [opening])
    assert rules(got) == [
        "tcp dport { 443, 8080 } ip saddr { 0.0.0.0/0 } accept",
        "tcp dport { 443, 8080 } ip6 saddr { ::/0 } accept",
    ]
    assert "anywhere" in got["input"][0]["comment"]


def test_same_port_from_two_roles_is_merged_with_both_purposes():
    registry = {
        "port": 5000,
        "proto": "tcp",
        "purpose": "registry",
        "on_groups": ["manager"],
        "from_groups": ["agents"],
    }
    again = dict(registry, purpose="registry mirror", from_groups=["webserver"])
    got = plan("manager", ["manager"], [registry, again, registry])
    (rule,) = got["input"]
    assert rule["rule"] == (
        "tcp dport 5000 ip saddr { 10.210.1.10, 10.210.2.10, 10.210.3.21, 10.210.3.22 } accept"
    )
    assert rule["comment"] == "registry; registry mirror from agents, webserver"


def test_container_port_range_sources_and_admin_sets():
    got = plan("agent1", ["agents"], [], container_ports="30000-31000")
    assert got["container_ports"] == "30000-31000"
    assert got["container_from_v4"] == ["10.210.1.12", "10.210.3.12"]
    assert got["container_from_v6"] == []
    assert got["admin_v4"] == ["10.210.2.0/24"]
    assert got["ssh_port"] == "22"


def test_ipv6_sources_go_to_ip6_rules():
    addresses = dict(ADDRESSES, manager=["10.210.3.11", "fd00:3::11"])
    got = plan("agent1", ["agents"], [RPC], host_addresses=addresses)
    assert rules(got) == [
        "tcp dport { 6001, 6009 } ip saddr { 10.210.3.11 } accept",
        "tcp dport { 6001, 6009 } ip6 saddr { fd00:3::11 } accept",
    ]


def test_esp_has_no_port():
    esp = {"port": None, "proto": "esp", "purpose": "ipsec", "on_groups": ["agents"]}
    esp["from_groups"] = ["agents"]
    got = plan("agent1", ["agents"], [esp])
    assert rules(got) == ["meta l4proto esp ip saddr { 10.210.3.21, 10.210.3.22 } accept"]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"port": 70000}, "within 1-65535"),
        ({"port": "abc"}, "expected FIRST-LAST"),
        ({"port": "31000-30000"}, "the first at most the last"),
        ({"port": True}, "port: got True"),
        ({"proto": "quic"}, "is not one of"),
        ({"on_groups": []}, "on_groups is empty"),
        ({"from_groups": ["nosuch"]}, "not an inventory group"),
        ({"from_groups": None, "from_zones": ["dmz"]}, "bai_zone_cidrs does not define"),
        ({"from_groups": None, "from_cidrs": ["10.0.0.0/33"]}, "from_cidrs"),
        ({"proto": "esp"}, "has no ports"),
    ],
)
def test_bad_openings_are_named_and_left_out(bad, message):
    opening = dict(RPC, **bad)
    got = plan("agent1", ["agents"], [opening])
    assert len(got["problems"]) == 1, got["problems"]
    assert message in got["problems"][0]
    assert got["problems"][0].startswith("opening [0]")
    assert got["input"] == []


def test_opening_without_sources_is_refused():
    opening = {k: v for k, v in RPC.items() if k != "from_groups"}
    (problem,) = plan("agent1", ["agents"], [opening])["problems"]
    assert "who may connect" in problem


def test_not_a_mapping_and_bad_admin_cidr():
    got = plan("agent1", ["agents"], ["6001"], admin_cidrs=["nonsense"])
    assert any("is not a mapping" in p for p in got["problems"])
    assert any("bai_admin_cidrs entry 'nonsense'" in p for p in got["problems"])


def test_comments_are_safe_for_nft():
    opening = dict(RPC, purpose='say "hi"\n' + "x" * 200)
    (rule,) = plan("agent1", ["agents"], [opening])["input"]
    assert '"' not in rule["comment"] and "\n" not in rule["comment"]
    assert len(rule["comment"]) <= 120


def test_addresses_prefer_the_zones_and_the_override():
    hostvars = {
        "agent1": {
            "ansible_facts": {
                "all_ipv4_addresses": ["10.210.3.21", "10.200.0.1", "127.0.0.1"],
                "all_ipv6_addresses": ["fe80::1"],
            }
        },
        "manager": {"host_firewall_addresses": ["10.210.3.11"], "ansible_facts": {}},
        "ghost": {"ansible_facts": {}},
        "lost": {"ansible_facts": {"all_ipv4_addresses": ["192.168.9.9"]}},
    }
    got = fw.addresses(hostvars, ["agent1", "manager", "ghost", "lost", "missing"], ZONES)
    assert got["addresses"] == {"agent1": ["10.210.3.21"], "manager": ["10.210.3.11"]}
    assert [p.split(":")[0] for p in got["problems"]] == ["ghost", "lost", "missing"]
    assert "set host_firewall_addresses" in got["problems"][1]


def test_addresses_without_zones_keep_everything_but_loopback_and_link_local():
    hostvars = {"a": {"ansible_facts": {"all_ipv4_addresses": ["10.0.0.5", "127.0.0.1"]}}}
    assert fw.addresses(hostvars, ["a"], {})["addresses"] == {"a": ["10.0.0.5"]}


def test_collect_dedupes_the_exports_of_every_host():
    hostvars = {
        "manager": {"docker_swarm_firewall_openings": SWARM},
        "agent1": {"docker_swarm_firewall_openings": SWARM, "image_x": RPC},
        "webserver": {},
    }
    got = fw.collect(
        hostvars, ["manager", "agent1", "webserver", "gone"], ["docker_swarm_firewall_openings"]
    )
    assert got == SWARM


@pytest.mark.parametrize(
    ("cidrs", "address", "expected"),
    [
        (["10.210.2.0/24"], "10.210.2.5", True),
        (["10.210.2.0/24"], "10.210.3.5", False),
        (["bad", "::/0"], "fd00::1", True),
        ([], "10.0.0.1", False),
        (["10.0.0.0/8"], "not-an-ip", False),
    ],
)
def test_covers(cidrs, address, expected):
    assert fw.covers(cidrs, address) is expected


def test_named_cidrs_and_sysctl_state():
    assert fw.named_cidrs(
        {"engine": ["10.200.0.0/14"], "gwbridge": [], "s": ["10.224.0.0/12"]}
    ) == {
        "engine[0]": "10.200.0.0/14",
        "s[0]": "10.224.0.0/12",
    }
    lines = ["net.ipv4.ip_forward 1 ro", "net.ipv4.conf.all.rp_filter 0 ro", "x.y 4096 87380 rw"]
    got = fw.sysctl_state(
        lines,
        {"net.ipv4.ip_forward": 1, "net.ipv4.conf.all.rp_filter": 2, "x.y": "4096\t87380", "z": 1},
    )
    assert [(r["key"], r["differs"], r["writable"]) for r in got] == [
        ("net.ipv4.ip_forward", False, False),
        ("net.ipv4.conf.all.rp_filter", True, False),
        ("x.y", False, True),
        ("z", True, False),
    ]
    assert got[1]["have"] == "0" and got[1]["want"] == "2"
