"""How session containers are confined (docs/security.md): capabilities, privileges,
process limit and where main1's port is published. Pure functions; the agent-side module
turns the result into Docker's host config."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.addresses import in_zone
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError

# What the entrypoint (root, before sshd starts) and sshd need, and nothing else; Docker's
# default set also has NET_RAW (raw sockets: spoofing on the session network), MKNOD,
# FSETID, SETFCAP, SETPCAP and NET_BIND_SERVICE (sshd listens on 2200).
CAPABILITIES = {
    "CHOWN": "the entrypoint gives the session keys and ~work/.ssh to user work",
    "DAC_OVERRIDE": "the entrypoint (root) writes into ~work/.ssh, which is work's, mode 700",
    "FOWNER": "the entrypoint sets the mode of files it does not own",
    "SETUID": "sshd switches to user work for a login",
    "SETGID": "sshd switches to work's groups for a login",
    "SYS_CHROOT": "sshd's unprivileged pre-authentication process runs chrooted",
    "KILL": "sshd ends the processes of a login that runs as another user",
    "AUDIT_WRITE": "sshd records logins in the kernel's audit log",
}
DEFAULT_CAPABILITIES = tuple(CAPABILITIES)
# Added for containers given GPUs (or RDMA devices): pinned (locked) memory for GPU and
# RDMA transfers, and raised scheduling priority for the drivers' helper threads.
DEVICE_CAPABILITIES = ("IPC_LOCK", "SYS_NICE")
# Processes and threads per container: far above what training jobs use (data-loader
# workers, NCCL and OpenMP threads), low enough that a fork bomb stays in its container.
DEFAULT_PIDS_LIMIT = 16384

# Open files per process: sockets of many peers (NCCL, gloo, MPI) and data-loader files.
DEFAULT_NOFILE = 1048576

_CAP_RE = re.compile(r"^(CAP_)?[A-Z][A-Z_]*[A-Z]$")


def capabilities(value: Any, where: str = "capabilities") -> list[str]:
    """A list of Linux capability names, upper case without C(CAP_); checked."""
    if not isinstance(value, (list, tuple)):
        raise SpecError(f"{where}: got {value!r}; expected a list of capability names")
    caps: list[str] = []
    for i, item in enumerate(value):
        name = str(item).upper() if isinstance(item, str) else ""
        if not _CAP_RE.match(name):
            raise SpecError(f"{where}[{i}]: got {item!r}; expected a capability name such as CHOWN")
        name = name.removeprefix("CAP_")
        if name == "ALL":
            raise SpecError(f"{where}[{i}]: ALL is not allowed; list the capabilities needed")
        if name not in caps:
            caps.append(name)
    return caps


def host_security(
    caps: Sequence[str],
    *,
    no_new_privileges: bool = True,
    pids_limit: int = DEFAULT_PIDS_LIMIT,
    devices: bool = False,
) -> dict[str, Any]:
    """create_host_config keyword arguments: every capability dropped but ``caps`` (plus
    DEVICE_CAPABILITIES when the container gets GPUs or RDMA devices), no privilege gain
    through setuid files, at most ``pids_limit`` tasks (0: Docker's default, none)."""
    if pids_limit < 0:
        raise SpecError(f"pids_limit: got {pids_limit}; expected 0 (no limit) or more")
    add = list(caps) + [c for c in DEVICE_CAPABILITIES if devices and c not in caps]
    options: dict[str, Any] = {"cap_drop": ["ALL"], "cap_add": add}
    if no_new_privileges:
        options["security_opt"] = ["no-new-privileges:true"]
    if pids_limit:
        options["pids_limit"] = pids_limit
    return options


def ulimits(
    *,
    memlock: int = -1,
    nofile: int = DEFAULT_NOFILE,
    ceiling: dict[str, int] | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Docker's Ulimits (soft = hard): locked memory in bytes (-1: none) and open files,
    and warnings. ``ceiling`` (name -> hard limit, -1 for none) is what the engine can
    grant when it cannot raise limits (no CAP_SYS_RESOURCE, e.g. some VMs and unprivileged
    Docker-in-Docker nodes): a value above it is lowered to it, with a warning, since
    the container would not start otherwise."""
    if memlock < -1:
        raise SpecError(f"memlock: got {memlock}; expected -1 (no limit) or bytes")
    if nofile < 1024:
        raise SpecError(f"nofile: got {nofile}; expected at least 1024")
    wanted = {"memlock": memlock, "nofile": nofile}
    warnings = []
    for name, value in wanted.items():
        top = (ceiling or {}).get(name, -1)
        if top != -1 and (value == -1 or value > top):
            warnings.append(
                f"{name} lowered from {'unlimited' if value == -1 else value} to {top}: "
                f"this agent cannot raise resource limits (CAP_SYS_RESOURCE is not in its "
                f"bounding set)"
            )
            wanted[name] = top
    return [{"name": k, "soft": v, "hard": v} for k, v in wanted.items()], warnings


def publish_address(explicit: str | None, network: str | None, addresses: Iterable[str]) -> str:
    """Where main1's port is published on this agent: ``explicit`` when given, else this
    agent's address in ``network`` (the compute zone) when given, else every address.
    ``addresses`` are the agent's IPv4 addresses."""
    if explicit:
        try:
            ipaddress.ip_address(explicit)
        except ValueError:
            raise SpecError(f"publish_address: got {explicit!r}; expected an IP address") from None
        return explicit
    if not network:
        return "0.0.0.0"
    try:
        found = in_zone(addresses, network)
    except ValueError:
        raise SpecError(f"publish_network: got {network!r}; expected a CIDR") from None
    if not found:
        raise SpecError(
            f"publish_network: this agent has no address in {network} (it has "
            f"{', '.join(addresses) or 'none'}); set bai_session_publish_address for it"
        )
    return found[0]
