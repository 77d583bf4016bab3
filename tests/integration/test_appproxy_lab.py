"""user -> appproxy -> main1: a person's key, the app proxy's route, SSH into a session.

On the lab (default inventory): a keypair is made on the `user` node (public zone only),
a session of size 2 is created with that public key (session_authorized_keys), and the
user logs in with ``ssh -p <route port> work@<appproxy>``: it must land on main1 (host
key verified), see main1's environment, reach sub1 over the session mesh, and nothing on
the proxy may lead to sub1. Destroying the session removes the route and closes the port.
Each negative check has a positive control next to it. Needs the lab up and site.yml
converged (the appproxy play is converged here when HAProxy is not running).
"""

from __future__ import annotations

import json
import shlex

import pytest
from labtools import in_session, inspect, on_agent, sweep

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NAME = "ap-it"
APPPROXY_PUBLIC = "10.210.1.12"
ROUTES = "/etc/haproxy/routes.d"
KEY = "/root/.ssh/ap_it"
OTHER_KEY = "/root/.ssh/ap_it_other"
KNOWN_HOSTS = "/root/.ssh/ap_it_known_hosts"


def sh(container, command):
    """(exit code, stripped output) of a shell command on a lab node."""
    return on_agent(container, "sh", "-c", command)


def ssh_via_proxy(user, port, command, key=KEY):
    """ssh from the user node through the app proxy, host key checked against KNOWN_HOSTS."""
    return sh(
        user,
        f"ssh -i {key} -o BatchMode=yes -o ConnectTimeout=10 -o IdentitiesOnly=yes "
        f"-o StrictHostKeyChecking=yes -o UserKnownHostsFile={KNOWN_HOSTS} "
        f"-p {port} work@{APPPROXY_PUBLIC} {shlex.quote(command)} 2>&1",
    )


@pytest.fixture(scope="module")
def proxy_up(lab, run_playbook):
    """HAProxy runs on the appproxy node (converged by site.yml's appproxy play)."""
    code, out = sh(lab["appproxy"], "service haproxy status")
    if code != 0:
        print(f"HAProxy is not running on appproxy ({out}); converging site.yml --tags appproxy")
        run = run_playbook("site.yml", "--tags", "appproxy")
        assert run.rc == 0, run
        code, out = sh(lab["appproxy"], "service haproxy status")
    assert code == 0, out


@pytest.fixture(scope="module")
def user_key(lab):
    """A keypair made on the user node (the private key never leaves it), plus a second
    one that is not authorised (negative control)."""
    user = lab["user"]
    code, out = sh(
        user,
        f"mkdir -p -m 700 /root/.ssh && rm -f {KEY} {KEY}.pub {OTHER_KEY} {OTHER_KEY}.pub "
        f"&& ssh-keygen -q -t ed25519 -N '' -C ap-it-user -f {KEY} "
        f"&& ssh-keygen -q -t ed25519 -N '' -C ap-it-other -f {OTHER_KEY} && cat {KEY}.pub",
    )
    assert code == 0 and out.startswith("ssh-ed25519 "), out
    yield out
    sh(user, f"rm -f {KEY} {KEY}.pub {OTHER_KEY} {OTHER_KEY}.pub {KNOWN_HOSTS}")


@pytest.fixture(scope="module")
def session(lab, proxy_up, user_key, run_playbook):
    sweep(lab, NAME)
    extra = {
        "session_name": NAME,
        "session_size": 2,
        "session_resources": {"cpu": 0.5, "mem": "256m"},
        "session_authorized_keys": [user_key],
    }
    run = run_playbook("session_create.yml", extra_vars=extra)
    try:
        assert run.rc == 0, run
        summary = run.stats["bai_session"]
        agent = lab[summary["ssh_agent"]]
        # The user trusts main1's host key (the session's), as a person would after
        # checking it: StrictHostKeyChecking stays on.
        code, hostkey = in_session(
            agent, f"bai-{NAME}-main1", "cut -d' ' -f1,2 /etc/ssh/ssh_host_ed25519_key.pub"
        )
        assert code == 0, hostkey
        port = summary["appproxy"]["port"]
        code, out = sh(lab["user"], f"echo '[{APPPROXY_PUBLIC}]:{port} {hostkey}' > {KNOWN_HOSTS}")
        assert code == 0, out
        yield {"run": run, "extra": extra, "summary": summary, "agent": agent, "port": port}
    finally:
        run_playbook("session_destroy.yml", extra_vars={"session_name": NAME})
        sweep(lab, NAME)
        sh(lab["appproxy"], f"test -e {ROUTES}/{NAME}.cfg && rm -f {ROUTES}/{NAME}.cfg")


def route_file(lab):
    return sh(lab["appproxy"], f"cat {ROUTES}/{NAME}.cfg")


def test_summary_reports_the_route_and_the_file_records_it(session, lab):
    summary, port = session["summary"], session["port"]
    route = summary["appproxy"]
    assert 10205 <= port <= 10300
    assert route["address"] == APPPROXY_PUBLIC
    assert route["ssh"] == f"ssh -p {port} work@{APPPROXY_PUBLIC}"
    compute = "ip -o -4 addr show | grep -o 'inet 10\\.210\\.3\\.[0-9]*'"
    code, agent_ip = sh(session["agent"], compute)
    assert code == 0, agent_ip
    assert route["backend"] == f"{agent_ip.split()[1]}:{summary['ssh_port']}"
    code, text = route_file(lab)
    assert code == 0, text
    header = json.loads(next(x for x in text.splitlines() if x.startswith("# bai-route "))[12:])
    assert header["port"] == port and header["session"] == NAME
    assert header["session_id"] == summary["session_id"]


def test_user_logs_in_to_main1_through_the_app_proxy(session, lab):
    port = session["port"]
    user = lab["user"]
    # Positive control: the proxy's port is open to the user.
    code, out = sh(user, f"nc -z -w 3 {APPPROXY_PUBLIC} {port}")
    assert code == 0, out
    code, out = ssh_via_proxy(user, port, "hostname")
    assert (code, out) == (0, "main1"), out
    code, out = ssh_via_proxy(user, port, "env")
    assert code == 0, out
    assert "BACKENDAI_CLUSTER_HOST=main1" in out.splitlines()
    assert f"BACKENDAI_SESSION_NAME={NAME}" in out.splitlines()
    # The session mesh from there: main1 -> sub1 with the session key.
    code, out = ssh_via_proxy(user, port, "ssh sub1 hostname")
    assert (code, out) == (0, "sub1"), out


def test_only_the_authorised_key_gets_in(session, lab):
    code, out = ssh_via_proxy(lab["user"], session["port"], "hostname", key=OTHER_KEY)
    assert code != 0 and "Permission denied" in out, out
    # Positive control: the authorised key, same command, same port.
    code, out = ssh_via_proxy(lab["user"], session["port"], "hostname")
    assert (code, out) == (0, "main1"), out


def test_the_key_sits_beside_the_session_key_in_every_container(session, user_key):
    agent = session["agent"]
    for host in ("main1", "sub1"):
        code, out = in_session(agent, f"bai-{NAME}-{host}", "cat ~/.ssh/authorized_keys2")
        assert (code, out) == (0, user_key), (host, out)
        code, out = in_session(
            agent, f"bai-{NAME}-{host}", "diff ~/.ssh/authorized_keys ~/.ssh/id_cluster.pub"
        )
        assert code == 0, (host, out)


def test_nothing_on_the_proxy_leads_to_sub1(session, lab):
    summary = session["summary"]
    code, text = route_file(lab)
    assert code == 0, text
    servers = [line.split() for line in text.splitlines() if line.strip().startswith("server ")]
    assert servers == [["server", "main1", summary["appproxy"]["backend"]]]
    # No route file of the proxy names this session's sub1 or points at its port(s).
    sub1 = inspect(session["agent"], f"bai-{NAME}-sub1")
    assert not any(sub1["NetworkSettings"]["Ports"].values()), sub1["NetworkSettings"]["Ports"]
    code, out = sh(lab["appproxy"], f'grep -l \'"session": "{NAME}"\' {ROUTES}/*.cfg')
    assert out.splitlines() == [f"{ROUTES}/{NAME}.cfg"], out


def test_user_has_no_direct_path_to_main1s_published_port(session, lab):
    backend = session["summary"]["appproxy"]["backend"]
    host, port = backend.split(":")
    code, out = sh(lab["user"], f"nc -z -w 3 {host} {port}")
    assert code != 0, out
    # Positive control: the app proxy does reach it (that is the route's backend).
    code, out = sh(lab["appproxy"], f"nc -z -w 3 {host} {port}")
    assert code == 0, out


def test_creating_again_keeps_the_port_and_changes_nothing(session, run_playbook):
    again = run_playbook("session_create.yml", extra_vars=session["extra"])
    assert again.rc == 0, again
    assert again.changed() == 0, again
    assert again.stats["bai_session"]["appproxy"]["port"] == session["port"]


def test_destroy_removes_the_route_and_closes_the_port(session, lab, run_playbook):
    port, user = session["port"], lab["user"]
    # Positive control: the port answers the user right before the destroy.
    code, out = sh(user, f"nc -zv -w 3 {APPPROXY_PUBLIC} {port} 2>&1")
    assert code == 0, out
    run = run_playbook("session_destroy.yml", extra_vars={"session_name": NAME})
    assert run.rc == 0, run
    code, out = sh(lab["appproxy"], f"test -e {ROUTES}/{NAME}.cfg")
    assert code != 0, "the route file is still there"
    # Refused (a reset from the proxy host), not timed out: the port is closed.
    code, out = sh(user, f"nc -zv -w 3 {APPPROXY_PUBLIC} {port} 2>&1")
    assert code != 0 and "refused" in out, out
    again = run_playbook("session_destroy.yml", extra_vars={"session_name": NAME})
    assert again.rc == 0 and again.changed() == 0, again
