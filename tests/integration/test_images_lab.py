"""Images: content-hash tags (playbooks/image_build.yml) and image_distribution_method load.

README "Images (no registry)" and roles/session_image: tags are content hashes of the
build inputs, so a rerun builds nothing and a changed file gives a new tag.
roles/image_distribution, method `load`: `docker save` on the controller, copy, `docker
load` on each agent that lacks the image; no registry involved.

Each test uses a throwaway image `bai-test/images-<nonce>` (FROM scratch, one small file),
built through image_build.yml's `image_build_extra`, so the lab's own images and the
registry site.yml set up are only read. Needs the lab up for the distribution test.
"""

from __future__ import annotations

import json
import re
import uuid

import docker
import pytest
from labtools import on_agent

pytestmark = [pytest.mark.integration, pytest.mark.lab]

LAB_IMAGES = ("bai/session:latest", "bai/session-apps:latest", "bai/lab-node:latest")
DOCKERFILE = "ARG BASE_IMAGE\nFROM scratch\nCOPY probe.txt /probe.txt\n"
BUILD_TASK = re.compile(r"^Build (\S+:[0-9a-f]{16})$")


def builds(run) -> dict[str, bool]:
    """image reference -> whether its "Build <name>:<hash>" task changed something."""
    found = {}
    for play in run.result.get("plays", []):
        for task in play.get("tasks", []):
            match = BUILD_TASK.match(task["task"]["name"].split(" : ", 1)[-1])
            if match:
                found[match.group(1)] = bool(task["hosts"]["localhost"].get("changed"))
    return found


def controller_image(client, ref: str) -> dict:
    image = client.images.get(ref)
    return {"id": image.id, "created": image.attrs["Created"], "tags": sorted(image.tags)}


def repo_tags(client, repo: str) -> dict[str, str]:
    """tag -> image ID of every tag of ``repo`` on the controller."""
    return {
        tag.rsplit(":", 1)[1]: image.id
        for image in client.images.list(name=repo)
        for tag in image.tags
        if tag.rsplit(":", 1)[0] == repo
    }


@pytest.fixture(scope="module", autouse=True)
def _images_built(docker_client):
    try:
        docker_client.images.get("bai/session:latest")
    except docker.errors.ImageNotFound:
        pytest.skip("bai/session:latest is not built (make images)")


@pytest.fixture(scope="module")
def probe(tmp_path_factory, docker_client, run_playbook):
    """image_build.yml twice with one extra, throwaway image; the runs and the image IDs
    read after each."""
    repo = f"bai-test/images-{uuid.uuid4().hex[:10]}"
    context = tmp_path_factory.mktemp("probe-context")
    (context / "Dockerfile").write_text(DOCKERFILE)
    (context / "probe.txt").write_text(f"{repo} v1\n")
    extra = {"image_build_extra": [{"name": repo, "context": str(context)}]}
    try:
        first = run_playbook("image_build.yml", extra_vars=extra)
        assert first.rc == 0, first
        after_first = {ref: controller_image(docker_client, ref) for ref in LAB_IMAGES}
        tags_first = repo_tags(docker_client, repo)
        second = run_playbook("image_build.yml", extra_vars=extra)
        yield {
            "repo": repo,
            "context": context,
            "extra": extra,
            "first": first,
            "second": second,
            "lab_images": after_first,
            "tags": tags_first,
        }
    finally:
        for image_id in set(repo_tags(docker_client, repo).values()):
            docker_client.images.remove(image_id, force=True)


def v1_ref(probe) -> str:
    (tag,) = [t for t in probe["tags"] if t != "latest"]
    return f"{probe['repo']}:{tag}"


# --- 1. content-hash tags -------------------------------------------------------------
def test_image_build_rerun_rebuilds_nothing(probe, docker_client):
    """The second run changes nothing: no build, no retag, every image ID (and creation
    time) as after the first run."""
    first, second = probe["first"], probe["second"]
    assert second.rc == 0, second
    assert second.changed("localhost") == 0, second
    # The first run did build the new image (so the second had something to skip).
    assert builds(first)[v1_ref(probe)] is True
    assert builds(second) == dict.fromkeys(builds(first), False)
    # bai/session, bai/session-apps, bai/lab-node and the probe.
    assert len(builds(second)) == 4, builds(second)
    for ref, before in probe["lab_images"].items():
        assert controller_image(docker_client, ref) == before, ref
    assert repo_tags(docker_client, probe["repo"]) == probe["tags"]
    # One content-hash tag plus latest, on the same image.
    assert sorted(probe["tags"]) == sorted([v1_ref(probe).rsplit(":", 1)[1], "latest"])
    assert len(set(probe["tags"].values())) == 1


def test_image_tag_follows_the_build_context(probe, docker_client, run_playbook):
    """A changed file gives a new tag and a new image; the same content again gives the
    old tag back without a build. The lab's images are not touched meanwhile."""
    repo, probe_file = probe["repo"], probe["context"] / "probe.txt"
    old_tag = v1_ref(probe).rsplit(":", 1)[1]
    old = controller_image(docker_client, v1_ref(probe))
    lab_builds = {ref: False for ref in builds(probe["second"]) if not ref.startswith(repo)}
    try:
        probe_file.write_text(f"{repo} v2\n")
        changed = run_playbook("image_build.yml", extra_vars=probe["extra"])
        assert changed.rc == 0, changed
        tags = repo_tags(docker_client, repo)
        (new_tag,) = set(tags) - {old_tag, "latest"}
        assert tags[new_tag] != old["id"] and tags["latest"] == tags[new_tag]
        assert tags[old_tag] == old["id"]  # the replaced build keeps its hash tag
        assert builds(changed) == {**lab_builds, f"{repo}:{new_tag}": True}
    finally:
        probe_file.write_text(f"{repo} v1\n")
    back = run_playbook("image_build.yml", extra_vars=probe["extra"])
    assert back.rc == 0, back
    assert builds(back) == {**lab_builds, f"{repo}:{old_tag}": False}
    tags = repo_tags(docker_client, repo)
    assert set(tags) == {old_tag, new_tag, "latest"}
    assert tags["latest"] == old["id"]
    assert controller_image(docker_client, v1_ref(probe))["created"] == old["created"]
    for ref, before in probe["lab_images"].items():
        assert controller_image(docker_client, ref) == before, ref


# --- 2. image_distribution_method: load -----------------------------------------------
LOAD_PLAY = """\
- name: Session images by docker save | docker load (roles/image_distribution)
  hosts: manager[0:]:agents
  gather_facts: false
  roles:
    - role: bai.cluster.image_distribution
"""


def node_image(node, ref: str) -> dict | None:
    code, out = on_agent(node, "docker", "image", "inspect", ref)
    return json.loads(out)[0] if code == 0 else None


# Through the Docker connection as root, and over SSH as bai-admin with sudo (the
# controller's archive is copied over SFTP/SCP into the account's temporary folder and
# loaded as root), as on a real cluster.
@pytest.mark.parametrize("inventory", [None, "inventories/lab-ssh"], ids=["docker", "ssh"])
def test_method_load_puts_the_image_on_every_agent_without_the_registry(
    probe, docker_client, lab, manager, run_playbook, tmp_path, inventory
):
    agents = lab.agents
    ref = v1_ref(probe)
    wanted = docker_client.images.get(ref).id
    registry = manager.attrs["NetworkSettings"]["Networks"]["bai-lab-compute"]["IPAddress"]
    ca = f"/etc/docker/certs.d/{registry}:5000/ca.crt"
    catalog_cmd = ("curl", "-fsS", "--cacert", ca, f"https://{registry}:5000/v2/_catalog?n=1000")
    code, catalog = on_agent(manager, *catalog_cmd)
    assert code == 0, catalog
    session_ids = {a: node_image(n, "bai/session:latest")["Id"] for a, n in agents.items()}
    archives = tmp_path / "archives"
    play = tmp_path / "load.yml"
    play.write_text(LOAD_PLAY)
    extra = {
        "image_distribution_method": "load",
        "image_distribution_images": [ref],
        "image_distribution_controller_dir": str(archives),
    }
    try:
        assert all(node_image(n, ref) is None for n in [*agents.values(), manager])
        first = run_playbook(str(play), extra_vars=extra, inventory=inventory)
        assert first.rc == 0, first
        assert first.changed("agent1") > 0 and first.changed("agent2") > 0, first
        # (The manager's "changed" counts the run_once archive steps done on the
        # controller; what reaches the manager itself is checked below.)
        for agent, node in agents.items():
            image = node_image(node, ref)
            assert image is not None, f"{ref} did not reach {agent}"
            assert image["Id"] == wanted, agent
            # docker load, not a pull: a pulled image records the registry's digest.
            assert image["RepoDigests"] == [], (agent, image["RepoDigests"])
            code, left = on_agent(node, "sh", "-c", "ls /var/tmp | grep '[.]tar$' || true")
            assert left == "", f"archives left on {agent}: {left}"
        # The registry and its host were not involved.
        assert node_image(manager, ref) is None
        assert on_agent(manager, *catalog_cmd) == (0, catalog)
        assert probe["repo"] not in json.loads(catalog)["repositories"]
        assert not archives.exists() or list(archives.iterdir()) == []
        # A second run finds the image everywhere and changes nothing.
        again = run_playbook(str(play), extra_vars=extra, inventory=inventory)
        assert again.rc == 0, again
        assert {h: again.changed(h) for h in ("manager", "agent1", "agent2")} == {
            "manager": 0,
            "agent1": 0,
            "agent2": 0,
        }, again
        assert [node_image(n, ref)["Id"] for n in agents.values()] == [wanted, wanted]
        # What site.yml distributed through the registry is still there.
        assert {a: node_image(n, "bai/session:latest")["Id"] for a, n in agents.items()} == (
            session_ids
        )
    finally:
        for node in agents.values():
            on_agent(node, "docker", "rmi", "-f", ref)
