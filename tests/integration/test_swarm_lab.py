"""site.yml's Swarm and image distribution on the embedded lab (docs/networks.md).

Needs a Docker engine and the lab up (`make lab-up`). Converges site.yml twice, then
looks at the result from inside the nodes: the swarm's members, an overlay that carries
traffic between agent1 and agent2, an image that reaches both agents through the private
registry, and the firewall openings the roles export. Everything a test creates carries
the label ai.backend.test=swarm-lab and is removed by the test.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import uuid
from pathlib import Path

import docker
import pytest
from conftest import ansible
from labtools import node_exec, recap

pytestmark = [pytest.mark.integration, pytest.mark.lab]

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_HOSTS = ["webserver", "manager", "manager2", "manager3", "appproxy", "agent1", "agent2"]
COMPUTE = ipaddress.ip_network("10.210.3.0/24")
SWARM_POOL = "10.196.0.0/14"
TEST_LABEL = "ai.backend.test=swarm-lab"
REGISTRY_PORT = 5000


def playbook(*args: str):
    return ansible("ansible-playbook", *args, timeout=600)


def node_json(client: docker.DockerClient, node: str, *argv: str):
    rc, out = node_exec(client, node, *argv)
    assert rc == 0, (node, argv, out)
    return json.loads(out)


@pytest.fixture(scope="module")
def client() -> docker.DockerClient:
    return docker.from_env()


@pytest.fixture(scope="module")
def converged(site_converged):
    """site.yml twice (shared by the lab's converge tests): (first, second)."""
    return site_converged


# --- converge -------------------------------------------------------------------------
def test_the_shared_converge_succeeded(converged):
    """Its idempotence is test_site_lab's (one test for the one shared converge)."""
    first, second = converged
    assert (first.rc, second.rc) == (0, 0), (first, second)


# --- the swarm ------------------------------------------------------------------------
def test_swarm_has_three_managers_and_both_agents_ready(converged, client):
    nodes = node_json(
        client, "manager", "sh", "-c", "docker node ls -q | xargs docker node inspect"
    )
    by_host = {n["Description"]["Hostname"]: n for n in nodes}
    managers = ("manager", "manager2", "manager3")
    assert sorted(by_host) == ["agent1", "agent2", *managers]
    assert all(n["Status"]["State"] == "ready" for n in nodes), [n["Status"] for n in nodes]
    assert [by_host[m]["Spec"]["Role"] for m in managers] == ["manager"] * 3
    # Every manager takes part in the raft quorum; one of them leads (not necessarily the
    # first: another test stops it).
    statuses = [by_host[m]["ManagerStatus"] for m in managers]
    assert all(s["Reachability"] == "reachable" for s in statuses), statuses
    assert sum(bool(s.get("Leader")) for s in statuses) == 1, statuses
    assert [by_host[a]["Spec"]["Role"] for a in ("agent1", "agent2")] == ["worker", "worker"]
    # Advertised (and data-path) addresses lie on the compute network, not management.
    for node in nodes:
        assert ipaddress.ip_address(node["Status"]["Addr"]) in COMPUTE, node["Status"]
    # Agents carry their resource group as a node label.
    for agent in ("agent1", "agent2"):
        assert by_host[agent]["Spec"]["Labels"]["ai.backend.resource-group"] == "default"


NODE_CERT = "/var/lib/docker/swarm/certificates/swarm-node.crt"
CERT_SUBJECT = (
    "import json, ssl, sys; "
    "subject = ssl._ssl._test_decode_cert(sys.argv[1])['subject']; "
    "print(json.dumps({k: v for rdn in subject for k, v in rdn}))"
)


def test_agents_belong_to_the_managers_swarm(client):
    """Not just "some swarm": each agent's node certificate, issued by the swarm's CA,
    names the manager's cluster ID and the agent's node ID as a worker; the manager lists
    that node ID with the agent's hostname and compute address; the agent's remote
    managers are the three managers. (Read-only; runs on the lab as it is.)"""
    manager = node_json(client, "manager", "docker", "info", "--format", "{{json .Swarm}}")
    managers = {
        node_json(client, m, "docker", "info", "--format", "{{json .Swarm}}")["NodeID"]
        for m in ("manager", "manager2", "manager3")
    }
    cluster = manager["Cluster"]["ID"]
    listed = {
        n["ID"]: n
        for n in node_json(
            client, "manager", "sh", "-c", "docker node ls -q | xargs docker node inspect"
        )
    }
    for agent in ("agent1", "agent2"):
        swarm = node_json(client, agent, "docker", "info", "--format", "{{json .Swarm}}")
        assert swarm["LocalNodeState"] == "active" and swarm["ControlAvailable"] is False
        subject = node_json(client, agent, "python3", "-c", CERT_SUBJECT, NODE_CERT)
        assert subject == {
            "organizationName": cluster,
            "organizationalUnitName": "swarm-worker",
            "commonName": swarm["NodeID"],
        }, (agent, subject)
        node = listed[swarm["NodeID"]]
        assert node["Description"]["Hostname"] == agent
        assert node["Status"]["Addr"] == swarm["NodeAddr"]
        assert node["Spec"]["Role"] == "worker"
        assert {m["NodeID"] for m in swarm["RemoteManagers"]} == managers


def test_swarm_uses_its_own_pool_and_the_manager_listens_on_the_compute_address(converged, client):
    swarm = node_json(client, "manager", "docker", "info", "--format", "{{json .Swarm}}")
    assert swarm["Cluster"]["DefaultAddrPool"] == [SWARM_POOL]
    assert swarm["Cluster"]["SubnetSize"] == 24
    assert ipaddress.ip_address(swarm["NodeAddr"]) in COMPUTE
    ingress = node_json(client, "manager", "docker", "network", "inspect", "ingress")
    subnet = ipaddress.ip_network(ingress[0]["IPAM"]["Config"][0]["Subnet"])
    assert subnet.subnet_of(ipaddress.ip_network(SWARM_POOL)), subnet
    # No live-restore anywhere (Swarm refuses it).
    for node in ("manager", "agent1", "agent2"):
        info = node_json(client, node, "docker", "info", "--format", "{{json .}}")
        assert info["LiveRestoreEnabled"] is False


# Docker's answer when a worker's attach to an attachable overlay was not allocated by the
# managers within its deadline. It happens on a loaded machine (CI of 2291a45: while the
# Molecule scenario booted beside the lab's tests); the toolkit's own container start tries
# again on it (module_utils/containers/readiness.py), and so does run_attached.
ATTACH_TIMEOUT = "attaching to network failed"


def run_attached(client, node: str, name: str, argv: list[str], tries: int = 3) -> tuple[int, str]:
    """``docker run --name NAME ARGV`` on ``node``, tried again (after removing what the
    failed try left) only when the overlay's attach timed out; each miss is printed."""
    for attempt in range(1, tries + 1):
        rc, out = node_exec(client, node, "docker", "run", "--name", name, *argv)
        if rc == 0 or ATTACH_TIMEOUT not in out or attempt == tries:
            return rc, out
        print(f"{node}: attach of {name} timed out (try {attempt} of {tries}): {out.strip()}")
        node_exec(client, node, "docker", "rm", "-f", name)
    return rc, out


def test_attachable_overlay_carries_traffic_between_agents_by_name(converged, client):
    tag = uuid.uuid4().hex[:8]
    net, server, caller = f"bai-test-ov-{tag}", f"bai-test-srv-{tag}", f"bai-test-cli-{tag}"
    label = ["--label", TEST_LABEL]
    serve = (
        "import socket; s = socket.socket(); s.bind(('', 8000)); s.listen()\n"
        "while True:\n c, _ = s.accept(); c.sendall(socket.gethostname().encode()); c.close()"
    )
    call = (
        f"for i in $(seq 50); do exec 3<>/dev/tcp/{server}/8000 && break; sleep 0.2; done; "
        "cat <&3; echo; cat /sys/class/net/eth0/mtu"
    )
    try:
        rc, out = node_exec(
            client,
            "manager",
            "docker",
            "network",
            "create",
            "--driver",
            "overlay",
            "--attachable",
            *label,
            net,
        )
        assert rc == 0, out
        rc, out = run_attached(
            client,
            "agent1",
            server,
            ["-d", "--hostname", server, "--network", net, *label, "--entrypoint", "python3",
             "bai/session:latest", "-c", serve],
        )  # fmt: skip
        assert rc == 0, out
        rc, out = run_attached(
            client,
            "agent2",
            caller,
            ["--rm", "--network", net, *label, "--entrypoint", "bash", "bai/session:latest",
             "-c", call],
        )  # fmt: skip
        assert rc == 0, out
        answer, mtu = out.split()[-2:]
        assert answer == server  # reached by name, across agents, through VXLAN
        assert int(mtu) == 1450  # underlay 1500 minus VXLAN's 50
    finally:
        for node in ("agent1", "agent2"):
            node_exec(
                client,
                node,
                "sh",
                "-c",
                f"docker ps -aq --filter label={TEST_LABEL} | xargs -r docker rm -f",
            )
        node_exec(
            client,
            "manager",
            "sh",
            "-c",
            f"docker network ls -q --filter label={TEST_LABEL} | xargs -r docker network rm",
        )
    rc, out = node_exec(
        client, "manager", "docker", "network", "ls", "-q", "--filter", f"label={TEST_LABEL}"
    )
    assert out.strip() == ""


# --- exported data --------------------------------------------------------------------
def test_firewall_openings_are_exported_even_when_only_another_tag_runs(converged, tmp_path):
    """A later host_firewall play reads them; they are set with tag always."""
    probe = tmp_path / "probe.yml"
    probe.write_text(
        f"- ansible.builtin.import_playbook: {ROOT}/site.yml\n"
        "- hosts: manager:agents\n"
        "  gather_facts: false\n"
        "  tasks:\n"
        "    - ansible.builtin.copy:\n"
        '        content: \'{{ {"swarm": docker_swarm_firewall_openings,'
        ' "registry": image_distribution_firewall_openings} | to_json }}\'\n'
        f"        dest: '{tmp_path}/{{{{ inventory_hostname }}}}.json'\n"
        "        mode: '0600'\n"
        "      delegate_to: localhost\n"
        "      tags: [always]\n"
    )
    res = playbook(str(probe), "--tags", "host_firewall")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert sorted(p.stem for p in tmp_path.glob("*.json")) == ["agent1", "agent2", "manager"]
    openings = json.loads((tmp_path / "agent1.json").read_text())
    both = ["manager", "agents"]
    assert sorted((o["port"], o["proto"]) for o in openings["swarm"]) == [
        (2377, "tcp"),
        (4789, "udp"),
        (7946, "tcp"),
        (7946, "udp"),
    ]
    for o in openings["swarm"]:
        assert o["from_groups"] == both
        assert o["on_groups"] == (["manager"] if o["port"] == 2377 else both)
    assert openings["registry"] == [
        {
            "port": REGISTRY_PORT,
            "proto": "tcp",
            "purpose": "private image registry (session images)",
            "on_groups": ["manager"],
            "from_groups": both,
        }
    ]


# --- images through the private registry ----------------------------------------------
def image_id(client: docker.DockerClient, node: str | None, name: str) -> str:
    if node is None:
        return client.images.get(name).id
    rc, out = node_exec(client, node, "docker", "image", "inspect", "--format", "{{.Id}}", name)
    return out.strip() if rc == 0 else ""


def test_session_image_on_both_agents_matches_the_controller(converged, client):
    wanted = image_id(client, None, "bai/session:latest")
    assert [image_id(client, a, "bai/session:latest") for a in ("agent1", "agent2")] == [wanted] * 2


@pytest.fixture
def probe_image(client):
    """A tiny image only the controller has (a label on top of the session image)."""
    tag = f"bai-test/swarm-probe:{uuid.uuid4().hex[:10]}"
    build = subprocess.run(
        [
            "docker",
            "build",
            "-q",
            "-t",
            tag,
            "--label",
            TEST_LABEL,
            "--label",
            f"ai.backend.test.nonce={tag}",
            "-",
        ],
        input="FROM bai/session:latest\n",
        text=True,
        capture_output=True,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
        timeout=120,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    yield tag
    for node in ("manager", "agent1", "agent2"):
        node_exec(
            client,
            node,
            "sh",
            "-c",
            f"docker images -q --filter label={TEST_LABEL} | sort -u | xargs -r docker rmi -f",
        )
    client.images.remove(tag, force=True)


def test_image_reaches_both_agents_through_the_registry_once(converged, client, probe_image):
    wanted = image_id(client, None, probe_image)
    images = json.dumps({"image_distribution_images": ["bai/session:latest", probe_image]})
    first = playbook("site.yml", "--tags", "image_distribution", "-e", images)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    registry = ""
    for agent in ("agent1", "agent2"):
        assert image_id(client, agent, probe_image) == wanted
        inspect = node_json(client, agent, "docker", "image", "inspect", probe_image)[0]
        # Pulled from the manager's registry by digest, not docker-loaded.
        (digest,) = inspect["RepoDigests"]
        registry = digest.split("/")[0]
        assert ipaddress.ip_address(registry.split(":")[0]) in COMPUTE
        assert registry.endswith(f":{REGISTRY_PORT}")
    repo, tag = probe_image.rsplit(":", 1)
    rc, out = node_exec(
        client,
        "manager",
        "curl",
        "-fsS",
        "--cacert",
        registry_ca(registry),
        "-H",
        "Accept: application/vnd.docker.distribution.manifest.v2+json",
        f"https://{registry}/v2/{repo}/manifests/{tag}",
    )
    assert rc == 0, out
    # The registry holds the controller's image: its config digest is the image ID.
    assert json.loads(out)["config"]["digest"] == wanted
    again = playbook("site.yml", "--tags", "image_distribution", "-e", images)
    assert again.returncode == 0, again.stdout[-3000:]
    assert all(r["changed"] == 0 for r in recap(again.stdout).values()), again.stdout[-3000:]
    # Leave the registry as it was: drop the probe's manifest (its layers are the session
    # image's).
    node_exec(
        client,
        "manager",
        "sh",
        "-c",
        f"ca={registry_ca(registry)}; "
        "d=$(curl -fsSI --cacert $ca "
        "-H 'Accept: application/vnd.docker.distribution.manifest.v2+json' "
        f"https://{registry}/v2/{repo}/manifests/{tag} | tr -d '\\r' "
        "| awk 'tolower($1)==\"docker-content-digest:\" {print $2}'); "
        f"curl -fsS --cacert $ca -X DELETE https://{registry}/v2/{repo}/manifests/$d",
    )


def registry_ca(registry: str) -> str:
    """Where every engine finds the CA certificate it verifies the registry with."""
    return f"/etc/docker/certs.d/{registry}/ca.crt"


def registry_of(client: docker.DockerClient) -> str:
    """The registry's ADDRESS:PORT: the first manager's compute address (the lab's agents
    got the session image from the lab's own load, so its RepoDigests name no registry)."""
    networks = client.containers.get("bai-lab-manager").attrs["NetworkSettings"]["Networks"]
    return f"{networks['bai-lab-compute']['IPAddress']}:{REGISTRY_PORT}"


def session_image_digest(client: docker.DockerClient) -> str:
    """REGISTRY:PORT/bai/session@sha256:... as site.yml pushed it (the manifest's digest)."""
    registry = registry_of(client)
    rc, out = node_exec(
        client,
        "manager",
        "sh",
        "-c",
        f"curl -fsSI --cacert {registry_ca(registry)} "
        "-H 'Accept: application/vnd.docker.distribution.manifest.v2+json' "
        f"https://{registry}/v2/bai/session/manifests/latest | tr -d '\\r' "
        "| awk 'tolower($1)==\"docker-content-digest:\" {print $2}'",
    )
    assert rc == 0 and out.strip().startswith("sha256:"), out
    return f"{registry}/bai/session@{out.strip()}"


def test_no_engine_lists_an_insecure_registry(converged, client):
    """The registry is verified by the cluster's CA: no engine marks anything but Docker's
    own loopback default insecure, and daemon.json names no insecure registry."""
    for node in ("manager", "agent1", "agent2"):
        cidrs = node_json(
            client,
            node,
            "docker",
            "info",
            "--format",
            "{{json .RegistryConfig.InsecureRegistryCIDRs}}",
        )
        assert cidrs == ["127.0.0.0/8"], (node, cidrs)
        daemon = node_json(client, node, "cat", "/etc/docker/daemon.json")
        assert "insecure-registries" not in daemon, (node, daemon)


def test_registry_serves_tls_from_the_cluster_ca(converged, client):
    registry = registry_of(client)
    address, port = registry.rsplit(":", 1)
    assert ipaddress.ip_address(address) in COMPUTE and int(port) == REGISTRY_PORT
    # Every engine holds the CA that site.yml made on the app proxy host (the CA key's host).
    rc, ca = node_exec(client, "appproxy", "cat", "/etc/bai-ca/ca.pem")
    assert rc == 0 and "BEGIN CERTIFICATE" in ca, ca
    for node in ("manager", "agent1", "agent2"):
        assert node_exec(client, node, "cat", registry_ca(registry)) == (0, ca), node
    # The registry's certificate verifies against that CA for its address (the manager
    # has openssl: it holds the registry's key).
    rc, out = node_exec(
        client,
        "manager",
        "sh",
        "-c",
        f"openssl s_client -connect {registry} -CAfile {registry_ca(registry)} "
        f"-verify_return_error -verify_ip {address} </dev/null 2>&1",
    )
    assert rc == 0 and "Verify return code: 0 (ok)" in out, out
    rc, out = node_exec(
        client,
        "agent1",
        "curl",
        "-fsS",
        "--cacert",
        registry_ca(registry),
        f"https://{registry}/v2/",
    )
    assert rc == 0, out
    # Plain HTTP is not served: the registry answers only TLS (Go's 400 for HTTP on a TLS port).
    rc, out = node_exec(
        client,
        "agent1",
        "curl",
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        f"http://{registry}/v2/",
    )
    assert out.strip() == "400", out


def test_an_engine_without_the_ca_fails_the_pull_and_never_falls_back(converged, client):
    """An engine without the cluster's CA gets Docker's certificate error for the
    registry, not an unverified or plain-HTTP pull."""
    digest = session_image_digest(client)
    registry = registry_of(client)
    ca = registry_ca(registry)
    rc, out = node_exec(client, "agent2", "mv", ca, ca + ".moved")
    assert rc == 0, out
    try:
        rc, out = node_exec(client, "agent2", "docker", "pull", digest)
        refused = (rc, out)
    finally:
        node_exec(client, "agent2", "mv", ca + ".moved", ca)
    assert refused[0] != 0, refused
    assert "x509" in refused[1] or "certificate" in refused[1], refused
    # With the CA back, the same pull works (the control).
    rc, out = node_exec(client, "agent2", "docker", "pull", digest)
    assert rc == 0, out
