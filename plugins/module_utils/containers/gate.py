"""The health gate: before a session is handed over (before a batch session's command
starts, before an interactive session is reported ready), main1 checks the gang across its
own links, from inside its members, all members at once (docs/sessions.md, "The health
gate"). It grows the SSH mesh check (mesh.py): that login is the gate's first check.

From main1 to each member, in parallel; in each member over that login:

    ssh     main1 logs in to the member as user work (the mesh check)
    dns     the member resolves every member's name to the address main1 resolves it to
    mtu     full-size packets with don't-fragment set, at the route's MTU: main1 -> member
            (the echo request) and member -> main1 (its reply), then member -> main1 again
            from the member (a wrong MTU on one path passes SSH and hangs a first all-reduce)
    tcp     the member opens a TCP connection back to main1 (a one-way block)
    stream  256 KiB each way over one SSH channel, timed (latency and throughput recorded)
    data    each data folder is mounted in the member, and the same: it reads the marker
            main1 wrote there (a read-only folder: mounted)
    clock   the member's clock within ``skew_s`` of main1's
    gpu     the member sees as many GPU devices as it was given (no fewer: one is not
            usable; no more: it could use another session's)
    hook    every executable in /etc/bai/gate.d of the image (or $BAI_GATE_DIR) exits 0:
            the operator's own checks

Each member is checked from main1 over the session network; checking every pair would
cost N^2 logins for what a star already shows: a link between two members that both
exchange full-size packets with main1 shares their agents' paths to main1's agent.

    CHECKS                  the checks, in order
    script(resolve_s)       the gate's bash, run in main1 as ``bash -c SCRIPT gate ARGS``
    argv(...)               that command line
    Result, read(...)       what its output says: each member's checks, failed or passed
    run_from(api, ...)      run it in main1; a Result
    check(share)            the gate of this agent's share's session: its report, or Failure
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Failure
from ansible_collections.bai.cluster.plugins.module_utils.containers.mesh import RESOLVE_S
from ansible_collections.bai.cluster.plugins.module_utils.containers.share import Share

CHECKS = ("ssh", "dns", "mtu", "tcp", "stream", "data", "clock", "gpu", "hook")
HOOK_DIR = "/etc/bai/gate.d"
DEFAULT_SKEW_S = 2.0
STREAM_BYTES = 1 << 18
# The checks of the gang's links. Failing only these, the second run waits until this
# long after the first began: a new overlay's endpoints reach the other agents by gossip,
# which lags on a busy engine (CI saw a gang with no path to sub1 for 20 s that the
# engines then set up), and a healthy gang must not be failed for it.
LINK_CHECKS = frozenset({"ssh", "dns", "mtu", "tcp", "stream"})
LINK_SETTLE_S = 20.0
# bai_session_containers' option ``gate``.
OPTION_SPEC: dict[str, Any] = {
    "type": "dict",
    "default": {},
    "options": {
        "checks": {
            "type": "list",
            "elements": "str",
            "choices": list(CHECKS),
            "default": list(CHECKS),
        },
        "skew_s": {"type": "float", "default": DEFAULT_SKEW_S},
    },
}

# Shell functions both sides use: whether a check is asked for, a member's address as
# main1 resolved it, the MTU of the route to an address, whether a folder is mounted.
HELPERS = r"""
on() { case ",$checks," in *",$1,"*) return 0 ;; esac; return 1; }
addr_of() {
  local i
  for ((i = 0; i < ${#peers[@]}; i += 2)); do
    [ "${peers[i]}" = "$1" ] && { echo "${peers[i + 1]}"; return; }
  done
}
# The MTU of the interface the route to an address leaves by (1500 when unknown).
mtu_to() {
  local route mtu=1500
  route=$(ip -o route get "$1" 2> /dev/null)
  [[ $route =~ \ dev\ ([^ ]+) ]] \
    && { read -r mtu < "/sys/class/net/${BASH_REMATCH[1]}/mtu"; } 2> /dev/null
  echo "${mtu:-1500}"
}
# The round trip (ms) of a full-size ping to a host with don't-fragment set, at most three
# tries; fails when none came back.
full_ping() {
  local said _try
  for _try in 1 2 3; do
    said=$(ping -c 1 -W 2 -M "do" -s $(($2 - 28)) "$1" 2> /dev/null)
    [[ $said =~ time=([0-9.]+) ]] && { echo "${BASH_REMATCH[1]}"; return 0; }
  done
  return 1
}
mounted() {
  if command -v mountpoint > /dev/null; then mountpoint -q "$1" 2> /dev/null
  else awk -v p="$1" '$5 == p { found = 1 } END { exit !found }' /proc/self/mountinfo; fi
}
"""

# Runs in each member over main1's login; main1 puts the variables in front of it (main,
# nonce, checks, dirs: "rw:/path" or "ro:/path", peers: name address ...). Prints
# "CHECK ok|FAILED|skip DETAIL" lines.
MEMBER = r"""
echo "ssh ok $(hostname)"
if on dns; then
  bad=""
  set -- "${peers[@]}"
  while [ $# -ge 2 ]; do
    got=""; read -r got _ < <(getent hosts "$1")
    [ "$got" = "$2" ] || bad="$bad $1 -> ${got:-nothing} (main1: $2);"
    shift 2
  done
  if [ -z "$bad" ]; then echo "dns ok"; else echo "dns FAILED resolves${bad%;}"; fi
fi
if on mtu && [ "$main" != "$(hostname)" ]; then
  if ! command -v ping > /dev/null || ! command -v ip > /dev/null; then
    echo "mtu skip no ping or ip in the image"
  else
    mtu=$(mtu_to "$(addr_of "$main")")
    if full_ping "$main" "$mtu" > /dev/null; then echo "mtu ok back $mtu"; else
      echo "mtu FAILED no full-size packet ($mtu bytes, don't fragment) from it to $main"; fi
  fi
fi
if on tcp && [ "$main" != "$(hostname)" ]; then
  if timeout 5 bash -c "exec 3<> /dev/tcp/$main/2200" 2> /dev/null; then echo "tcp ok"; else
    echo "tcp FAILED cannot open a TCP connection to $main port 2200"; fi
fi
if on data; then
  bad=""
  for d in "${dirs[@]}"; do
    path=${d#*:}
    if ! mounted "$path"; then bad="$bad $path is not mounted;"
    elif [ "${d%%:*}" = rw ] && [ "$(cat "$path/.bai-gate.$nonce" 2> /dev/null)" != "$nonce" ]; then
      bad="$bad $path is not the folder main1 has (its marker is missing);"
    fi
  done
  if [ -z "$bad" ]; then echo "data ok ${#dirs[@]}"; else echo "data FAILED${bad%;}"; fi
fi
if on clock; then echo "clock ok $(date +%s%N)"; fi
if on gpu; then
  want=${GPU_COUNT:-0}
  have=$(ls -d /dev/nvidia[0-9]* /dev/dri/renderD* 2> /dev/null | wc -l)
  if [ "$have" -eq "$want" ]; then echo "gpu ok $have"; else
    echo "gpu FAILED given $want GPU(s), sees $have device(s)"; fi
fi
if on hook; then
  bad=""
  for h in "${BAI_GATE_DIR:-HOOK_DIR}"/*; do
    [ -f "$h" ] && [ -x "$h" ] || continue
    out=$(timeout 30 "$h" 2>&1); rc=$?
    [ "$rc" -eq 0 ] || bad="$bad $h exit $rc: $(printf '%s' "$out" | tail -n 3 | tr '\n' ' ');"
  done
  if [ -z "$bad" ]; then echo "hook ok"; else echo "hook FAILED${bad%;}"; fi
fi
""".replace("HOOK_DIR", HOOK_DIR)

# main1's side: args RESOLVE_S NONCE CHECKS BYTES HOST... -- DIR...; prints
# "HOST CHECK ok|FAILED|skip DETAIL" lines and "HOST window T0 T1" (main1's clock, ns,
# around the member's checks); exits 1 when a check failed.
_SCRIPT = r"""set -u
resolve_s=$1 nonce=$2 checks=$3 bytes=$4; shift 4
hosts=(); while [ $# -gt 0 ] && [ "$1" != -- ]; do hosts+=("$1"); shift; done
[ $# -gt 0 ] && shift
dirs=("$@")
main=$(hostname)
dir=$(mktemp -d)
@HELPERS@
# Each member's name, awaited (its address kept in $dir/NAME.addr).
known() {
  local end=$((SECONDS + resolve_s))
  until getent hosts "$1" > "$dir/$1.addr" 2> /dev/null || [ "$SECONDS" -ge "$end" ]; do
    sleep 0.2
  done
}
# Seconds between two clock readings in microseconds (${EPOCHREALTIME/./}), to the ms.
secs() { local d=$((($2 - $1) / 1000)); printf '%d.%03d' $((d / 1000)) $((d % 1000)); }
# main1 runs the gate with its user's CPU quota: what runs per member here stays in bash
# (no sed, grep or cat per member: at 16 members they cost seconds).
# A folder main1 cannot write is checked as mounted only, like a read-only one.
written=()
for d in "${dirs[@]}"; do
  marker="${d#*:}/.bai-gate.$nonce"
  if [ "${d%%:*}" = rw ] && ! { on data && printf '%s\n' "$nonce" > "$marker"; } 2> /dev/null
  then d="ro:${d#*:}"; fi
  written+=("$d")
done
dirs=("${written[@]}")
for h in "${hosts[@]}"; do known "$h" & done
wait
peers=()
for h in "${hosts[@]}"; do a=""; read -r a _ 2> /dev/null < "$dir/$h.addr"; peers+=("$h" "$a"); done
# Another member with the same address (main1 itself, say): a login to one reaches the other.
twin_of() {
  local i
  for ((i = 0; i < ${#peers[@]}; i += 2)); do
    [ "${peers[i]}" != "$1" ] && [ -n "$2" ] && [ "${peers[i + 1]}" = "$2" ] \
      && { echo "${peers[i]}"; return 0; }
  done
  return 1
}
{
  printf 'main=%q nonce=%q checks=%q\n' "$main" "$nonce" "$checks"
  # (printf with no argument would still print one empty word)
  printf 'dirs=('; [ ${#dirs[@]} -eq 0 ] || printf '%q ' "${dirs[@]}"; printf ')\n'
  printf 'peers=('; printf '%q ' "${peers[@]}"; printf ')\n'
  cat <<'MEMBER_EOF'
@HELPERS@
@MEMBER@
MEMBER_EOF
} > "$dir/member.sh"
# A login that stalls (a path that drops full-size packets stalls the key exchange) ends
# by its timeout, not never.
ssh_=(ssh -o BatchMode=yes -o ConnectTimeout=10 -o ServerAliveInterval=5
      -o ServerAliveCountMax=2 -o ControlMaster=auto -o "ControlPath=$dir/%h.ssh"
      -o ControlPersist=60)
for h in "${hosts[@]}"; do
  out="$dir/$h"
  (
    a=$(addr_of "$h")
    if on dns && twin=$(twin_of "$h" "$a"); then
      echo "$h dns FAILED $h and $twin both resolve to $a"
    fi > "$out.names"
    if on mtu && [ "$h" != "$main" ]; then
      if ! command -v ping > /dev/null || ! command -v ip > /dev/null; then
        echo "$h mtu skip no ping or ip in the image"
      else
        mtu=$(mtu_to "$a")
        if rtt=$(full_ping "$h" "$mtu"); then echo "$h mtu ok $mtu rtt_ms=$rtt"; else
          echo "$h mtu FAILED no full-size packet ($mtu bytes, don't fragment)" \
            "between $main and $h"; fi
      fi
    fi > "$out.mtu" &
    t0=${EPOCHREALTIME/./}
    timeout 90 "${ssh_[@]}" "$h" bash -s < "$dir/member.sh" > "$out.member" 2> "$out.err"
    rc=$?
    t1=${EPOCHREALTIME/./}
    logged="" reached="" lines=()
    while IFS= read -r line; do
      if [[ -z $reached && $line == "ssh ok "* ]]; then reached=${line#ssh ok }
      else lines+=("$line"); fi
    done < "$out.member"
    if [ "$reached" = "$h" ]; then
      logged=1
      for line in "${lines[@]}"; do echo "$h $line"; done
      echo "$h ssh ok"
      echo "$h window ${t0}000 ${t1}000"
    elif [ -n "$reached" ]; then
      echo "$h ssh FAILED the login to $h reached $reached (its name resolves to ${a:-nothing})"
    else
      said=$(cat "$out.member" "$out.err" | tail -n 5 | tr '\n' ' ' | sed 's/ *$//')
      echo "$h ssh FAILED ${said:-the login got no answer} (exit $rc)"
    fi > "$out.checks"
    # Over the login above (its connection kept open for these): one stream each way.
    if on stream && [ "$h" != "$main" ] && [ -n "$logged" ]; then
      # One channel: the bytes go up (the member counts them), then as many come back.
      t0=${EPOCHREALTIME/./}
      said=$(head -c "$bytes" /dev/zero \
        | timeout 20 "${ssh_[@]}" "$h" "wc -c; head -c $bytes /dev/zero" 2> /dev/null \
        | { read -r up && echo "$up ${EPOCHREALTIME/./}"; wc -c; })
      t2=${EPOCHREALTIME/./}
      up="" t1="" down=""
      { read -r up t1; read -r down; } <<< "$said"
      if [ "${up:-0}" = "$bytes" ] && [ "$down" = "$bytes" ]; then
        echo "$h stream ok up_s=$(secs "$t0" "$t1") down_s=$(secs "$t1" "$t2")"
      else
        echo "$h stream FAILED $bytes bytes each way: ${up:-0} arrived at $h, ${down:-0} came back"
      fi
    fi > "$out.stream"
    "${ssh_[@]}" -O exit "$h" > /dev/null 2>&1
    wait
    for part in names checks mtu stream; do
      while IFS= read -r line; do echo "$line"; done < "$out.$part"
    done > "$out"
  ) &
done
wait
for d in "${dirs[@]}"; do [ "${d%%:*}" = rw ] && rm -f "${d#*:}/.bai-gate.$nonce"; done
rc=0
for h in "${hosts[@]}"; do
  while IFS= read -r line; do
    echo "$line"
    [[ $line =~ ^[^\ ]+\ [a-z]+\ FAILED ]] && rc=1
  done < "$dir/$h"
done
rm -rf "$dir"
exit $rc
"""


def script() -> str:
    """The gate's bash (main1's side, with the members' inside it)."""
    helpers = HELPERS.strip("\n")
    return _SCRIPT.replace("@HELPERS@", helpers).replace("@MEMBER@", MEMBER.strip("\n"))


SCRIPT = script()


def argv(
    hosts: Sequence[str],
    checks: Iterable[str] = CHECKS,
    dirs: Iterable[tuple[str, bool]] = (),
    nonce: str = "",
    resolve_s: int = RESOLVE_S,
    stream_bytes: int = STREAM_BYTES,
) -> list[str]:
    """The gate's command line in main1 (no shell between: each item is one argument).
    ``dirs``: (path in the container, read-only) of the data folders."""
    folders = [f"{'ro' if readonly else 'rw'}:{path}" for path, readonly in dirs]
    return [
        "bash", "-c", SCRIPT, "gate", str(resolve_s), nonce or secrets.token_hex(8),
        ",".join(checks), str(stream_bytes), *hosts, "--", *folders,
    ]  # fmt: skip


@dataclass(frozen=True)
class Finding:
    """One check of one member."""

    host: str
    check: str
    status: str  # ok, FAILED, skip
    detail: str = ""


@dataclass
class Result:
    """What the gate found: each member's checks, and main1's clock around each login."""

    findings: list[Finding] = field(default_factory=list)
    windows: dict[str, tuple[int, int]] = field(default_factory=dict)

    def failed(self) -> list[Finding]:
        return [f for f in self.findings if f.status == "FAILED"]

    def hosts_failed(self) -> list[str]:
        return sorted({f.host for f in self.failed()})

    def of(self, host: str) -> dict[str, Finding]:
        """``host``'s findings by check; of two (mtu: main1's and the member's own), the
        failed one, else the last."""
        found: dict[str, Finding] = {}
        for f in self.findings:
            earlier = found.get(f.check)
            if f.host == host and (earlier is None or earlier.status != "FAILED"):
                found[f.check] = f
        return found


_LINE = re.compile(r"^(\S+) (window|[a-z]+) ?(ok|FAILED|skip)? ?(.*)$")


def read(
    output: str, hosts: Sequence[str], skew_s: float = DEFAULT_SKEW_S, exit_code: int | None = None
) -> Result:
    """The gate's output as findings; a member's clock is judged here, against main1's
    clock before and after its login (its ``clock ok NS`` line must lie in that window,
    widened by ``skew_s``). A member with no line at all has failed ``ssh``; the gate's
    ``exit_code`` (other than 0 or 1: it did not end by itself) says why."""
    result = Result()
    clocks: dict[str, int] = {}
    for line in output.splitlines():
        found = _LINE.match(line.strip())
        if not found or found.group(1) not in hosts:
            continue
        host, check, status, detail = found.groups()
        if check == "window":
            first, _sp, last = detail.partition(" ")
            result.windows[host] = (int(first), int(last))
        elif check == "clock" and status == "ok" and detail.isdigit():
            clocks[host] = int(detail)
        elif status:
            result.findings.append(Finding(host, check, status, detail))
    for host, ns in clocks.items():
        result.findings.append(_clock(host, ns, result.windows.get(host), skew_s))
    why = "the gate gave no answer"
    if exit_code not in (None, 0, 1):
        why += f" (it ended with exit {exit_code} in main1"
        why += ", killed: main1 may be short of memory)" if exit_code == 137 else ")"
    for host in hosts:
        if not any(f.host == host for f in result.findings):
            result.findings.append(Finding(host, "ssh", "FAILED", why))
    return result


def _clock(host: str, ns: int, window: tuple[int, int] | None, skew_s: float) -> Finding:
    if window is None:
        return Finding(host, "clock", "skip", "no window")
    first, last = window
    off = (ns - last if ns > last else ns - first if ns < first else 0) / 1e9
    if abs(off) > skew_s:
        return Finding(host, "clock", "FAILED", f"{off:+.1f} s from main1's (at most {skew_s:g})")
    return Finding(host, "clock", "ok", f"{off:+.3f} s")


def summary(result: Result, agents: Mapping[str, str]) -> str:
    """The failed checks for people, each member with its agent."""
    return "; ".join(
        f"{f.host} on agent {agents.get(f.host, '?')}: {f.check}: {f.detail}"
        for f in result.failed()
    )


def run_from(
    api: Any, container: str, hosts: Sequence[str], skew_s: float = DEFAULT_SKEW_S, **kwargs: Any
) -> Result:
    """Run the gate in ``container`` (main1) as user work; its Result."""
    exec_id = api.exec_create(container, argv(hosts, **kwargs), user="work")
    out = api.exec_start(exec_id).decode("utf-8", "replace")
    return read(out, hosts, skew_s, api.exec_inspect(exec_id).get("ExitCode"))


def check(share: Share) -> dict[str, Any]:
    """The gate from the master (on this agent) over every container of the session,
    with the request's ``gate`` options (``checks``, ``skew_s``); a member that fails is
    checked once more (with all the others) before it counts. Returns ``mesh`` (``ok
    HOST`` lines, as the SSH check gave) and ``gate`` (``seconds``, and each member's
    checks: ``{host: {check: detail}}``); raises Failure naming each failed check, its
    member and its agent."""
    req = share.req
    master = next(k for k in share.mine if k.rank == 0)
    kernels = sorted(req.kernels, key=lambda k: k.rank)
    hosts = [k.hostname for k in kernels]
    options = dict(req.gate or {})
    skew_s = float(options.get("skew_s") or DEFAULT_SKEW_S)
    kwargs = {
        "checks": tuple(options.get("checks") or CHECKS),
        "dirs": [(str(m["dst"]), bool(m.get("readonly"))) for m in req.mounts],
    }
    began = time.monotonic()
    result = run_from(share.docker.api, master.container_name, hosts, skew_s, **kwargs)
    if result.failed():
        if {f.check for f in result.failed()} <= LINK_CHECKS:
            time.sleep(max(0.0, began + LINK_SETTLE_S - time.monotonic()))
        result = run_from(share.docker.api, master.container_name, hosts, skew_s, **kwargs)
    if result.failed():
        agents = {k.hostname: k.agent for k in kernels}
        raise Failure(
            f"the health gate of session {req.session} failed (checked twice): "
            + summary(result, agents)
        )
    return {
        "mesh": [f"ok {host}" for host in hosts],
        "gate": {
            "seconds": round(time.monotonic() - began, 3),
            "members": {
                host: {f.check: f.detail or f.status for f in result.of(host).values()}
                for host in hosts
            },
        },
    }
