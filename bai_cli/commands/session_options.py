"""The options of ``session create`` and ``session run`` (session_create.yml's variables):
the parser's arguments, their parsing, and their checks before anything runs."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.session.limits import (
    LIMITS,
    Limit,
    check_number,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.restart_policy import (
    parse_restart_policy,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.signal_names import (
    parse_end_signal,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.topology_request import (
    parse_prefer,
    parse_topology,
)

from .common import UsageError


def key_value(text: str, what: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise UsageError(f"{what}: expected KEY=VALUE, got {text!r}")
    return key, value


def parse_mount(text: str) -> dict[str, Any]:
    """``SRC:DST[:ro|rw]`` -> ``{"src": SRC, "dst": DST[, "readonly": true]}``."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise UsageError(f"--mount: expected SRC:DST[:ro|rw], got {text!r}")
    mount: dict[str, Any] = {"src": parts[0], "dst": parts[1]}
    if len(parts) == 3:
        if parts[2] not in ("ro", "rw"):
            raise UsageError(f"--mount: the mode must be ro or rw, got {parts[2]!r} in {text!r}")
        mount["readonly"] = parts[2] == "ro"
    return mount


def _number(text: str) -> Any:
    """Whole numbers and decimals as numbers; anything else as given (the playbook
    judges it and says what is allowed)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


# The numeric options and the ranges they are checked against before anything runs
# (module_utils/session/limits.py; docs/sessions.md): option attribute -> (variable, range). The
# size is the spec's, checked with the rest of it by the playbook's first step (exit 2,
# nothing made, the step named).
NUMERIC_OPTIONS: dict[str, tuple[str, Limit]] = {
    "wait": ("session_wait_s", LIMITS["session_wait_s"]),
    "lifetime": ("session_lifetime_s", LIMITS["session_lifetime_s"]),
    "ssh_timeout": ("session_ssh_timeout_s", LIMITS["session_ssh_timeout_s"]),
    "mtu": ("session_network_mtu", LIMITS["session_network_mtu"]),
    "grace": ("session_stop_grace_s", LIMITS["session_stop_grace_s"]),
    "restarts": ("session_restarts", LIMITS["session_restarts"]),
}


def check_options(args: argparse.Namespace) -> None:
    """Every numeric option within its range, and ``--signal`` a signal and a lead, or
    ``UsageError`` naming the option and what it takes (nothing is run)."""
    if getattr(args, "signal", None) is not None:
        try:
            args.signal = parse_end_signal(args.signal, "--signal")
        except SpecError as exc:
            raise UsageError(str(exc)) from None
    if getattr(args, "topology", None) is not None or getattr(args, "prefer", None):
        try:
            level = parse_topology(args.topology, "--topology")
            parse_prefer(args.prefer, level, "--prefer")
        except SpecError as exc:
            raise UsageError(str(exc)) from None
    if getattr(args, "restart_on", None) is not None:
        try:
            parse_restart_policy(
                {"restarts": args.restarts or 0, "restart_on": args.restart_on}, "batch"
            )
        except SpecError as exc:
            raise UsageError(f"--restart-on: {exc}") from None
    for attr, (name, limit) in NUMERIC_OPTIONS.items():
        value = getattr(args, attr, None)
        if value is not None:
            try:
                check_number(name, value, limit)
            except SpecError as exc:
                raise UsageError(f"--{attr.replace('_', '-')}: {exc}") from None


def parse_role(text: str) -> dict[str, Any]:
    """``ROLE=REPLICAS[,image=IMG][,cpu=N][,mem=SIZE][,gpu=N]`` -> a session_roles entry."""
    head, *rest = text.split(",")
    role, replicas = key_value(head, "--role")
    entry: dict[str, Any] = {"role": role, "replicas": _number(replicas)}
    resources: dict[str, Any] = {}
    for part in rest:
        key, value = key_value(part, "--role")
        if key == "image":
            entry["image"] = value
        elif key in ("cpu", "mem", "gpu"):
            resources[key] = value if key == "mem" else _number(value)
        else:
            raise UsageError(f"--role: unknown key {key!r} in {text!r} (image, cpu, mem, gpu)")
    if resources:
        entry["resources"] = resources
    return entry


def read_key(text: str) -> str:
    """An OpenSSH public key line, given as is or as the path of a .pub file."""
    path = os.path.expanduser(text)
    if os.path.isfile(path):
        if not path.endswith(".pub"):
            raise UsageError(f"--authorized-key: {text} is not a .pub file (never a private key)")
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    return text


def create_spec(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :func:`api.create_session` from the parsed options."""
    resources = {
        key: value
        for key, value in (("cpu", args.cpu), ("mem", args.mem), ("gpu", args.gpu))
        if value is not None
    }
    env = dict(key_value(item, "--env") for item in args.env or [])
    return {
        "mode": args.mode,
        "image": args.image,
        "resource_group": args.resource_group,
        "resources": resources or None,
        "mounts": [parse_mount(m) for m in args.mount or []] or None,
        "env": env or None,
        "roles": [parse_role(r) for r in args.role or []] or None,
        "authorized_keys": [read_key(k) for k in args.authorized_key or []] or None,
        "wait_s": args.wait,
        "ssh_timeout_s": args.ssh_timeout,
        "network_mtu": args.mtu,
        "owner": args.owner,
        "lifetime_s": args.lifetime,
        "end_signal": args.signal,
        "queue": args.queue or None,
        "topology": args.topology,
        "topology_prefer_s": args.prefer,
    }


def add_create_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``session create`` (and ``session run``): session_create.yml's
    variables."""
    parser.add_argument("name", help="session name (1-32 of a-z, 0-9, '-')")
    parser.add_argument("-n", "--size", type=int, help="number of containers (session_size)")
    parser.add_argument("--mode", choices=["single-node", "multi-node"], help="session_mode")
    parser.add_argument("--image", help="image of every container (session_image)")
    parser.add_argument("-g", "--resource-group", help="session_resource_group")
    parser.add_argument("--cpu", type=_number, help="CPUs per container (session_resources)")
    parser.add_argument("--mem", help="memory per container, e.g. 512m, 2g")
    parser.add_argument("--gpu", type=_number, help="GPUs per container")
    parser.add_argument(
        "--mount", action="append", metavar="SRC:DST[:ro]", help="a data folder (repeatable)"
    )
    parser.add_argument(
        "--env", "-e", action="append", metavar="KEY=VALUE", help="environment (repeatable)"
    )
    parser.add_argument(
        "--role",
        action="append",
        metavar="ROLE=N[,image=I][,cpu=C][,mem=M][,gpu=G]",
        help="heterogeneous roles in order, the first is the master (session_roles)",
    )
    parser.add_argument(
        "--authorized-key",
        action="append",
        metavar="KEY|FILE.pub",
        help="a person's public key for SSH through the app proxy (session_authorized_keys)",
    )
    parser.add_argument(
        "--wait", type=float, metavar="SECONDS", help="wait this long for capacity when PENDING"
    )
    parser.add_argument(
        "--owner",
        help="who holds the session (session_owner; default: the user running this); "
        "bai_session_policies limit what one owner holds",
    )
    parser.add_argument(
        "--lifetime",
        type=int,
        metavar="SECONDS",
        help="end the session this long after it was placed (session_lifetime_s; "
        "session reconcile ends it)",
    )
    parser.add_argument(
        "--signal",
        metavar="SIG@SECONDS",
        help="send SIG (USR1, TERM, ...) to every member that long before the lifetime "
        "ends, e.g. USR1@300 (session_end_signal)",
    )
    parser.add_argument(
        "--queue",
        action="store_true",
        help="when it does not fit now, queue it (PENDING) and return; it starts in "
        "queue order (by priority; submission order among one owner's sessions) when a "
        "scheduler pass finds room (session_queue)",
    )
    parser.add_argument(
        "--topology",
        metavar="LEVEL",
        help="run every member inside one domain of this topology level, e.g. rack, or "
        "wait until one has room (session_topology; the inventory's bai_topology_levels)",
    )
    parser.add_argument(
        "--prefer",
        type=int,
        metavar="SECONDS",
        help="with --topology and --queue: wait this long in the queue for one domain, "
        "then widen to the level above, one level per further wait, at last to none "
        "(session_topology_prefer_s; capped by the inventory's bai_topology_max_prefer_s)",
    )
    parser.add_argument("--ssh-timeout", type=int, metavar="SECONDS", help="per-container sshd")
    parser.add_argument("--mtu", type=int, help="session network MTU")
