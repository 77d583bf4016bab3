"""Kernel feature verdicts (module_utils/hosts/kernel.py): how each way of finding a feature
counts, and what a missing one tells the operator to do."""

from __future__ import annotations

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.hosts.kernel import (
    FEATURES,
    assess,
    kallsyms_names,
    module_names,
)

RELEASE = "6.1.0-27-amd64"
NOTHING = {"paths": set(), "symbols": set(), "builtin": set(), "loadable": set()}


def verdict(name: str, **seen) -> dict:
    return assess(name, release=RELEASE, **{**NOTHING, **seen})


@pytest.mark.parametrize("name", sorted(FEATURES))
def test_a_feature_seen_nowhere_is_missing_with_a_fix(name):
    got = verdict(name)
    feature = FEATURES[name]
    assert got["present"] is False
    assert got["how"] == "missing"
    # The fix names the kernel, the Kconfig option and what to install, and says who needs it.
    for part in (
        RELEASE,
        feature.config,
        "linux-image-amd64",
        f"modprobe {feature.module}",
        feature.needed_by,
    ):
        assert part in got["fix"], (part, got["fix"])


@pytest.mark.parametrize(
    ("seen", "how"),
    [
        ({"paths": {"/sys/module/vxlan"}}, "in the running kernel"),
        ({"symbols": {"vxlan_xmit"}}, "built into the running kernel"),
        ({"builtin": {"vxlan"}}, "built in (modules.builtin)"),
        ({"loadable": {"vxlan"}}, "loadable module, loaded on first use"),
    ],
)
def test_each_way_of_finding_a_feature_counts(seen, how):
    assert verdict("vxlan", **seen) == {"name": "vxlan", "present": True, "how": how, "fix": ""}


def test_another_features_evidence_does_not_count():
    got = verdict(
        "vxlan", paths={"/sys/module/bridge"}, symbols={"br_dev_xmit"}, builtin={"bridge"}
    )
    assert got["present"] is False


def test_br_netfilter_is_seen_through_its_proc_folder():
    # Built in without a /sys/module entry (this CI's kernel): /proc/sys/net/bridge exists.
    assert verdict("br_netfilter", paths={"/proc/sys/net/bridge"})["present"] is True


def test_module_names_from_modules_dep_and_builtin():
    lines = [
        "kernel/drivers/net/vxlan/vxlan.ko.xz: kernel/net/ipv6/ip6_udp_tunnel.ko.xz",
        "kernel/net/bridge/br_netfilter.ko.zst: kernel/net/bridge/bridge.ko.zst",
        "kernel/net/netfilter/nf_tables.ko",
        "kernel/drivers/net/some-thing.ko.gz:",
        "",
        "not a module line",
    ]
    assert module_names(lines) == {"vxlan", "br_netfilter", "nf_tables", "some_thing"}


def test_kallsyms_names_reads_the_third_column_only():
    lines = [
        "ffffffff81dd4bc0 t vxlan_xmit",
        "ffffffff81f63e60 T nft_register_chain_type",
        "ffffffff82152b30 T br_dev_xmit_other",
        "0000000000000000 t br_dev_xmit\t[bridge]",
        "garbage",
    ]
    wanted = {"vxlan_xmit", "br_dev_xmit", "nft_do_chain"}
    assert kallsyms_names(lines, wanted) == {"vxlan_xmit", "br_dev_xmit"}
