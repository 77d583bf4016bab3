"""The lab as real hosts: Ansible over SSH as an unprivileged account with sudo.

``inventories/lab-ssh`` reaches the lab's nodes with OpenSSH as ``bai-admin``, an account
the lab role makes on every node (its key and the nodes' host keys in ~/.ssh/bai-lab),
and becomes root with sudo, as an operator reaches a real cluster. The tests check that
the account is what it claims (unprivileged, passwordless sudo, host keys checked, root
cannot log in); that site.yml repairs drift through it and a second run changes nothing;
that the host firewall refuses a rule set that would lock Ansible's SSH out; that
single- and multi-node sessions are created, listed and destroyed through it with the
session modules running on the agents over SSH; that preflight's host checks (Python,
become, kernel features) pass, and fail with their fix; and that inventories/example,
rendered with the lab's addresses, passes preflight.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, VENV_BIN
from labtools import ADDRESS, count, in_session, on_agent, spanning_session, sweep

pytestmark = [pytest.mark.integration, pytest.mark.lab]

INVENTORY = "inventories/lab-ssh"
SITE = str(REPO / "site.yml")
USER = "bai-admin"
KEYS = Path.home() / ".ssh" / "bai-lab"
SSH_CHECK = "Check that Ansible's own SSH connection stays allowed"


def ssh(host: str, command: str, user: str = USER, known_hosts: Path | None = None):
    """Run a command on a lab node over SSH as the controller does; CompletedProcess."""
    argv = [
        "ssh",
        "-i",
        str(KEYS / "id_ed25519"),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"UserKnownHostsFile={known_hosts or KEYS / 'known_hosts'}",
        "-o",
        "ConnectTimeout=5",
        f"{user}@{ADDRESS[host]}",
        command,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def task_results(run, name: str) -> dict[str, dict]:
    """Per host, the result of the task called `name` (its last run) in a json-callback run."""
    found: dict[str, dict] = {}
    for play in run.result.get("plays", []):
        for task in play.get("tasks", []):
            title = task["task"]["name"]
            if title == name or title.endswith(f" : {name}"):  # role tasks: "role : name"
                found.update(task["hosts"])
    return found


@pytest.fixture(scope="module")
def reachable(lab):
    """The lab's nodes (docker SDK containers, to read and disturb them as root), once the
    administrator's key that inventories/lab-ssh logs in with is there."""
    if not (KEYS / "id_ed25519").exists():
        pytest.fail(f"no lab administrator key in {KEYS}: make lab-up makes it (role lab)")
    return lab


# --- the account ------------------------------------------------------------------------


def test_the_admin_account_is_unprivileged_and_becomes_root_with_sudo(reachable):
    for host in ADDRESS:
        done = ssh(host, "id -un; id -u; sudo -n id -u")
        assert done.returncode == 0, (host, done.stderr)
        name, uid, root = done.stdout.split()
        assert (name, root) == (USER, "0"), (host, done.stdout)
        assert uid != "0", (host, done.stdout)


def test_root_cannot_log_in_and_host_keys_are_checked(reachable, tmp_path):
    refused = ssh("agent1", "true", user="root")
    assert refused.returncode == 255 and "Permission denied" in refused.stderr, refused.stderr
    # agent1's address with another node's host key: OpenSSH must refuse to connect.
    lines = (KEYS / "known_hosts").read_text().splitlines()
    (other,) = [line for line in lines if ADDRESS["webserver"] in line.split()[0].split(",")]
    forged = tmp_path / "known_hosts"
    forged.write_text(f"{ADDRESS['agent1']} {other.split(' ', 1)[1]}\n")
    spoofed = ssh("agent1", "true", known_hosts=forged)
    assert spoofed.returncode == 255, spoofed
    assert "Host key verification failed" in spoofed.stderr, spoofed.stderr


# --- site.yml ---------------------------------------------------------------------------


def test_site_repairs_drift_over_ssh_then_changes_nothing(reachable, site_converged):
    """The shared converge (conftest.site_converged) runs over this inventory, after drift
    made behind Ansible's back: agent1's firewall table gone, the web server's boot script
    for it deleted."""
    nodes = reachable
    first, second = site_converged
    assert first.args[first.args.index("-i") + 1] == INVENTORY, first.args
    assert first.rc == 0, first
    assert first.changed("agent1") > 0 and first.changed("webserver") > 0, first.result["stats"]
    code, out = on_agent(nodes["agent1"], "nft", "list", "table", "inet", "bai_firewall")
    assert code == 0 and "hook input" in out, out
    code, out = on_agent(nodes["webserver"], "test", "-x", "/etc/init.d/bai-firewall")
    assert code == 0, out
    # The connection was SSH: the host firewall read each host's SSH_CONNECTION (as the
    # login user; sudo drops it) and checked that the rules keep Ansible's source open.
    checked = task_results(first, SSH_CHECK)
    assert sorted(checked) == sorted(ADDRESS), checked
    assert not any(r.get("skipped") for r in checked.values()), checked

    assert second.rc == 0, second
    changed = {host: row["changed"] for host, row in second.result["stats"].items()}
    assert changed == dict.fromkeys(ADDRESS, 0), changed


def test_the_firewall_refuses_to_lock_ansible_out(reachable, run_playbook):
    node = reachable["agent1"]
    _code, before = on_agent(node, "nft", "list", "table", "inet", "bai_firewall")
    # Without 10.210.3.1/32, the controller's address on the compute network, agent1's
    # new rules would drop the SSH connection Ansible is using.
    run = run_playbook(
        SITE,
        "--tags",
        "host_firewall",
        "--limit",
        "agent1",
        inventory=INVENTORY,
        extra_vars={"bai_admin_cidrs": ["10.210.2.0/24"]},
    )
    assert run.rc != 0, run
    (msg,) = run.failures
    assert "Ansible reaches agent1 over SSH from 10.210.3.1" in msg, msg
    assert "Nothing was changed" in msg, msg
    _code, after = on_agent(node, "nft", "list", "table", "inet", "bai_firewall")
    assert after == before
    assert ssh("agent1", "true").returncode == 0


# --- sessions ---------------------------------------------------------------------------

SINGLE = {"session_name": "it-ssh1", "session_size": 2}
MULTI = spanning_session("it-ssh3")


@pytest.fixture(scope="module")
def sessions(reachable, lab, run_playbook):
    for extra in (SINGLE, MULTI):
        sweep(lab, extra["session_name"])
    made = {}
    try:
        for extra in (SINGLE, MULTI):
            run = run_playbook("session_create.yml", extra_vars=extra, inventory=INVENTORY)
            assert run.rc == 0, run
            made[extra["session_name"]] = run
        yield made
    finally:
        for extra in (SINGLE, MULTI):
            run_playbook(
                "session_destroy.yml",
                extra_vars={"session_name": extra["session_name"]},
                inventory=INVENTORY,
            )
            sweep(lab, extra["session_name"])


def delegated(run) -> set[tuple[str, str]]:
    """(connection, address) of every delegated task result: where the modules ran."""
    seen = set()
    for play in run.result.get("plays", []):
        for task in play.get("tasks", []):
            for res in task["hosts"].values():
                for item in [res, *res.get("results", [])]:
                    via = item.get("_ansible_delegated_vars") or {}
                    if via.get("ansible_host"):
                        seen.add((via.get("ansible_connection"), via["ansible_host"]))
    return seen


def test_sessions_are_created_over_ssh_on_the_agents(sessions, lab):
    single = sessions["it-ssh1"].stats["bai_session"]
    multi = sessions["it-ssh3"].stats["bai_session"]
    assert len({c["agent"] for c in single["containers"]}) == 1, single
    assert {c["agent"] for c in multi["containers"]} == {"agent1", "agent2"}, multi
    # The session modules ran on the agents (and the ledger on the manager) over SSH.
    used = delegated(sessions["it-ssh3"])
    assert ("ssh", ADDRESS["agent1"]) in used and ("ssh", ADDRESS["agent2"]) in used, used
    assert ("ssh", ADDRESS["manager"]) in used, used
    assert {connection for connection, _address in used} == {"ssh"}, used
    # What they made works: from main1, every container answers `ssh HOST` with no prompt.
    for summary in (single, multi):
        main1 = summary["containers"][0]
        hosts = " ".join(c["host"] for c in summary["containers"])
        code, out = in_session(
            lab[main1["agent"]],
            main1["container"],
            f"for h in {hosts}; do ssh -o BatchMode=yes $h hostname; done",
        )
        assert code == 0, out
        assert out.split() == [c["host"] for c in summary["containers"]], out


def test_sessions_are_idempotent_and_listed_over_ssh(sessions, run_playbook):
    again = run_playbook("session_create.yml", extra_vars=MULTI, inventory=INVENTORY)
    assert again.rc == 0 and again.changed() == 0, again
    listed = run_playbook("session_list.yml", inventory=INVENTORY)
    assert listed.rc == 0, listed
    rows = {r["name"]: r for r in listed.stats["bai_sessions"]}
    assert rows["it-ssh1"]["state"] == "running", rows
    assert rows["it-ssh3"]["state"] == "running", rows
    assert sorted(rows["it-ssh3"]["agents"]) == ["agent1", "agent2"], rows


def test_sessions_are_destroyed_over_ssh(sessions, lab, reachable, run_playbook):
    for name in ("it-ssh1", "it-ssh3"):
        gone = run_playbook(
            "session_destroy.yml", extra_vars={"session_name": name}, inventory=INVENTORY
        )
        assert gone.rc == 0, gone
        assert count(lab, name) == 0


# --- preflight --------------------------------------------------------------------------


def preflight(run_playbook, *args, inventory=INVENTORY, **extra):
    return run_playbook(
        SITE, "--tags", "preflight", *args, inventory=inventory, extra_vars=extra or None
    )


def test_preflight_checks_python_become_and_the_kernel_over_ssh(reachable, run_playbook):
    run = preflight(run_playbook)
    assert run.rc == 0, run
    kernel = task_results(run, "Look for the kernel features the roles rely on")
    assert sorted(kernel) == sorted(ADDRESS), kernel
    for host in ("manager", "agent1", "agent2"):
        assert sorted(kernel[host]["features"]) == ["br_netfilter", "bridge", "nf_tables", "vxlan"]
    assert sorted(kernel["webserver"]["features"]) == ["nf_tables"]
    assert all(r["missing"] == [] for r in kernel.values()), kernel
    uid = task_results(run, "Read the account tasks run as")
    assert {host: r["stdout"] for host, r in uid.items()} == dict.fromkeys(ADDRESS, "0"), uid


def test_preflight_says_how_to_fix_a_missing_sudo_rule(reachable, run_playbook):
    node = reachable["agent2"]
    code, out = on_agent(node, "mv", "/etc/sudoers.d/bai-lab-admin", "/root/bai-lab-admin.sudoers")
    assert code == 0, out
    try:
        run = preflight(run_playbook, "--limit", "agent2")
    finally:
        code, out = on_agent(
            node, "mv", "/root/bai-lab-admin.sudoers", "/etc/sudoers.d/bai-lab-admin"
        )
        assert code == 0, out
    assert run.rc != 0, run
    msg = run.failures[-1]
    assert "agent2: Ansible logs in as bai-admin but cannot become root" in msg, msg
    assert "password" in msg.lower(), msg  # sudo wanted one
    assert "NOPASSWD" in msg and "visudo" in msg, msg


def test_preflight_says_how_to_fix_a_connection_without_become(reachable, run_playbook):
    run = preflight(run_playbook, "--limit", "agent1", ansible_become=False)
    assert run.rc != 0, run
    (msg,) = run.failures
    assert "agent1: tasks run as uid" in msg and "(bai-admin), not root" in msg, msg
    assert '"ansible_become: true"' in msg, msg


def test_preflight_says_how_to_fix_a_missing_python(reachable, run_playbook):
    run = preflight(
        run_playbook, "--limit", "agent1", ansible_python_interpreter="/usr/bin/python3.99"
    )
    assert run.rc != 0, run
    (msg,) = run.failures
    assert "/usr/bin/python3.99 does not run there" in msg, msg
    assert "apt-get install python3" in msg and "ansible_python_interpreter" in msg, msg


# --- the example inventory --------------------------------------------------------------

# inventories/example's placeholder addresses -> the lab's (same components).
RENDER = {
    "192.0.2.10": ADDRESS["webserver"],
    "10.20.2.10": ADDRESS["manager"],
    "192.0.2.20": ADDRESS["appproxy"],
    "10.20.3.11": ADDRESS["agent1"],
    "10.20.3.12": ADDRESS["agent2"],
    "192.0.2.0/24": "10.210.1.0/24",
    "10.20.2.0/24": "10.210.2.0/24",
    "10.20.3.0/24": "10.210.3.0/24",
    "ansible_user: deploy": f"ansible_user: {USER}",
}


def render_example(into: Path) -> Path:
    """inventories/example as an operator fills it in for the lab: addresses replaced,
    the account set, the GPU host deleted, SSH told where the lab's key is."""
    site = into / "mysite"
    shutil.copytree(REPO / "inventories" / "example", site)
    for path in site.rglob("*.yml"):
        text = path.read_text()
        for placeholder, value in RENDER.items():
            text = text.replace(placeholder, value)
        path.write_text(text)
    hosts = (site / "hosts.yml").read_text()
    start = hosts.index("            gpu1:")
    end = hosts.index("        # There is no lab_probes group")
    (site / "hosts.yml").write_text(hosts[:start] + hosts[end:])
    with (site / "group_vars" / "cluster.yml").open("a") as handle:
        handle.write(
            f"ansible_ssh_private_key_file: {KEYS / 'id_ed25519'}\n"
            "ansible_ssh_common_args: -o StrictHostKeyChecking=yes"
            f" -o UserKnownHostsFile={KEYS / 'known_hosts'}\n"
        )
    return site


def ansible_var(inventory: Path, host: str, name: str) -> str:
    """What ``ansible HOST -m debug -a var=NAME`` prints for the host (last line)."""
    done = subprocess.run(
        [str(VENV_BIN / "ansible"), "-i", str(inventory), host, "-m", "debug", "-a", f"var={name}"],
        cwd=REPO,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().splitlines()[-1].strip()


def test_the_example_inventory_passes_preflight_with_the_labs_addresses(
    reachable, run_playbook, tmp_path
):
    site = render_example(tmp_path)
    text = "\n".join(p.read_text() for p in site.rglob("*.yml"))
    assert "192.0.2." not in text and "10.20." not in text, text
    assert "gpu1:" not in (site / "hosts.yml").read_text()
    run = preflight(run_playbook, inventory=str(site))
    assert run.rc == 0, run
    assert run.hosts == ["agent1", "agent2", "mgr1", "proxy1", "web1"], run.hosts
    # The account and sudo are the cluster's: the controller's implicit localhost, where
    # the session playbooks run, reads group_vars/all.yml too and must not sudo.
    become = ansible_var(site, "localhost", "ansible_become")
    assert "is undefined" in become, become
    assert ansible_var(site, "agent1", "ansible_become").endswith("ansible_become: true")
    uid = task_results(run, "Read the account tasks run as")
    assert {host: r["stdout"] for host, r in uid.items()} == dict.fromkeys(run.hosts, "0"), uid
    kernel = task_results(run, "Look for the kernel features the roles rely on")
    assert all(r["missing"] == [] for r in kernel.values()) and len(kernel) == 5, kernel
