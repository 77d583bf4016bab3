"""The collection as an operator installs it: built with ``ansible-galaxy collection build``,
installed from the tarball into a temporary directory, used by FQCN from a playbook that
lives outside the repository, with no ansible.cfg of ours.

The checkout itself is linked into the venv's site-packages as bai.cluster (that is how a
clone runs its own playbooks). So that only the installed tarball can answer here, the
run turns off Ansible's scan of sys.path and names its collection paths explicitly: the
temporary install, plus the collections galaxy.yml declares (and community.docker's own
dependency), from the pinned ``ansible`` package. The install resolves galaxy.yml's
dependencies offline against those, as an operator's install would against Galaxy.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.labels import (
    LABEL_HOST,
    LABEL_SESSION,
)
from conftest import REPO, VENV_BIN

pytestmark = pytest.mark.integration

SESSION = "coll1"
# galaxy.yml's dependencies, and community.docker's own.
DEPENDENCIES = (
    "community/docker",
    "community/general",
    "community/crypto",
    "ansible/posix",
    "community/library_inventory_filtering_v1",
)

PLAYBOOK = """\
---
- name: Use the collection's filters and tests by FQCN
  hosts: localhost
  gather_facts: false
  tasks:
    - name: A filter and a test of bai.cluster
      ansible.builtin.assert:
        that:
          - "'10.224.7.0/24' | bai.cluster.bai_cidr_host(5) == '10.224.7.5'"
          - "'{session}' is bai.cluster.session_name"
          - "'Not_A_Name' is not bai.cluster.session_name"

- name: Create a session (modules, action plugins, roles of bai.cluster)
  ansible.builtin.import_playbook: bai.cluster.session_{action}
"""


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: int = 300):
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory, docker_client):
    """(workdir, env): the tarball installed under workdir/collections, nothing else of
    the repository reachable but the inventory copied out of the installed collection."""
    work = tmp_path_factory.mktemp("operator")
    build = _run(
        [str(VENV_BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(work)],
        REPO,
        {"PATH": f"{VENV_BIN}:/usr/bin:/bin"},
    )
    assert build.returncode == 0, build.stderr
    (tarball,) = work.glob("bai-cluster-*.tar.gz")
    # The other collections the playbooks use, and nothing else from site-packages.
    site = Path(
        _run(
            [
                str(VENV_BIN / "python"),
                "-c",
                "import ansible_collections.community as c; print(list(c.__path__)[0])",
            ],
            work,
            {},
        ).stdout.strip()
    ).parent
    deps = work / "deps" / "ansible_collections"
    for dep in DEPENDENCIES:
        (deps / dep).parent.mkdir(parents=True, exist_ok=True)
        (deps / dep).symlink_to(site / dep)

    install = _run(
        [
            str(VENV_BIN / "ansible-galaxy"),
            "collection",
            "install",
            "--offline",
            "-p",
            str(work / "collections"),
            str(tarball),
        ],
        work,
        # Not "already installed": the checkout's link in site-packages is not looked at;
        # galaxy.yml's dependencies are found among the ones linked above.
        {
            "PATH": f"{VENV_BIN}:/usr/bin:/bin",
            "ANSIBLE_COLLECTIONS_PATH": f"{work / 'collections'}:{work / 'deps'}",
            "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false",
        },
    )
    assert install.returncode == 0, install.stdout + install.stderr
    root = work / "collections" / "ansible_collections" / "bai" / "cluster"
    assert (root / "plugins" / "modules" / "bai_session_containers.py").is_file()
    assert not (root / "bench").exists() and not (root / "molecule").exists()

    env = {
        "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(work),
        "ANSIBLE_COLLECTIONS_PATH": f"{work / 'collections'}:{work / 'deps'}",
        "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default",
        "ANSIBLE_NOCOLOR": "1",
    }
    listed = _run(
        [str(VENV_BIN / "ansible-galaxy"), "collection", "list", "bai.cluster"], work, env
    )
    assert str(work / "collections" / "ansible_collections") in listed.stdout, listed.stdout
    assert str(REPO) not in listed.stdout

    (work / "inventory").mkdir()
    _run(["cp", "-r", str(root / "inventories" / "local"), str(work / "inventory")], work, {})
    for action in ("create", "destroy"):
        (work / f"{action}.yml").write_text(PLAYBOOK.format(session=SESSION, action=action))
    yield work, env
    # Whatever happened, leave no session behind.
    for container in docker_client.containers.list(
        all=True, filters={"label": f"{LABEL_SESSION}={SESSION}"}
    ):
        container.remove(force=True)


def _containers(docker_client) -> dict[str, object]:
    found = docker_client.containers.list(all=True, filters={"label": f"{LABEL_SESSION}={SESSION}"})
    return {c.labels[LABEL_HOST]: c for c in found}


def test_installed_collection_creates_and_destroys_a_session(installed, docker_client):
    work, env = installed
    assert not (work / "ansible.cfg").exists()
    create = _run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            "inventory/local",
            "create.yml",
            "-e",
            json.dumps({"session_name": SESSION, "session_size": 2}),
        ],
        work,
        env,
    )
    assert create.returncode == 0, create.stdout[-4000:] + create.stderr[-2000:]

    containers = _containers(docker_client)
    assert sorted(containers) == ["main1", "sub1"]
    main1 = containers["main1"]
    reach = main1.exec_run(["bash", "-c", "ssh sub1 hostname"], user="work")
    assert reach.exit_code == 0, reach.output
    assert reach.output.decode().strip() == "sub1"

    destroy = _run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            "inventory/local",
            "destroy.yml",
            "-e",
            json.dumps({"session_name": SESSION}),
        ],
        work,
        env,
    )
    assert destroy.returncode == 0, destroy.stdout[-4000:] + destroy.stderr[-2000:]
    assert _containers(docker_client) == {}
    assert docker_client.networks.list(filters={"label": f"{LABEL_SESSION}={SESSION}"}) == []


def test_tarball_has_no_checkout_tooling(installed):
    work, _env = installed
    root = work / "collections" / "ansible_collections" / "bai" / "cluster"
    shipped = {p.relative_to(root).parts[0] for p in root.iterdir()}
    assert {"plugins", "roles", "playbooks", "meta", "docs", "README.md", "LICENSE"} <= shipped
    assert not shipped & {"bai_cli", "bench", "molecule", "scripts", ".venv", "Makefile"}
