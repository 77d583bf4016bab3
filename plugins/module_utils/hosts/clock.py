"""Time on the cluster's hosts (role preflight): is a time sync service keeping a host's
clock, and how far is it from the controller's.

The session modules never compare two hosts' clocks (docs/placement.md): the ledger
times everything by its own host's clock. Clocks still matter to people (logs, lifetimes,
TLS), so preflight checks that each host keeps time and reports its offset.

Pure: the module bai_clock reads the host (timedatectl, /proc) and hands the answers here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# Processes that keep a clock in sync (their /proc/PID/comm, 15 characters at most).
SYNC_DAEMONS = ("chronyd", "ntpd", "systemd-timesyn", "openntpd", "ptp4l", "phc2sys", "timemaster")
# What to install where none runs (Debian and its kin; others have the same packages).
FIX = "install and start a time sync service (apt-get install chrony, or systemd-timesyncd)"


def parse_timedatectl(text: str) -> dict[str, bool | None]:
    """``timedatectl show -p NTP -p NTPSynchronized`` -> {ntp, synchronized} (None: not
    said)."""
    values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

    def flag(key: str) -> bool | None:
        value = values.get(key, "").strip().lower()
        return {"yes": True, "no": False}.get(value)

    return {"ntp": flag("NTP"), "synchronized": flag("NTPSynchronized")}


def sync_daemons(comms: Iterable[str]) -> list[str]:
    """The time sync daemons among a host's process names."""
    return sorted({c.strip() for c in comms if c.strip() in SYNC_DAEMONS})


def assess(facts: Mapping[str, Any], offset: float, max_offset: float) -> dict[str, Any]:
    """Judge a host's clock: ``facts`` from bai_clock (``daemons``, ``synchronized``,
    ``ntp``, ``container``), ``offset`` (host minus controller, seconds). Returns
    ``problem`` (why preflight stops, or None), ``warning`` (or None) and ``how`` (what
    keeps the clock, for the report)."""
    daemons = list(facts.get("daemons") or [])
    synchronized = facts.get("synchronized")
    problem = warning = None
    if synchronized:
        how = "synchronized" + (f" ({', '.join(daemons)})" if daemons else "")
    elif daemons or facts.get("ntp"):
        how = f"kept by {', '.join(daemons) or 'the NTP service'}"
        if synchronized is False:
            warning = f"{how}, but not synchronized yet"
    elif facts.get("container"):
        # A container has no clock of its own: it reads its host's kernel clock.
        how = "the container host's clock (keep time sync on that host)"
    else:
        how = "not kept: no time sync service runs"
        problem = f"no time sync service runs (none of {', '.join(SYNC_DAEMONS)}); {FIX}"
    if abs(offset) > max_offset:
        off = f"its clock is {offset:+.1f} s off the controller's (at most {max_offset:g} s)"
        problem = f"{problem}; {off}" if problem else f"{off}; {FIX}, on both"
    return {"problem": problem, "warning": warning, "how": how}
