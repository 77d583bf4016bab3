"""Kernel features the roles rely on, and how to tell whether a host's kernel has them.

A feature is present when the running kernel has it now (a ``/sys/module`` entry, a
``/proc`` path that only it makes, or one of its symbols in ``/proc/kallsyms``: built-in
code shows there even when it has no ``/sys/module`` entry), when ``modules.builtin``
lists it, or when ``modules.dep`` lists it as a loadable module (the kernel, Docker or
nftables load it on first use). Pure logic: the module ``bai_kernel_features`` gathers
the observations, this decides and words the fix."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Feature:
    """One kernel feature: its module file, Kconfig option, who needs it and how to see it."""

    name: str
    module: str
    config: str
    needed_by: str
    paths: tuple[str, ...]
    symbols: tuple[str, ...]


FEATURES: dict[str, Feature] = {
    feature.name: feature
    for feature in (
        Feature(
            name="bridge",
            module="bridge",
            config="CONFIG_BRIDGE",
            needed_by="Docker's bridge networks (single-node sessions, docker0)",
            paths=("/sys/module/bridge",),
            symbols=("br_dev_xmit",),
        ),
        Feature(
            name="br_netfilter",
            module="br_netfilter",
            config="CONFIG_BRIDGE_NETFILTER",
            needed_by="filtering of bridged session traffic (Docker's inter-network isolation)",
            paths=("/sys/module/br_netfilter", "/proc/sys/net/bridge"),
            symbols=("br_nf_pre_routing_finish", "br_nf_pre_routing"),
        ),
        Feature(
            name="vxlan",
            module="vxlan",
            config="CONFIG_VXLAN",
            needed_by="Docker Swarm overlay networks (multi-node sessions)",
            paths=("/sys/module/vxlan",),
            symbols=("vxlan_xmit",),
        ),
        Feature(
            name="nf_tables",
            module="nf_tables",
            config="CONFIG_NF_TABLES",
            needed_by="the host firewall (nftables) and Docker's iptables-nft rules",
            paths=("/sys/module/nf_tables",),
            symbols=("nft_register_chain_type", "nft_do_chain"),
        ),
    )
}

_MODULE_FILE = re.compile(r"(?:^|/)([^/:]+)\.ko(?:\.(?:xz|zst|gz))?$")


def module_names(lines: list[str]) -> set[str]:
    """Module names in ``modules.builtin`` or ``modules.dep`` lines (``kernel/net/vxlan.ko:
    ...`` -> ``vxlan``); ``-`` and ``_`` are the same to the kernel, so ``_`` is kept."""
    names = set()
    for line in lines:
        path = line.split(":", 1)[0].strip()
        match = _MODULE_FILE.search(path)
        if match:
            names.add(match.group(1).replace("-", "_"))
    return names


def kallsyms_names(lines: list[str], wanted: set[str]) -> set[str]:
    """Which of ``wanted`` appear as symbols (third column) in ``/proc/kallsyms`` lines."""
    found = set()
    for line in lines:
        parts = line.split()
        if len(parts) >= 3 and parts[2] in wanted:
            found.add(parts[2])
    return found


def assess(
    name: str,
    *,
    release: str,
    paths: set[str],
    symbols: set[str],
    builtin: set[str],
    loadable: set[str],
) -> dict:
    """The verdict on one feature: ``{"name", "present", "how", "fix"}``.

    ``paths``: the feature probe paths that exist; ``symbols``: kallsyms names found;
    ``builtin``/``loadable``: module names from modules.builtin / modules.dep."""
    feature = FEATURES[name]
    if any(path in paths for path in feature.paths):
        how = "in the running kernel"
    elif any(symbol in symbols for symbol in feature.symbols):
        how = "built into the running kernel"
    elif feature.module in builtin:
        how = "built in (modules.builtin)"
    elif feature.module in loadable:
        how = "loadable module, loaded on first use"
    else:
        return {
            "name": name,
            "present": False,
            "how": "missing",
            "fix": (
                f"{name}: the running kernel {release} has no {feature.module} (neither "
                f"built in nor a loadable module under /lib/modules/{release}); "
                f"{feature.needed_by} need it. Boot a kernel built with {feature.config} "
                f"(Debian: linux-image-amd64; Ubuntu: linux-generic, or "
                f"linux-modules-extra-{release} on cloud kernels). Where the module exists "
                f"but is blacklisted, remove it from /etc/modprobe.d and run "
                f"'modprobe {feature.module}'."
            ),
        }
    return {"name": name, "present": True, "how": how, "fix": ""}
