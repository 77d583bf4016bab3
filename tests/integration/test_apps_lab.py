"""user -> appproxy (HTTPS) -> main1's apps: JupyterLab, its terminal, a port of one's own.

On the lab (default inventory): a 2-member multi-node session of the apps image
(bai/session-apps: JupyterLab, label ai.backend.service-ports) spans agent1 and agent2 and
declares a port of its own (web=http:8000). Opening jupyter through playbooks/session_app.yml
starts JupyterLab in main1 as user work and routes the app proxy to it, over HTTPS with a
certificate from the cluster's CA (roles/cluster_ca). From the `user` node (public zone):
curl with the CA, and a real Chromium (tests/integration/browser.py, run in the user node's
network namespace, the CA trusted through an NSS db, no ignore-certificate flag) runs a
notebook cell that prints BACKENDAI_CLUSTER_HOSTS and `!ssh sub1 hostname`, and `hostname`
in JupyterLab's terminal. Refusals (no token, a wrong one, another route's, a destroyed
session's) each stand beside a positive control; direct paths (the agent's published
ports, the containers' addresses) time out from `user`, from `intruder` and from another
session. Screenshots are kept in .cache/test-artifacts/apps/.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from pathlib import Path

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.network.appproxy import render_route
from browser import fetch_status, jupyter_check, missing_tools
from labtools import in_session, inspect, on_agent, probe, sweep

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NAME = "apps-it"
OTHER = "apps-it-other"
APPPROXY_PUBLIC = "10.210.1.12"
ROUTES = "/etc/haproxy/routes.d"
CA_ON_PROXY = "/etc/bai-ca/ca.pem"
CA_ON_USER = "/tmp/apps-it-ca.pem"
ARTIFACTS = Path(__file__).resolve().parents[2] / ".cache" / "test-artifacts" / "apps"
IMAGE = "bai/session-apps:latest"


def sh(node, command):
    """(exit code, stripped output) of a shell command on a lab node."""
    return on_agent(node, "sh", "-c", command)


def curl(user, url, *options):
    """curl from the user node, the CA checked: (exit code, output)."""
    opts = " ".join(shlex.quote(o) for o in options)
    return sh(user, f"curl -sS --max-time 20 --cacert {CA_ON_USER} {opts} {shlex.quote(url)} 2>&1")


def status(user, url, jar=None):
    """The HTTP status the user node gets for url (cookies from/to jar when given)."""
    cookies = ["-b", jar, "-c", jar] if jar else []
    code, out = curl(user, url, "-o", "/dev/null", "-w", "%{http_code}", *cookies)
    assert code == 0, out
    return int(out)


def token_of(url):
    return url.rsplit("bai_token=", 1)[1]


@pytest.fixture(scope="module")
def ca(lab):
    """The cluster's CA certificate (public), as a user gets it: on the user node, and here
    for the browser."""
    code, pem = sh(lab["appproxy"], f"cat {CA_ON_PROXY}")
    assert code == 0 and "BEGIN CERTIFICATE" in pem, "site.yml did not make the cluster CA"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    local = ARTIFACTS / "ca.pem"
    local.write_text(pem + "\n")
    code, out = sh(lab["user"], f"printf '%s\\n' {shlex.quote(pem)} > {CA_ON_USER}")
    assert code == 0, out
    yield local
    sh(lab["user"], f"rm -f {CA_ON_USER} /tmp/apps-it-*.jar")


@pytest.fixture(scope="module")
def session(lab, ca, run_playbook):
    sweep(lab, NAME)
    extra = {
        "session_name": NAME,
        "session_size": 2,
        "session_mode": "multi-node",
        "session_image": IMAGE,
        # 5g each: no lab agent holds both, so the session spans agent1 and agent2.
        "session_resources": {"cpu": 0.5, "mem": "5g"},
        "session_apps": ["web=http:8000"],
        # A login host's user (test_another_owner_is_refused_as_on_a_login_host).
        "session_owner": "alice",
    }
    run = run_playbook("session_create.yml", extra_vars=extra)
    try:
        assert run.rc == 0, run
        summary = run.stats["bai_session"]
        main1_agent = lab[summary["ssh_agent"]]
        yield {"extra": extra, "summary": summary, "agent": main1_agent}
    finally:
        run_playbook("session_destroy.yml", extra_vars={"session_name": NAME})
        sweep(lab, NAME)
        sh(lab["appproxy"], f"rm -f {ROUTES}/{NAME}.cfg {ROUTES}/{NAME}.*.cfg")


def open_app(run_playbook, app, name=NAME):
    began = time.monotonic()
    run = run_playbook("session_app.yml", extra_vars={"session_name": name, "app_name": app})
    assert run.rc == 0, run
    opened = run.stats["bai_session_app"]
    opened["open_s"] = round(time.monotonic() - began, 2)
    return opened


@pytest.fixture(scope="module")
def jupyter(session, run_playbook):
    return open_app(run_playbook, "jupyter")


def test_the_session_lists_its_image_app_and_its_own_port(session, run_playbook):
    run = run_playbook("session_app.yml", extra_vars={"session_name": NAME})
    assert run.rc == 0, run
    apps = {a["name"]: a for a in run.stats["bai_session_app"]["apps"]}
    assert set(apps) == {"jupyter", "web"}
    assert (apps["jupyter"]["port"], apps["jupyter"]["declared"]) == (8090, False)
    assert (apps["web"]["port"], apps["web"]["declared"]) == (8000, True)
    # Nothing runs before the first open: a session that opens no app runs none.
    assert {a["state"] for a in apps.values()} == {"idle"}
    code, out = in_session(session["agent"], f"bai-{NAME}-main1", "pgrep -f [j]upyter || true")
    assert code == 0 and out == "", out
    # main1 publishes the apps' ports beside its sshd's; sub1 publishes nothing.
    ports = inspect(session["agent"], f"bai-{NAME}-main1")["NetworkSettings"]["Ports"]
    assert {"2200/tcp", "8090/tcp", "8000/tcp"} <= set(ports), ports


def test_jupyter_opens_over_https_with_its_link_and_runs_as_work_in_main1(session, jupyter, lab):
    print(f"open (cold): {jupyter['open_s']} s; the app's own start: {jupyter['app']}")
    assert jupyter["started"] is True and jupyter["app"]["url_path"] == "/lab"
    url = jupyter["url"]
    assert url.startswith(f"https://{APPPROXY_PUBLIC}:{jupyter['proxy_port']}/lab?bai_token=")
    user, jar = lab["user"], "/tmp/apps-it-jupyter.jar"
    # The link: a redirect without the token, which sets the route's cookie.
    code, head = curl(user, url, "-i", "-o", "/dev/stderr", "-D", "-")
    assert code == 0, head
    assert " 303 " in head.splitlines()[0] and "location: /lab" in head.lower(), head
    assert f"bai_route_{jupyter['proxy_port']}=" in head and "HttpOnly" in head, head
    began = time.monotonic()
    code, page = curl(user, url, "-L", "-b", jar, "-c", jar)
    first_byte = time.monotonic() - began
    assert code == 0 and "JupyterLab" in page, page[-500:]
    print(f"link to the page (warm app, through the proxy): {first_byte:.3f} s")
    # Later requests carry the cookie only.
    assert status(user, f"{url.split('?')[0].rsplit('/lab', 1)[0]}/api/status", jar) == 200
    # JupyterLab runs in main1 only, as user work, with the session's environment.
    main1, sub1 = f"bai-{NAME}-main1", f"bai-{NAME}-sub1"
    code, out = in_session(session["agent"], main1, "ps -o user= -C jupyter-lab")
    assert (code, out) == (0, "work"), out
    code, env = in_session(
        session["agent"], main1, "tr '\\0' '\\n' < /proc/$(pgrep -o -f [j]upyter-lab)/environ"
    )
    assert code == 0 and "BACKENDAI_CLUSTER_HOSTS=main1,sub1" in env.splitlines(), env
    assert "MASTER_ADDR=main1" in env.splitlines(), env
    other = lab["agent2" if session["agent"] is lab["agent1"] else "agent1"]
    code, out = in_session(other, sub1, "pgrep -f [j]upyter || echo none")
    assert out == "none", out


def test_only_the_routes_own_secret_gets_in(session, jupyter, lab, run_playbook):
    user, url = lab["user"], jupyter["url"]
    path = url.split("?")[0]
    web = open_app(run_playbook, "web")
    assert web["proxy_port"] != jupyter["proxy_port"]
    # Positive control: the right token.
    assert status(user, url) == 303
    refused = {
        "no token": path,
        "a wrong token": f"{path}?bai_token={'x' * 43}",
        "the web route's token": f"{path}?bai_token={token_of(web['url'])}",
    }
    for what, bad in refused.items():
        assert status(user, bad) == 403, what
    # The web route's cookie does not open the jupyter route.
    jar = "/tmp/apps-it-web.jar"
    assert status(user, web["url"], jar) == 303
    assert status(user, path, jar) == 403
    code, body = curl(user, path)
    assert "needs its token" in body, body
    # The route file is root's only (it holds the secret), the proxy's config has no token
    # in its log line, and nothing was logged with the query.
    code, mode = sh(lab["appproxy"], f"stat -c %a {ROUTES}/{NAME}.jupyter.cfg")
    assert (code, mode) == (0, "600"), mode


def test_another_owner_is_refused_as_on_a_login_host(session, jupyter, lab, run_playbook):
    """A login host runs session app with the caller as session_owner_only (bai_cli/login):
    another owner's session is refused by the session ledger, and no route is made."""
    _code, before = sh(lab["appproxy"], f"ls {ROUTES}")
    run = run_playbook(
        "session_app.yml",
        extra_vars={"session_name": NAME, "app_name": "jupyter", "session_owner_only": "bob"},
    )
    assert run.rc != 0, run
    assert f"session {NAME} is held by another owner, not bob" in run.stdout, run.stdout[-2000:]
    _code, after = sh(lab["appproxy"], f"ls {ROUTES}")
    assert after == before
    # Positive control: the session's own owner gets the same link as before.
    own = run_playbook(
        "session_app.yml",
        extra_vars={"session_name": NAME, "app_name": "jupyter", "session_owner_only": "alice"},
    )
    assert own.rc == 0, own
    assert own.stats["bai_session_app"]["url"] == jupyter["url"]


def test_opening_again_keeps_the_link_and_a_dead_app_starts_again(
    session, jupyter, lab, run_playbook
):
    again = open_app(run_playbook, "jupyter")
    assert again["url"] == jupyter["url"] and again["started"] is False
    assert again["app"]["state"] == "running"
    print(f"open (warm, app running): {again['open_s']} s")
    code, out = in_session(session["agent"], f"bai-{NAME}-main1", "pkill -f [j]upyter-lab; echo $?")
    assert code == 0, out
    time.sleep(1)
    revived = open_app(run_playbook, "jupyter")
    assert revived["started"] is True and revived["url"] == jupyter["url"]
    assert status(lab["user"], jupyter["url"]) == 303


def app_metrics(run_playbook):
    """bai-cluster metrics' app samples: {(name, app, result): value} for appproxy."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    run = run_playbook("metrics.yml")
    assert run.rc == 0, run
    out = {}
    for family in text_string_to_metric_families(run.stats["bai_metrics"]):
        for sample in family.samples:
            if sample.name.startswith(("bai_app", "bai_appproxy")):
                labels = sample.labels
                key = (sample.name, labels.get("app", ""), labels.get("result", ""))
                out[key] = sample.value if labels.get("appproxy") == "appproxy" else None
    return out


def test_an_app_that_does_not_listen_in_time_fails_with_its_log_and_is_counted(
    session, jupyter, lab, run_playbook
):
    """The open names the app and shows its log's last lines; bai-cluster metrics counts
    the failed start and then the next (started) one, and the open route."""
    before = app_metrics(run_playbook)
    assert before[("bai_appproxy_up", "", "")] == 1
    assert before[("bai_app_routes", "jupyter", "")] >= 1
    main1 = f"bai-{NAME}-main1"
    code, out = in_session(session["agent"], main1, "pkill -f [j]upyter-lab; echo $?")
    assert code == 0, out
    time.sleep(1)
    extra = {"session_name": NAME, "app_name": "jupyter", "app_start_timeout_s": 0}
    failed = run_playbook("session_app.yml", extra_vars=extra)
    assert failed.rc != 0, failed
    said = " ".join(failed.failures)
    assert "app jupyter did not listen on port 8090 within 0 s" in said, said
    assert "the last lines of its log (/tmp/bai-app-jupyter.log in main1)" in said, said
    # The app went on starting: wait until it listens, then open it again (not a start).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        again = open_app(run_playbook, "jupyter")
        if again["app"]["state"] == "running" and not again["started"]:
            break
        time.sleep(1)
    in_session(session["agent"], main1, "pkill -f [j]upyter-lab")
    time.sleep(1)
    assert open_app(run_playbook, "jupyter")["started"] is True
    after = app_metrics(run_playbook)
    key = ("bai_app_starts_total", "jupyter")
    assert after[(*key, "failed")] == before.get((*key, "failed"), 0) + 1, (before, after)
    assert after[(*key, "started")] == before.get((*key, "started"), 0) + 1, (before, after)


def test_the_apps_list_and_session_show_name_the_open_routes(session, jupyter, run_playbook):
    listed = run_playbook("session_app.yml", extra_vars={"session_name": NAME})
    assert listed.rc == 0, listed
    apps = {a["name"]: a for a in listed.stats["bai_session_app"]["apps"]}
    assert apps["jupyter"]["url"] == jupyter["url"]
    assert apps["jupyter"]["proxy_port"] == jupyter["proxy_port"]
    show = run_playbook(
        str(Path(__file__).resolve().parents[2] / "bai_cli/playbooks/session_show.yml"),
        extra_vars={"session_name": NAME},
    )
    assert show.rc == 0, show
    routes = show.stats["bai_session_show"]["app_routes"]
    assert [(r["app"], r["port"]) for r in routes if r["app"] == "jupyter"] == [
        ("jupyter", jupyter["proxy_port"])
    ]
    assert show.stats["bai_session_show"]["app_address"] == APPPROXY_PUBLIC
    # The show has no secret: it names the route, the link is session app's to give.
    assert token_of(jupyter["url"]) not in json.dumps(show.stats)


def test_a_declared_port_is_routed_to_what_the_user_starts(session, lab, run_playbook):
    agent, main1 = session["agent"], f"bai-{NAME}-main1"
    code, out = on_agent(
        agent,
        "docker",
        "exec",
        "-d",
        "-u",
        "work",
        "-w",
        "/home/work",
        main1,
        "python3",
        "-m",
        "http.server",
        "8000",
    )
    assert code == 0, out
    in_session(agent, main1, "echo hello-from-main1 > /home/work/hello.txt")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        web = open_app(run_playbook, "web")
        if web["app"]["state"] == "running":
            break
    assert web["app"]["state"] == "running", web
    jar = "/tmp/apps-it-web2.jar"
    code, page = curl(
        lab["user"], web["url"].replace("/?", "/hello.txt?"), "-L", "-b", jar, "-c", jar
    )
    assert (code, page) == (0, "hello-from-main1"), page


def test_jupyter_in_a_real_browser_runs_the_mesh_and_the_terminal(session, jupyter, lab, ca):
    missing = missing_tools()
    if missing:
        # CI installs the browser (scripts/browser_setup.sh): there it must not skip.
        assert not os.environ.get("CI"), f"no browser on a CI machine: {missing}"
        pytest.skip(f"no browser here: {', '.join(missing)} (scripts/browser_setup.sh)")
    user_pid = lab["user"].attrs["State"]["Pid"]
    # Each output line gets a marker of its own: "sub1" alone is also in the first line,
    # and the check would pass before ssh answered.
    cell = (
        "import os\n"
        "print('HOSTS=' + os.environ['BACKENDAI_CLUSTER_HOSTS'])\n"
        "!ssh sub1 hostname | sed 's/^/SSH=/'"
    )
    began = time.monotonic()
    seen = jupyter_check(
        jupyter["url"],
        ca,
        user_pid,
        ARTIFACTS,
        cell,
        ["HOSTS=main1,sub1", "SSH=sub1"],
        terminal_command="hostname",
        expect_in_terminal="main1",
    )
    print(f"browser: {time.monotonic() - began:.1f} s; {seen['timings']}; {seen['artifacts']}")
    assert seen["tls_trusted"] is True
    assert "HOSTS=main1,sub1" in seen["notebook_output"]
    assert "SSH=sub1" in seen["notebook_output"].splitlines(), seen["notebook_output"]
    assert "main1" in seen["terminal_output"]
    for shot in ("notebook.png", "terminal.png"):
        assert (ARTIFACTS / shot).stat().st_size > 10_000, shot
    # The same page without the CA trusted: a certificate error (the check above was real).
    untrusted = fetch_status(jupyter["url"], ca, user_pid, trust_ca=False)
    assert untrusted["tls_trusted"] is False and untrusted["cert_error"], untrusted
    # And in the browser too: no token, nothing but the proxy's refusal.
    refused = fetch_status(
        jupyter["url"].split("?")[0], ca, user_pid, ARTIFACTS, screenshot="refused.png"
    )
    assert refused["http_status"] == 403 and "needs its token" in refused["text"], refused


def published_app_ports(session):
    """(agent's compute address, host port) of main1's published app ports: the only
    addresses of the apps inside the lab's networks (the containers' own addresses are on
    the agents' inner networks, which no lab node routes to: probing them from a lab node
    would leave the lab by its default route)."""
    ports = inspect(session["agent"], f"bai-{NAME}-main1")["NetworkSettings"]["Ports"]
    return [(ports[p][0]["HostIp"], int(ports[p][0]["HostPort"])) for p in ("8090/tcp", "8000/tcp")]


def test_direct_paths_to_the_apps_time_out(session, jupyter, lab):
    direct = published_app_ports(session)
    assert all(ip.startswith("10.210.3.") for ip, _port in direct), direct
    for who in ("user", "intruder"):
        found = probe(lab[who], direct)
        assert all(r == "timeout" for r in found.values()), (who, found)
    # Positive control: the app proxy reaches the published app port (its route's backend),
    # and the user reaches the proxy's port.
    found = probe(lab["appproxy"], direct[:1])
    assert found[direct[0]].startswith("open"), found
    route = (APPPROXY_PUBLIC, jupyter["proxy_port"])
    assert probe(lab["user"], [route])[route].startswith("open")


def test_another_session_cannot_reach_the_app_and_its_route_cuts_no_download(
    session, jupyter, lab, run_playbook
):
    """Another session's containers cannot reach the app's published ports. And making that
    session (its SSH route: a reload of the proxy) cuts no connection of this session's: a
    download through the web route, throttled to last across the create, completes."""
    agent, main1, user = session["agent"], f"bai-{NAME}-main1", lab["user"]
    code, out = in_session(agent, main1, "head -c 6291456 /dev/urandom > /home/work/blob.bin")
    assert code == 0, out
    web = open_app(run_playbook, "web")
    assert web["app"]["state"] == "running", web  # http.server from the test above
    jar, blob = "/tmp/apps-it-blob.jar", "/tmp/apps-it-blob"
    assert status(user, web["url"], jar) == 303
    link = web["url"].split("?")[0] + "blob.bin"
    code, out = sh(
        user,
        f"rm -f {blob} {blob}.rc; (curl -sS --cacert {CA_ON_USER} -b {jar} --limit-rate 400k "
        f"-o {blob} {shlex.quote(link)}; echo $? > {blob}.rc) >/dev/null 2>&1 &",
    )
    assert code == 0, out
    sweep(lab, OTHER)
    extra = {
        "session_name": OTHER,
        "session_size": 1,
        "session_resources": {"cpu": 0.5, "mem": "256m"},
    }
    run = run_playbook("session_create.yml", extra_vars=extra)
    try:
        assert run.rc == 0, run
        other_agent = lab[run.stats["bai_session"]["ssh_agent"]]
        targets = published_app_ports(session)
        script = " ".join(
            f"(timeout 3 bash -c 'exec 3<>/dev/tcp/{a}/{p}' 2>/dev/null && echo {a}:{p} open"
            f" || echo {a}:{p} closed) &"
            for a, p in targets
        )
        code, out = in_session(other_agent, f"bai-{OTHER}-main1", f"{script} wait")
        assert code == 0, out
        assert "open" not in out, out
        # Positive control: the same probe from the app proxy reaches both ports.
        code, out = sh(lab["appproxy"], f"bash -c {shlex.quote(script + ' wait')}")
        assert code == 0 and out.count(" open") == len(targets), out
    finally:
        run_playbook("session_destroy.yml", extra_vars={"session_name": OTHER})
        sweep(lab, OTHER)
    wait_for_file = (
        f"for i in $(seq 60); do [ -s {blob}.rc ] && break; sleep 0.5; done; cat {blob}.rc"
    )
    code, rc = sh(user, wait_for_file)
    assert (code, rc) == (0, "0"), rc
    code, size = sh(user, f"stat -c %s {blob}; rm -f {blob} {blob}.rc")
    assert size == "6291456", size


def test_routes_survive_a_proxy_restart(session, jupyter, lab):
    code, out = sh(lab["appproxy"], "service haproxy restart")
    assert code == 0, out
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        code, _out = curl(lab["user"], jupyter["url"], "-o", "/dev/null")
        if code == 0:
            break
        time.sleep(0.3)
    assert status(lab["user"], jupyter["url"]) == 303


def test_reconcile_removes_the_routes_of_sessions_that_are_gone(
    session, jupyter, lab, run_playbook
):
    """A route whose session the ledger does not hold (a create that died after its route
    was made) goes at the next reconcile; a route younger than the prune age stays (a
    create may be making it), and so do the live session's."""
    proxy = lab["appproxy"]

    def plant(name, port, age):
        text = render_route(
            {"session": name, "port": port, "backend_host": "10.210.3.21", "backend_port": 30999}
        )
        path = f"{ROUTES}/{name}.cfg"
        code, out = sh(
            proxy, f"printf '%s' {shlex.quote(text)} > {path} && touch -d '{age}' {path}"
        )
        assert code == 0, out

    plant("gone-it", 10298, "-10 minutes")
    plant("gone-new-it", 10297, "now")
    try:
        run = run_playbook("session_reconcile.yml")
        assert run.rc == 0, run
        assert run.stats["bai_reconcile"]["routes_removed"] == ["gone-it"], run.stats
        code, out = sh(proxy, f"ls {ROUTES}")
        assert code == 0, out
        files = out.split()
        assert "gone-it.cfg" not in files and "gone-new-it.cfg" in files, files
        assert f"{NAME}.jupyter.cfg" in files and f"{NAME}.cfg" in files, files
    finally:
        sh(proxy, f"rm -f {ROUTES}/gone-it.cfg {ROUTES}/gone-new-it.cfg")
    # The live routes still work after the reload the prune made.
    assert status(lab["user"], jupyter["url"]) == 303


def test_destroy_removes_the_routes_and_a_new_session_of_the_name_refuses_the_old_link(
    session, jupyter, lab, run_playbook
):
    user, old = lab["user"], jupyter["url"]
    assert status(user, old) == 303  # positive control, right before the destroy
    run = run_playbook("session_destroy.yml", extra_vars={"session_name": NAME})
    assert run.rc == 0, run
    code, out = sh(lab["appproxy"], f"ls {ROUTES}")
    assert NAME not in out, out
    code, out = curl(user, old, "-o", "/dev/null")
    assert code != 0 and "Failed to connect" in out, out
    again = run_playbook("session_create.yml", extra_vars=session["extra"])
    assert again.rc == 0, again
    fresh = open_app(run_playbook, "jupyter")
    assert fresh["proxy_port"] == jupyter["proxy_port"]  # the lowest free port again
    assert fresh["url"] != old
    assert status(user, old) == 403
    assert status(user, fresh["url"]) == 303
    print(json.dumps({"cold_open_s": jupyter["open_s"], "fresh_open_s": fresh["open_s"]}))
