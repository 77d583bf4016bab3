"""An agent's own health, the agent-side half of the health gate (containers/gate.py
checks a gang's links from inside its members; this checks the agent that would hold
one, with no session on it). Each check gives a :class:`Finding`; none raises for what it
found, only a bad request does (SpecError).

    engine   the engine answers, and in a swarm its node is active
    overlay  full-size packets with don't-fragment set reach each swarm manager from the
             agent (the path a session overlay's VXLAN frames take; a wrong MTU on it
             passes small packets and hangs a first all-reduce)
    data     each data folder exists (and an NFS export's mount point is a mount)
    devices  the GPUs the agent offers are there and usable
    disk     the engine's data root has at least the floor free

The module (bai_agent_health) gathers what each needs; the verdicts are here, apart
from the host, so the unit tests give them any answers.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

CHECKS = ("engine", "overlay", "data", "devices", "disk")
DEFAULT_DISK_FLOOR = 10 * 1024**3
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_RTT = re.compile(r"time=([0-9.]+)")


@dataclass(frozen=True)
class Finding:
    check: str
    status: str  # ok, FAILED, skip
    detail: str = ""


def size_bytes(value: Any) -> int:
    """``10g``, ``512m``, ``1.5t`` or a number of bytes; ValueError otherwise."""
    found = _SIZE.match(str(value))
    if not found:
        raise ValueError(f"not a size: {value!r} (a number of bytes, or such as 10g, 512m)")
    return int(float(found.group(1)) * _UNITS[found.group(2).lower()])


def gib(n: float) -> str:
    return f"{n / 1024**3:.1f} GiB"


def engine(info: Mapping[str, Any] | None, error: str = "") -> Finding:
    """From the engine's ``info`` (None: it did not answer, ``error`` says how)."""
    if info is None:
        return Finding("engine", "FAILED", f"the Docker engine does not answer: {error}")
    state = (info.get("Swarm") or {}).get("LocalNodeState") or "inactive"
    if state in ("active", "inactive"):
        where = "its swarm node is active" if state == "active" else "not in a swarm"
        return Finding("engine", "ok", f"answers ({info.get('ServerVersion', '?')}); {where}")
    return Finding("engine", "FAILED", f"answers, but its swarm node is {state}")


def managers(info: Mapping[str, Any] | None) -> list[str]:
    """The swarm managers' addresses this engine knows (without the port)."""
    remote = ((info or {}).get("Swarm") or {}).get("RemoteManagers") or []
    return sorted({str(m.get("Addr", "")).rsplit(":", 1)[0] for m in remote} - {""})


def overlay(
    addresses: Sequence[str],
    mtu_to: Callable[[str], int],
    ping: Callable[[str, int], str | None],
    own: Iterable[str] = (),
) -> Finding:
    """``ping(address, size)`` -> the round trip in ms of a don't-fragment ping carrying
    ``size`` bytes, or None; ``mtu_to(address)`` the MTU of the route there. This agent's
    own address (a manager that is also an agent) is left out."""
    targets = [a for a in addresses if a not in set(own)]
    if not targets:
        return Finding("overlay", "skip", "no swarm manager to reach (not in a swarm)")
    bad, good = [], []
    for address in targets:
        mtu = mtu_to(address)
        rtt = ping(address, mtu - 28)
        if rtt is None:
            bad.append(f"{address} ({mtu} bytes)")
        else:
            good.append(f"{address} {mtu} bytes rtt_ms={rtt}")
    if bad:
        return Finding(
            "overlay",
            "FAILED",
            "no full-size packet (don't fragment) reaches manager " + ", ".join(bad),
        )
    return Finding("overlay", "ok", "; ".join(good))


def rtt_of(ping_output: str) -> str | None:
    found = _RTT.search(ping_output)
    return found.group(1) if found else None


def data(
    roots: Sequence[str],
    mounts: Sequence[str] = (),
    isdir: Callable[[str], bool] = os.path.isdir,
    ismount: Callable[[str], bool] = os.path.ismount,
) -> Finding:
    """Each data folder (``roots``) is there; each of ``mounts`` (an NFS export's mount
    point) is a mount, not the empty folder under it."""
    folders = list(dict.fromkeys([*roots, *mounts]))
    if not folders:
        return Finding("data", "skip", "no data folder")
    bad = [f"{r} is missing" for r in folders if not isdir(r)]
    bad += [f"{r} is not mounted" for r in mounts if isdir(r) and not ismount(r)]
    if bad:
        return Finding("data", "FAILED", "; ".join(bad))
    said = ", ".join(folders)
    return Finding("data", "ok", said + (f" ({', '.join(mounts)} mounted)" if mounts else ""))


def devices(facts: Mapping[str, Any] | None, declared: int) -> Finding:
    """From gpu facts (containers' facts.detect; None: detection is off) and the GPU count
    the inventory declares for the agent (0: none declared)."""
    if facts is None:
        return Finding("devices", "skip", "GPU detection is off for this agent")
    status, count = facts.get("status", "ok"), int(facts.get("count") or 0)
    if status != "ok":
        return Finding("devices", "FAILED", f"{status}: {facts.get('problem') or ''}".strip())
    if count < declared:
        return Finding("devices", "FAILED", f"declares {declared} GPU(s), {count} found")
    if count == 0:
        return Finding("devices", "ok", "no GPU (none declared)")
    return Finding("devices", "ok", f"{count} {facts.get('vendor', '')} GPU(s)")


def disk(path: str, floor: int, statvfs: Callable[[str], Any] = os.statvfs) -> Finding:
    try:
        st = statvfs(path)
    except OSError as exc:
        return Finding("disk", "FAILED", f"cannot read {path}: {exc.strerror or exc}")
    free = st.f_bavail * st.f_frsize
    said = f"{gib(free)} free in {path} (floor {gib(floor)})"
    return Finding("disk", "ok" if free >= floor else "FAILED", said)


def report(findings: Iterable[Finding]) -> dict[str, Any]:
    """The module's result: ``healthy``, ``failed_checks`` (names) and ``checks`` (in
    order; not ``failed``, which Ansible reads as the task's own failure)."""
    rows = [asdict(f) for f in findings]
    failed = [r["check"] for r in rows if r["status"] == "FAILED"]
    return {"healthy": not failed, "failed_checks": failed, "checks": rows}


def summary(name: str, result: Mapping[str, Any]) -> str:
    """``agent2: disk: 1.2 GiB free in /var/lib/docker (floor 10.0 GiB)`` for each failed
    check, or ``agent2: healthy (5 checks)``."""
    rows = result.get("checks") or []
    bad = [r for r in rows if r.get("status") == "FAILED"]
    if not bad:
        return f"{name}: healthy ({len(rows)} checks)"
    return "; ".join(f"{name}: {r['check']}: {r.get('detail', '')}" for r in bad)
