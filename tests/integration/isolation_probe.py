"""Probes between sessions while an engine makes and removes networks: the churn that
opened Docker 20.10's isolation hole (its FORWARD jump to DOCKER-ISOLATION-STAGE-1 is
deleted and inserted again on every `docker network create`).

The prober runs in one session's container, as an attacker would: TCP connects to
another session's sshd (port 2200) from several threads at once, a short timeout each, so
that some connect is always in flight, and UDP datagrams to a sink in that container; and
the same to its own sibling, the positive control. Only a timeout counts as dropped: an
answer of any kind (a connection, a refusal) and any datagram the foreign sink receives are
leaks. Everything runs through ``docker`` argv prefixes, so one helper serves this
machine's engine (``["docker"]``) and a lab node's (``["docker", "exec", NODE, "docker"]``).
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from typing import Any

SSH_PORT = 2200
SINK_PORT = 2300  # UDP, nothing of the toolkit listens there
STOP = "/tmp/bai-probe-stop"
OUT = "/tmp/bai-probe.txt"  # the prober's counts
SUNK = "/tmp/bai-sink.txt"  # a sink's datagrams per source

# Runs in the prober's container (the session image's python3-minimal has no json):
# python3 -c PROBER OUT TIMEOUT NAME=ADDR=KIND...; writes "NAME COUNTER N" lines.
PROBER = r"""
import os, socket, sys, threading, time
out, timeout = sys.argv[1], float(sys.argv[2])
targets = [dict(zip(("name", "addr", "kind"), arg.split("="))) for arg in sys.argv[3:]]
STOP, SSH, SINK = "/tmp/bai-probe-stop", 2200, 2300
counts = {t["name"]: {"open": 0, "refused": 0, "timeout": 0, "udp_sent": 0} for t in targets}
lock = threading.Lock()

def tcp(t, pause):
    while not os.path.exists(STOP):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect((t["addr"], SSH))
            verdict = "open"
        except socket.timeout:
            verdict = "timeout"
        except OSError:
            verdict = "refused"
        finally:
            s.close()
        with lock:
            counts[t["name"]][verdict] += 1
        time.sleep(pause)

def udp(t):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    while not os.path.exists(STOP):
        try:
            s.sendto(b"bai-probe", (t["addr"], SINK))
            with lock:
                counts[t["name"]]["udp_sent"] += 1
        except OSError:
            pass
        time.sleep(0.002)

threads = []
for t in targets:
    # The sibling at a gentle pace (its sshd forks for every connection); a foreign target
    # from eight threads, back to back: some connect is always waiting for an answer.
    jobs = [(tcp, (t, 0.05))] if t["kind"] == "sibling" else [(tcp, (t, 0.0))] * 8
    for fn, args in jobs + [(udp, (t,))]:
        threads.append(threading.Thread(target=fn, args=args, daemon=True))
for th in threads:
    th.start()
for th in threads:
    th.join()
with open(out + ".tmp", "w") as f:
    for name, row in counts.items():
        for key, n in row.items():
            f.write(f"{name} {key} {n}\n")
os.rename(out + ".tmp", out)
"""

# Runs in a target container: python3 -c SINK OUT; writes "ADDRESS N" lines, the
# datagrams each source sent.
SINK = r"""
import os, socket, sys
out = sys.argv[1]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 2300))
s.settimeout(0.2)
got = {}
with open(out + ".ready", "w"):
    pass
while not os.path.exists("/tmp/bai-probe-stop"):
    try:
        _data, (addr, _port) = s.recvfrom(64)
    except socket.timeout:
        continue
    got[addr] = got.get(addr, 0) + 1
with open(out + ".tmp", "w") as f:
    f.write("".join(f"{a} {n}\n" for a, n in got.items()))
os.rename(out + ".tmp", out)
"""


@dataclass
class Engine:
    """``docker`` on some engine: this machine's (``["docker"]``) or a lab node's."""

    docker: list[str]

    def run(self, *argv: str, check: bool = True, timeout: float = 120) -> str:
        done = subprocess.run(
            [*self.docker, *argv], capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{argv}: exit {done.returncode}: {done.stderr or done.stdout}")
        return done.stdout.strip()

    def in_container(self, container: str, *argv: str, detach: bool = False, **kw: Any) -> str:
        return self.run("exec", *(["-d"] if detach else []), container, *argv, **kw)

    def address(self, container: str) -> str:
        """The container's address on its session network (its first network)."""
        nets = json.loads(
            self.run("inspect", "-f", "{{json .NetworkSettings.Networks}}", container)
        )
        return next(iter(nets.values()))["IPAddress"]


@dataclass
class Outcome:
    tries: int  # TCP connects to the foreign targets
    leaks: int  # connects answered (open or refused) + datagrams the foreign sinks got
    udp_sent: int
    udp_leaked: int
    control_tries: int
    control_open: int
    control_udp: int  # datagrams the sibling's sink got
    networks: int  # networks made (and removed) while the prober ran
    seconds: float
    detail: dict

    def line(self) -> str:
        return (
            f"{self.tries} TCP tries and {self.udp_sent} datagrams, {self.leaks} leaks "
            f"({self.udp_leaked} by UDP), while {self.networks} networks were made in "
            f"{self.seconds:.1f} s; control {self.control_open}/{self.control_tries} TCP, "
            f"{self.control_udp} datagrams"
        )


def churn_script(count: int, prefix: str) -> str:
    """Make and remove ``count`` throwaway networks, one after the other; print how many."""
    return (
        f"n=0; for i in $(seq 1 {count}); do "
        f"docker network create {prefix}$i >/dev/null 2>&1 && n=$((n+1)); "
        f"docker network rm {prefix}$i >/dev/null 2>&1; done; echo $n"
    )


def probe(
    engine: Engine,
    churn: list[str],
    prober: str,
    sibling: str,
    foreign: list[str],
    *,
    timeout: float = 0.1,
    where: dict[str, Engine] | None = None,
    addresses: dict[str, str] | None = None,
) -> Outcome:
    """From ``prober``, probe ``foreign`` containers and the ``sibling`` while ``churn``
    (an argv that makes and removes networks on the same engine, printing how many) runs;
    the counts once it ended. Containers live on ``engine`` unless ``where`` names another
    (a sibling across an overlay); each is tried at its session address unless
    ``addresses`` gives another (a container's docker_gwbridge address)."""
    where, addresses = where or {}, addresses or {}
    sinks = [sibling, *foreign]

    def on(name: str) -> Engine:
        return where.get(name, engine)

    for name in [prober, *sinks]:
        on(name).in_container(name, "rm", "-f", STOP, OUT, f"{SUNK}.ready", SUNK)
    for name in sinks:
        on(name).in_container(name, "python3", "-c", SINK, SUNK, detach=True)
    for name in sinks:
        _wait(lambda n=name: on(n).in_container(n, "ls", f"{SUNK}.ready", check=False))
    targets = [
        f"{name}={addresses.get(name) or on(name).address(name)}={kind}"
        for name, kind in [(sibling, "sibling"), *((f, "foreign") for f in foreign)]
    ]
    on(prober).in_container(
        prober, "python3", "-c", PROBER, OUT, str(timeout), *targets, detach=True
    )
    began = time.monotonic()
    made = subprocess.run(churn, capture_output=True, text=True, timeout=600, check=True)
    seconds = time.monotonic() - began
    for name in [prober, *sinks]:
        on(name).in_container(name, "touch", STOP)
    counts: dict[str, dict[str, int]] = {name: {} for name in sinks}
    for line in _wait(lambda: _read(on(prober), prober, OUT)).splitlines():
        name, key, n = line.split()
        counts[name][key] = int(n)
    sunk = {name: _lines(_wait(lambda n=name: _read(on(n), n, SUNK), empty=True)) for name in sinks}
    # From any source: a datagram that leaks between two bridges leaves masqueraded, with
    # the address of the bridge it left by. Nothing else sends to SINK_PORT.
    udp_leaked = sum(sum(sunk[f].values()) for f in foreign)
    tcp = [counts[f] for f in foreign]
    return Outcome(
        tries=sum(c["open"] + c["refused"] + c["timeout"] for c in tcp),
        leaks=sum(c["open"] + c["refused"] for c in tcp) + udp_leaked,
        udp_sent=sum(c["udp_sent"] for c in tcp),
        udp_leaked=udp_leaked,
        control_tries=sum(counts[sibling].values()) - counts[sibling]["udp_sent"],
        control_open=counts[sibling]["open"],
        control_udp=sum(sunk[sibling].values()),
        networks=int(made.stdout.strip().splitlines()[-1]),
        seconds=seconds,
        detail={"tcp": counts, "sinks": sunk},
    )


def _read(engine: Engine, container: str, path: str) -> str | None:
    """The file's text once it exists (the scripts rename it into place), else None."""
    if not engine.in_container(container, "ls", path, check=False):
        return None
    return engine.in_container(container, "cat", path)


def _lines(text: str) -> dict[str, int]:
    return {addr: int(n) for addr, n in (line.split() for line in text.splitlines())}


def _wait(read, seconds: float = 20, empty: bool = False) -> str:
    deadline = time.monotonic() + seconds
    while True:
        out = read()
        if out or (empty and out is not None):
            return out
        assert time.monotonic() < deadline, "the probe did not answer"
        time.sleep(0.2)
