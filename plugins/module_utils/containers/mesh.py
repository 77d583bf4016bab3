"""The SSH mesh check: from main1, one login as user ``work`` to every container of the
session, all at once: what a restart's repair checks (repair.py) once it started a
session's containers again. A create runs the health gate (gate.py), whose first check
is the same login.

    SCRIPT                  the check, run in main1 as ``bash -c SCRIPT mesh HOST...``
    script(resolve_s)       the same, awaiting each host's name that long
    broken(output, code)    the lines naming the hosts it could not reach (empty = fine)
    check_from(api, container, host, hosts)   run it in ``container``; its lines, or Failure
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import Failure

# Prints "ok HOST" or "FAILED HOST: what ssh said" per host; exits 1 when one failed.
# A swarm overlay's names reach the other agents by gossip, which may lag a container's
# start by seconds on a busy engine: each host's name is first awaited (RESOLVE_S at most;
# then ssh says what is wrong), so a name not yet known is not a failed session.
RESOLVE_S = 30
_SCRIPT = r"""set -u
dir=$(mktemp -d)
known() {
  local end=$((SECONDS + %d))
  until getent hosts "$1" > /dev/null 2>&1 || [ "$SECONDS" -ge "$end" ]; do sleep 0.2; done
}
for h in "$@"; do
  ( known "$h"
    ssh -o BatchMode=yes -o ConnectTimeout=10 "$h" hostname > "$dir/$h" 2> "$dir/$h.err" ) &
done
wait
rc=0
for h in "$@"; do
  got=$(tail -n 1 "$dir/$h")
  if [ "$got" = "$h" ]; then echo "ok $h"; else
    echo "FAILED $h: $(cat "$dir/$h" "$dir/$h.err" | tail -n 5 | tr '\n' ' ' | sed 's/ *$//')"; rc=1
  fi
done
rm -rf "$dir"
exit $rc
"""


def script(resolve_s: int = RESOLVE_S) -> str:
    """The check's bash, waiting up to ``resolve_s`` seconds for each host's name."""
    return _SCRIPT % resolve_s


SCRIPT = script()


def broken(output: str, code: object) -> list[str]:
    """What the check's output says failed (``code``: its exit code); empty when every
    host answered."""
    if code == 0:
        return []
    lines = [line for line in output.splitlines() if line.strip()]
    return [line for line in lines if not line.startswith("ok ")] or [f"exit {code}"]


def check_from(api: Any, container: str, host: str, hosts: Sequence[str]) -> list[str]:
    """:func:`check` from container ``container`` (session host ``host``) to ``hosts``."""
    exec_id = api.exec_create(container, ["bash", "-c", SCRIPT, "mesh", *hosts], user="work")
    out = api.exec_start(exec_id).decode("utf-8", "replace")
    failed = broken(out, api.exec_inspect(exec_id).get("ExitCode"))
    if failed:
        raise Failure(f"SSH from {host} does not reach every container: " + "; ".join(failed))
    return [line for line in out.splitlines() if line.strip()]
