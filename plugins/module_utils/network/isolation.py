"""The toolkit's own isolation between session networks (roles/session_isolation): the
names its nftables table matches, and the check the session modules make before they
start a container. No Ansible imports: the host is anything with run_command and
get_bin_path (an AnsibleModule is one)."""

from __future__ import annotations

from typing import Any, Optional

# table inet bai_isolation: the role loads it, the modules look for it. Its comment starts
# with MARKER (then the fingerprint of its rules).
TABLE = "bai_isolation"
MARKER = "bai-cluster session isolation"
# Every session bridge's interface name starts with this (the table matches "bais-*").
BRIDGE_PREFIX = "bais-"
BRIDGE_NAME_OPTION = "com.docker.network.bridge.name"
# Linux interface names are at most 15 characters (IFNAMSIZ - 1).
IFNAME_MAX = 15
HOW_TO_LOAD = (
    "load it with site.yml (role session_isolation) or "
    "ansible-playbook playbooks/session_isolation.yml --limit AGENT"
)


def bridge_name(session_id: str) -> str:
    """The interface name of a session's bridge: the prefix and the session id's first
    hex digits (40 bits: two sessions on one engine sharing them is not a concern)."""
    digits = "".join(c for c in session_id.lower() if c in "0123456789abcdef")
    return (BRIDGE_PREFIX + digits)[:IFNAME_MAX]


def table_state(host: Any) -> dict[str, Any]:
    """Whether this host's table inet bai_isolation is loaded: {loaded, marker, problem}.
    ``nft -t`` leaves out the elements of the dynamic set, so the answer is short."""
    nft = host.get_bin_path("nft")
    if not nft:
        return {"loaded": False, "marker": None, "problem": "nft is not installed"}
    rc, out, err = host.run_command([nft, "-t", "list", "table", "inet", TABLE])
    if rc != 0:
        text = (err or out or "").strip().splitlines()
        reason = text[0] if text else f"nft exited {rc}"
        if "No such file or directory" in reason:
            reason = "the table is not loaded"
        return {"loaded": False, "marker": None, "problem": reason}
    marker = _comment(out)
    if not marker or not marker.startswith(MARKER):
        return {
            "loaded": False,
            "marker": marker,
            "problem": f"table inet {TABLE} is not the toolkit's (its comment: {marker!r})",
        }
    return {"loaded": True, "marker": marker, "problem": None}


def table_problem(host: Any, agent: str) -> Optional[str]:
    """A sentence for a refusal when the table is missing, else None."""
    state = table_state(host)
    if state["loaded"]:
        return None
    return (
        f"the session isolation table (nftables table inet {TABLE}) is not in place on "
        f"agent {agent} ({state['problem']}), and without it containers of different "
        f"sessions could reach each other: {HOW_TO_LOAD.replace('AGENT', agent)}"
    )


def _comment(listing: str) -> Optional[str]:
    for line in listing.splitlines():
        line = line.strip()
        if line.startswith('comment "') and line.endswith('"'):
            return line[len('comment "') : -1]
    return None
