"""The session spec: defaults, limits and ``normalize_spec`` (raw user input to a
validated ``SessionSpec``), the kernel order and the spec hash used for idempotency.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Mapping
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.common.parse import (
    parse_count,
    reject_unknown,
    require_list,
    require_mapping,
    type_name,
)
from ansible_collections.bai.cluster.plugins.module_utils.session import apps
from ansible_collections.bai.cluster.plugins.module_utils.session.env import (
    DIST_MASTER_PORT_VAR,
    GPU_ENV_VARS,
    master_port,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.kinds import (
    TYPE_BATCH,
    TYPE_INTERACTIVE,
    check_command,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.limits import (
    LIMITS,
    SIZE,
    check_number,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.model import (
    MODE_SINGLE,
    MODES,
    Kernel,
    Mount,
    Resources,
    RoleSpec,
    SessionSpec,
    format_cpu,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.mounts import destination_error
from ansible_collections.bai.cluster.plugins.module_utils.session.naming import parse_session_name
from ansible_collections.bai.cluster.plugins.module_utils.session.resources import parse_resources
from ansible_collections.bai.cluster.plugins.module_utils.session.restart_policy import (
    parse_preemptible,
    parse_restart_policy,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.signal_names import (
    parse_end_signal,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.topology_request import (
    parse_prefer,
    parse_topology,
)

DEFAULT_IMAGE = "bai/session:latest"
SSH_PORT = 2200
DEFAULT_RESOURCE_GROUP = "default"
MAX_SIZE = int(SIZE.high)
# The user's environment (session_env): Linux refuses one environment string over
# 128 KiB and all of them together over a quarter of the stack limit, and sshd passes at
# most 1000 variables to a login; these limits stay well inside all three.
MAX_ENV_VARS = 256
MAX_ENV_VALUE_BYTES = 32 * 1024
MAX_ENV_BYTES = 128 * 1024
_ROLE_RE = re.compile(r"^[a-z][a-z0-9]{0,15}$")
_ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")
_GROUP_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# The request fields, as normalize_spec reads them.
SPEC_KEYS = (
    "name",
    "size",
    "mode",
    "image",
    "resource_group",
    "env",
    "resources",
    "mounts",
    "roles",
    "type",
    "command",
    "owner",
    "lifetime_s",
    "end_signal",
    "restarts",
    "restart_on",
    "preemptible",
    "apps",
    "topology",
    "topology_prefer_s",
)
# Given, but not part of the hash: who holds a session and how long it may run are not
# what it is, so a rerun by anyone, with any lifetime, matches the session.
UNHASHED_KEYS = (
    "owner",
    "lifetime_s",
    "end_signal",
    "restarts",
    "restart_on",
    "preemptible",
    "topology",
    "topology_prefer_s",
)
_ROLE_KEYS = ("role", "replicas", "image", "resources")
_MOUNT_KEYS = ("src", "dst", "readonly")


# Owners are user names (the controller's login by default): what a Docker label and a
# person's account name both allow.
_OWNER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$")


def check_owner(value: Any, field_name: str = "session_owner") -> str:
    """An owner's name as given, or SpecError saying what a name may hold."""
    if not isinstance(value, str) or not _OWNER_RE.match(value):
        raise SpecError(
            f"{field_name}: got {value!r}; an owner is 1 to 64 letters, digits, '_', '.', "
            f"'@' or '-', not starting with '.', '@' or '-'"
        )
    return value


def normalize_spec(raw: Mapping[str, Any]) -> SessionSpec:
    """Validate the playbook's session variables and return a ``SessionSpec``.

    Keys: name (required), size, mode, image, resource_group, env, resources, mounts,
    roles, type (interactive or batch), command (a batch session's), owner (who holds
    it, module_utils/scheduling/queue/policies.py), lifetime_s (seconds it may run, 0: no
    limit), end_signal (SIG@SECONDS: that signal that long before the lifetime ends),
    restarts and restart_on (a batch session's gang restarts: session/restart_policy.py),
    preemptible (it may be stopped for a higher priority, and comes back by a restart),
    topology (the level, e.g. rack, inside one domain of which all its members run) and
    topology_prefer_s (how long it waits in the queue for one before widening).
    A key whose value is None counts as absent, so playbooks can pass optional variables
    through unconditionally. ``size`` is required unless ``roles`` is given; if both are
    given they must agree.
    """
    raw = require_mapping(raw, "session")
    reject_unknown(raw, SPEC_KEYS, "session")
    given = {key: value for key, value in raw.items() if value is not None}
    name = parse_session_name(given.get("name"))
    mode = _parse_mode(given.get("mode", MODE_SINGLE))
    group = _parse_group(given.get("resource_group", DEFAULT_RESOURCE_GROUP))
    env = _parse_env(given.get("env", {}))
    mounts = _parse_mounts(given.get("mounts", []))
    image = _parse_image(given.get("image", DEFAULT_IMAGE), "image")
    resources = parse_resources(given.get("resources"))
    size = _parse_size(given["size"], "size") if "size" in given else None
    if "roles" in given:
        roles = _parse_roles(given["roles"], image, resources)
        _check_size_matches(size, roles)
    elif size is None:
        raise SpecError("size: required (a whole number 1..64) unless roles is given")
    else:
        roles = _default_roles(size, image, resources)
    session_type = str(given.get("type", TYPE_INTERACTIVE))
    command = check_command(given.get("command"), session_type)
    owner = check_owner(given["owner"]) if "owner" in given else ""
    lifetime = parse_count(given.get("lifetime_s", 0), "lifetime_s", 0)
    check_number("lifetime_s", lifetime, LIMITS["session_lifetime_s"])
    end_signal = parse_end_signal(given["end_signal"]) if given.get("end_signal") else ""
    restarts, restart_on = parse_restart_policy(given, session_type)
    preemptible = parse_preemptible(given, session_type, restarts)
    declared = apps.parse_declared(given.get("apps"))
    topology = parse_topology(given.get("topology"))
    if declared and session_type == TYPE_BATCH:
        raise SpecError("apps: a batch session has no apps (they are for interactive sessions)")
    spec = SessionSpec(
        name,
        mode,
        group,
        roles,
        env,
        mounts,
        session_type,
        command,
        owner,
        lifetime,
        end_signal,
        restarts,
        restart_on,
        preemptible,
        declared,
        topology,
        parse_prefer(given.get("topology_prefer_s"), topology),
    )
    _check_total_size(spec)
    _check_unique_hostnames(spec)
    _check_env_port(spec)
    return spec


def _parse_mode(value: Any) -> str:
    if value not in MODES:
        raise SpecError(f"mode: got {value!r}; allowed: {', '.join(MODES)}")
    return str(value)


def _parse_image(value: Any, field_name: str) -> str:
    if not isinstance(value, str) or not _IMAGE_RE.match(value):
        raise SpecError(
            f"{field_name}: got {value!r}; expected a Docker image reference such as "
            f"{DEFAULT_IMAGE!r} (no spaces)"
        )
    return value


def _parse_group(value: Any) -> str:
    if not isinstance(value, str) or not _GROUP_RE.match(value):
        raise SpecError(
            f"resource_group: got {value!r}; expected 1-64 characters of letters, "
            f"digits, '_', '.', '-', starting with a letter or digit"
        )
    return value


def _parse_size(value: Any, field_name: str) -> int:
    size = parse_count(value, field_name, minimum=1)
    if size > MAX_SIZE:
        raise SpecError(f"{field_name}: got {size}; at most {MAX_SIZE} containers")
    return size


def _default_roles(size: int, image: str, resources: Resources) -> tuple[RoleSpec, ...]:
    """Homogeneous session: ``main`` x1 plus ``sub`` x(size-1) (none when size is 1)."""
    roles = [RoleSpec("main", 1, image, resources)]
    if size > 1:
        roles.append(RoleSpec("sub", size - 1, image, resources))
    return tuple(roles)


def _parse_roles(value: Any, image: str, resources: Resources) -> tuple[RoleSpec, ...]:
    items = require_list(value, "roles")
    if not items:
        raise SpecError("roles: empty; list at least one role, the first is the master")
    roles = tuple(
        _parse_role(item, f"roles[{i}]", image, resources) for i, item in enumerate(items)
    )
    names = [role.role for role in roles]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise SpecError(f"roles: role name(s) used more than once: {', '.join(duplicates)}")
    return roles


def _parse_role(item: Any, where: str, image: str, resources: Resources) -> RoleSpec:
    item = require_mapping(item, where)
    reject_unknown(item, _ROLE_KEYS, where)
    name = item.get("role")
    if not isinstance(name, str) or not _ROLE_RE.match(name):
        raise SpecError(
            f"{where}.role: got {name!r}; a role name is 1-16 lowercase letters and "
            f"digits starting with a letter (hostnames are <role><idx>)"
        )
    if item.get("replicas") is None:
        raise SpecError(f"{where}.replicas: required (a whole number >= 1)")
    replicas = _parse_size(item["replicas"], f"{where}.replicas")
    role_image = image
    if item.get("image") is not None:
        role_image = _parse_image(item["image"], f"{where}.image")
    role_resources = parse_resources(item.get("resources"), resources, f"{where}.resources")
    return RoleSpec(name, replicas, role_image, role_resources)


def _check_size_matches(size: int | None, roles: tuple[RoleSpec, ...]) -> None:
    total = sum(role.replicas for role in roles)
    if size is not None and size != total:
        counts = ", ".join(f"{role.role}:{role.replicas}" for role in roles)
        raise SpecError(
            f"size: got {size} but roles add up to {total} containers ({counts}); "
            f"drop size or make it equal the sum of replicas"
        )


def _check_total_size(spec: SessionSpec) -> None:
    if spec.size > MAX_SIZE:
        raise SpecError(f"roles: {spec.size} containers in total; at most {MAX_SIZE} per session")


def _check_unique_hostnames(spec: SessionSpec) -> None:
    """Role names may end in digits, so 'sub' x11 and 'sub1' x1 both make 'sub11'."""
    seen: dict[str, str] = {}
    for role in spec.roles:
        for idx in range(1, role.replicas + 1):
            host = f"{role.role}{idx}"
            if host in seen:
                raise SpecError(
                    f"roles: hostname {host!r} would be made by both role "
                    f"{seen[host]!r} and role {role.role!r}; rename one of them"
                )
            seen[host] = role.role


def _check_env_port(spec: SessionSpec) -> None:
    """Fail early if the user's rendezvous port leaves no room for TF_CONFIG's ports."""
    env = spec.env_dict
    if DIST_MASTER_PORT_VAR in env:
        master_port(env, {}, spec.size)


def _parse_env(value: Any) -> tuple[tuple[str, str], ...]:
    env = require_mapping(value, "env")
    if len(env) > MAX_ENV_VARS:
        raise SpecError(f"env: {len(env)} variables; at most {MAX_ENV_VARS} per session")
    pairs = []
    for key, val in env.items():
        _check_env_key(key)
        pairs.append((key, _check_env_value(key, val)))
    total = sum(len(f"{key}={val}".encode()) for key, val in pairs)
    if total > MAX_ENV_BYTES:
        raise SpecError(
            f"env: {total} bytes in all (KEY=VALUE); at most {MAX_ENV_BYTES} per session "
            f"(pass larger data through a mounted file)"
        )
    return tuple(sorted(pairs))


def _check_env_key(key: Any) -> None:
    if not isinstance(key, str) or not _ENV_KEY_RE.match(key):
        raise SpecError(
            f"env: key {key!r} is not a valid variable name; use letters, digits and "
            f"'_', not starting with a digit"
        )
    if key.startswith("BACKENDAI_") and key != DIST_MASTER_PORT_VAR:
        raise SpecError(
            f"env.{key}: BACKENDAI_* variables are set by the toolkit to describe the "
            f"session and cannot be given (only {DIST_MASTER_PORT_VAR} is allowed)"
        )
    if key in GPU_ENV_VARS:
        raise SpecError(
            f"env.{key}: set by the toolkit to the number of GPUs each container is "
            f"given; ask for GPUs with resources.gpu instead"
        )


def _check_env_value(key: str, value: Any) -> str:
    if isinstance(value, (bool, int, float)):
        raise SpecError(
            f"env.{key}: got {type_name(value)} {value!r}; environment values are strings, "
            f'quote it (e.g. "{json.dumps(value)}")'
        )
    if not isinstance(value, str):
        raise SpecError(f"env.{key}: got {type_name(value)} {value!r}; expected a string")
    if "\0" in value or "\n" in value or "\r" in value:
        raise SpecError(f"env.{key}: value contains a NUL or newline, which is not allowed")
    size = len(value.encode())
    if size > MAX_ENV_VALUE_BYTES:
        raise SpecError(
            f"env.{key}: value of {size} bytes; at most {MAX_ENV_VALUE_BYTES} (pass larger "
            f"data through a mounted file)"
        )
    return value


def _parse_mounts(value: Any) -> tuple[Mount, ...]:
    items = require_list(value, "mounts")
    mounts = tuple(_parse_mount(item, f"mounts[{i}]") for i, item in enumerate(items))
    dsts = [mount.dst for mount in mounts]
    duplicates = sorted({dst for dst in dsts if dsts.count(dst) > 1})
    if duplicates:
        raise SpecError(f"mounts: dst used more than once: {', '.join(duplicates)}")
    return mounts


def _parse_mount(item: Any, where: str) -> Mount:
    item = require_mapping(item, where)
    reject_unknown(item, _MOUNT_KEYS, where)
    readonly = item.get("readonly", False)
    if not isinstance(readonly, bool):
        raise SpecError(f"{where}.readonly: got {readonly!r}; expected true or false")
    src = _parse_path(item.get("src"), f"{where}.src")
    dst = _parse_path(item.get("dst"), f"{where}.dst")
    problem = destination_error(dst, f"{where}.dst")
    if problem:
        raise SpecError(problem)
    return Mount(src, dst, readonly)


def _parse_path(value: Any, where: str) -> str:
    """An absolute path without '..', ':' or ',' (the separators of Docker's mount
    syntax), normalised so '/data/' and '/data' compare equal."""
    if not isinstance(value, str) or not value.startswith("/"):
        raise SpecError(f"{where}: got {value!r}; expected an absolute path like /data")
    if ".." in value.split("/"):
        raise SpecError(f"{where}: got {value!r}; '..' is not allowed in mount paths")
    if any(ch in value for ch in ":,\0\n\r"):
        raise SpecError(f"{where}: got {value!r}; ':', ',' and newlines are not allowed")
    return "/" + posixpath.normpath(value).lstrip("/")


def expand_kernels(spec: SessionSpec) -> list[Kernel]:
    """Kernel order (docs/environment.md): roles in order, each role's containers by idx."""
    kernels: list[Kernel] = []
    for role in spec.roles:
        for idx in range(1, role.replicas + 1):
            kernels.append(
                Kernel(
                    role=role.role,
                    idx=idx,
                    hostname=f"{role.role}{idx}",
                    rank=len(kernels),
                    image=role.image,
                    resources=role.resources,
                )
            )
    return kernels


def spec_canonical(spec: SessionSpec) -> dict[str, Any]:
    """JSON-ready form of the *requested* spec (not the placement): env sorted by key,
    roles and mounts in the user's order (their order changes the session). A batch
    session's type and command are part of it; an interactive session's hash is as it was
    before batch sessions existed. The owner and the lifetime are given, but left out of
    the hash (UNHASHED_KEYS)."""
    canonical: dict[str, Any] = {
        "name": spec.name,
        "mode": spec.mode,
        "resource_group": spec.resource_group,
        "roles": [
            {
                "role": role.role,
                "replicas": role.replicas,
                "image": role.image,
                "resources": _resources_canonical(role.resources),
            }
            for role in spec.roles
        ],
        "env": dict(sorted(spec.env)),
        "mounts": [{"src": m.src, "dst": m.dst, "readonly": m.readonly} for m in spec.mounts],
    }
    if spec.type == TYPE_BATCH:
        canonical.update(type=spec.type, command=spec.command)
    if spec.owner:
        canonical["owner"] = spec.owner
    if spec.lifetime_s:
        canonical["lifetime_s"] = spec.lifetime_s
    if spec.end_signal:
        canonical["end_signal"] = spec.end_signal
    if spec.restarts:
        canonical["restarts"] = spec.restarts
    if spec.restart_on:
        canonical["restart_on"] = list(spec.restart_on)
    if spec.preemptible:
        canonical["preemptible"] = True
    # Only when declared: sessions without apps keep their hash.
    if spec.apps:
        canonical["apps"] = apps.canonical(spec.apps)
    if spec.topology:
        canonical["topology"] = spec.topology
    if spec.topology_prefer_s:
        canonical["topology_prefer_s"] = spec.topology_prefer_s
    return canonical


def _resources_canonical(resources: Resources) -> dict[str, Any]:
    canonical: dict[str, Any] = {
        "cpu": format_cpu(resources.cpu),
        "mem": resources.mem,
        "gpu": resources.gpu,
    }
    # Only when given: requests made before shm existed keep their hash.
    if resources.shm is not None:
        canonical["shm"] = resources.shm
    return canonical


def spec_hash(spec: SessionSpec) -> str:
    """First 16 hex chars of sha256 over the canonical JSON; stored in LABEL_SPEC_HASH
    so a re-run can tell "same session" from "same name, different spec"."""
    canonical = spec_canonical(spec)
    for key in UNHASHED_KEYS:
        canonical.pop(key, None)
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def describe_spec(spec: SessionSpec) -> str:
    """One line: size, roles, per-role resources and images, mode, resource group."""
    roles = "; ".join(
        f"{r.role} x{r.replicas} ({r.resources.describe()}, image {r.image})" for r in spec.roles
    )
    return (
        f"{spec.size} container(s): {roles}; mode {spec.mode}; resource group "
        f"{spec.resource_group}; {len(spec.env)} env var(s); {len(spec.mounts)} mount(s)"
        + ("; batch" if spec.type == TYPE_BATCH else "")
    )
