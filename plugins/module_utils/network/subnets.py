"""Session subnets, taken from the toolkit's own pool (not Docker's default pools),
so session networks never collide with each other, the zones or the engines' pools.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError

DEFAULT_SUBNET_POOL = "10.224.0.0/12"
DEFAULT_SUBNET_PREFIX = 24


def free_subnets(
    pool: str,
    prefix: int,
    used: Iterable[str],
    *,
    skip: Iterable[str] = (),
) -> Iterator[str]:
    """The ``/prefix`` subnets of ``pool``, in order, that overlap none of ``used``
    (subnets of the engine's networks) and are not in ``skip`` (lost races)."""
    try:
        net = ipaddress.ip_network(pool, strict=True)
    except ValueError as exc:
        raise SpecError(f"subnet_pool: got {pool!r}; {exc}") from None
    if not isinstance(prefix, int) or not net.prefixlen <= prefix <= net.max_prefixlen - 2:
        raise SpecError(
            f"subnet_prefix: got {prefix!r}; expected {net.prefixlen}.."
            f"{net.max_prefixlen - 2} for pool {pool}"
        )
    taken = []
    for text in used:
        try:
            taken.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            continue
    taken = [t for t in taken if t.version == net.version and t.overlaps(net)]
    skipped = {str(ipaddress.ip_network(s, strict=False)) for s in skip}
    return (
        str(candidate)
        for candidate in net.subnets(new_prefix=prefix)
        if str(candidate) not in skipped and not any(candidate.overlaps(t) for t in taken)
    )


def pick_subnet(
    pool: str,
    prefix: int,
    used: Iterable[str],
    *,
    skip: Iterable[str] = (),
    spread: int = 1,
    rng: Any = None,
) -> str:
    """A free ``/prefix`` of ``pool`` (see ``free_subnets``): the first one, or with
    ``spread`` > 1 a random one of the first ``spread`` free ones (``rng.choice``), so
    creates racing each other after a collision do not keep picking the same subnet.
    Docker's default address pools run out near 30 bridge networks; session networks
    come from this pool instead."""
    used = list(used)
    candidates = list(itertools.islice(free_subnets(pool, prefix, used, skip=skip), spread))
    if not candidates:
        raise SpecError(
            f"subnet_pool {pool}: no free /{prefix} left (the engine's networks use "
            f"{len(used)} subnets); give a bigger pool or remove unused session networks"
        )
    if spread > 1 and rng is not None:
        return str(rng.choice(candidates))
    return candidates[0]
