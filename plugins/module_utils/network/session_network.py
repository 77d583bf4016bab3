"""A session's network on one Docker engine: made (bridge with a free subnet, or an
attachable overlay on a Swarm manager) and removed. Shared by bai_session_network and
bai_session_containers, which makes a single-agent session's bridge in the same call as
its containers (one round trip per agent)."""

from __future__ import annotations

import functools
import random
from typing import Any, Callable

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Failure
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_SESSION,
    LABEL_SESSION_ID,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    APIError,
    NotFound,
    engine_subnets,
    error_text,
    find_network,
)
from ansible_collections.bai.cluster.plugins.module_utils.network import isolation
from ansible_collections.bai.cluster.plugins.module_utils.network.subnets import (
    DEFAULT_SUBNET_POOL,
    DEFAULT_SUBNET_PREFIX,
    pick_subnet,
)
from ansible_collections.bai.cluster.plugins.module_utils.session.naming import network_name

SUBNET_ATTEMPTS = 32
# Docker's overlay driver gives containers its com.docker.network.driver.mtu option minus
# the VXLAN header (vxlanEncap in libnetwork's overlay driver).
VXLAN_OVERHEAD = 50


def describe(item: dict) -> dict:
    configs = (item.get("IPAM") or {}).get("Config") or []
    return {
        "name": item.get("Name"),
        "id": (item.get("Id") or "")[:12],
        "driver": item.get("Driver"),
        "subnet": configs[0].get("Subnet") if configs else None,
        "labels": item.get("Labels") or {},
    }


def present(api: Any, params: dict[str, Any], check_mode: bool = False) -> dict[str, Any]:
    """Make sure session ``params["session"]`` has its network ``params["name"]`` (the
    options of bai_session_network); {changed, network, removed}."""
    session, session_id = params["session"], params["session_id"]
    name = params.get("name") or network_name(session)
    labels = {**(params.get("labels") or {}), LABEL_SESSION: session, LABEL_SESSION_ID: session_id}
    changed = False
    current = find_network(api, name)
    if current is not None:
        found = current.get("Labels") or {}
        if found.get(LABEL_SESSION) != session:
            raise Failure(
                f"network {name} exists but is not a network of session {session} "
                f"(its labels: {found}); remove or rename it, the toolkit will not touch it"
            )
        if found.get(LABEL_SESSION_ID) == session_id:
            return {"changed": False, "network": describe(current), "removed": []}
        detail = api.inspect_network(current["Id"])
        if detail.get("Containers"):
            raise Failure(
                f"network {name} belongs to another instance of session {session} "
                f"(session id {found.get(LABEL_SESSION_ID)}) and still has containers; "
                f"destroy that session first"
            )
        changed = True
        if not check_mode:
            api.remove_network(current["Id"])
    if check_mode:
        return {
            "changed": True,
            "network": {"name": name, "id": None, "driver": params["driver"], "labels": labels},
            "removed": [],
        }
    created = create(api, params, name, labels)
    return {"changed": True, "network": describe(created), "removed": [name] if changed else []}


def create(api: Any, params: dict[str, Any], name: str, labels: dict[str, str]) -> dict[str, Any]:
    """Create the session's network ``name``: an attachable overlay, or a bridge on a
    free subnet; the network as the engine lists it."""
    options = {}
    if params.get("mtu"):
        # The option is the MTU the driver starts from: an overlay subtracts VXLAN's header.
        extra = VXLAN_OVERHEAD if params["driver"] == "overlay" else 0
        options["com.docker.network.driver.mtu"] = str(params["mtu"] + extra)
    # What both drivers' networks are made with.
    make = functools.partial(api.create_network, name, labels=labels, check_duplicate=True)
    if params["driver"] == "overlay":
        _create_overlay(make, name, options)
    else:
        raced = _create_bridge(api, make, params, name, options)
        if raced is not None:
            return raced
    return find_network(api, name) or {"Name": name}


def _create_overlay(make: Callable[..., Any], name: str, options: dict[str, str]) -> None:
    try:
        make(driver="overlay", attachable=True, options=options or None)
    except APIError as exc:
        text = error_text(exc)
        if "swarm" in text.lower():
            raise Failure(
                f"cannot create overlay network {name}: {text}; overlay networks are "
                f"created on a Docker Swarm manager (run site.yml so the docker_swarm "
                f"role sets up the Swarm)"
            ) from None
        raise


def _create_bridge(
    api: Any, make: Callable[..., Any], params: dict[str, Any], name: str, options: dict[str, str]
) -> dict[str, Any] | None:
    """Create the bridge on a free subnet; None once made, or the same session's
    network that a concurrent create made first."""
    import docker  # pylint: disable=import-outside-toplevel

    tried: list[str] = []
    for attempt in range(SUBNET_ATTEMPTS):
        # First try the lowest free subnet; after losing a race, a random one of the
        # next few, so that concurrent creates stop colliding.
        subnet = pick_subnet(
            params.get("subnet_pool") or DEFAULT_SUBNET_POOL,
            params.get("subnet_prefix") or DEFAULT_SUBNET_PREFIX,
            engine_subnets(api),
            skip=tried,
            spread=1 if attempt == 0 else 16,
            rng=random,
        )
        ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=subnet)])
        # An interface name the isolation table matches (roles/session_isolation).
        options[isolation.BRIDGE_NAME_OPTION] = isolation.bridge_name(params["session_id"])
        try:
            make(driver="bridge", ipam=ipam, options=options)
        except APIError as exc:
            text = error_text(exc).lower()
            if "overlap" in text:
                tried.append(subnet)  # lost a race for this subnet: take the next
                continue
            if "already exists" in text:
                raced = find_network(api, name)
                if (
                    raced
                    and (raced.get("Labels") or {}).get(LABEL_SESSION_ID) == params["session_id"]
                ):
                    return raced
            raise
        return None
    raise Failure(
        f"could not create network {name}: {SUBNET_ATTEMPTS} subnets of "
        f"{params.get('subnet_pool') or DEFAULT_SUBNET_POOL} were taken concurrently "
        f"({', '.join(tried)})"
    )


def absent(
    api: Any,
    session: str,
    name: str | None = None,
    check_mode: bool = False,
    local_only: bool = False,
) -> dict[str, Any]:
    """Remove every network of session ``session`` (by label, and ``name``); with
    ``local_only``, leave Swarm-scoped ones (an overlay, which a worker still lists
    while it detaches from it, is removed on a manager)."""
    name = name or network_name(session)
    found = {n["Id"]: n for n in api.networks(filters={"label": [f"{LABEL_SESSION}={session}"]})}
    named = find_network(api, name)
    if named and (named.get("Labels") or {}).get(LABEL_SESSION) == session:
        found[named["Id"]] = named
    if local_only:
        found = {k: v for k, v in found.items() if v.get("Scope") != "swarm"}
    removed = []
    for net_id, item in sorted(found.items(), key=lambda kv: kv[1].get("Name", "")):
        if not check_mode:
            try:
                api.remove_network(net_id)
            except APIError as exc:
                # NotFound is an APIError (and, without the SDK, both are the stand-in
                # DockerException): a network that is gone already is not an error.
                if isinstance(exc, NotFound):
                    continue
                raise Failure(
                    f"cannot remove network {item.get('Name')}: {error_text(exc)}; remove the "
                    f"session's containers first (bai_session_containers state=absent)"
                ) from None
        removed.append(item.get("Name"))
    return {"changed": bool(removed), "network": None, "removed": removed}
