"""meta/runtime.yml: the action group ``bai.cluster.cluster`` holds every module, so
``module_defaults: {group/bai.cluster.cluster: {...}}`` reaches each of them.

The static checks read the files; one small localhost play (about 2 s, no Docker, no
host) shows that Ansible resolves the group and applies its defaults to a task.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import yaml
from ansible_collections.bai.cluster.plugins.doc_fragments.attributes import ModuleDocFragment
from playbook_run import ansible_playbook

ROOT = Path(__file__).resolve().parents[3]
MODULES = ROOT / "plugins" / "modules"
GROUP = "cluster"


def runtime() -> dict:
    return yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())


def module_names() -> list[str]:
    return sorted(p.stem for p in MODULES.glob("*.py") if p.stem != "__init__")


def documentation(module: str) -> dict:
    """The module's DOCUMENTATION, read without importing the module."""
    tree = ast.parse((MODULES / f"{module}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "DOCUMENTATION" for t in node.targets
        ):
            assert isinstance(node.value, ast.Constant)
            return yaml.safe_load(node.value.value)
    raise AssertionError(f"{module}: no DOCUMENTATION")


def test_the_group_lists_every_module_and_nothing_else():
    listed = runtime()["action_groups"][GROUP]
    assert sorted(listed) == module_names()
    assert len(listed) == len(set(listed)), "a module is listed twice"


def test_the_docker_group_is_the_modules_with_the_docker_options():
    """group/bai.cluster.docker: docker_host and the other connection options reach
    exactly the modules that take them."""
    takes = [
        m for m in module_names() if "DOCKER_ARGUMENT_SPEC" in (MODULES / f"{m}.py").read_text()
    ]
    assert sorted(runtime()["action_groups"]["docker"]) == takes


def test_every_module_documents_its_group():
    fragment = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)
    assert fragment["attributes"]["action_group"]["membership"] == [f"bai.cluster.{GROUP}"]
    for module in module_names():
        fragments = documentation(module).get("extends_documentation_fragment") or []
        assert "bai.cluster.attributes" in fragments, module


PLAYBOOK = textwrap.dedent(
    """\
    - name: Group defaults reach a module of bai.cluster
      hosts: localhost
      connection: local
      gather_facts: false
      module_defaults:
        group/bai.cluster.cluster:
          name: grouped
          size: 2
      tasks:
        - name: A task with only the group's defaults
          bai.cluster.bai_session_plan: {}
          register: by_group

        - name: A task's own option wins over the group's
          bai.cluster.bai_session_plan:
            name: own
          register: own

        - name: Check what each task was given
          ansible.builtin.assert:
            that:
              - by_group.spec.name == 'grouped'
              - by_group.hosts | length == 2
              - own.spec.name == 'own'
              - own.hosts | length == 2
    """
)


def test_module_defaults_for_the_group_reach_a_module(tmp_path):
    # This checkout as the collection bai.cluster, in a collections path of its own.
    link = tmp_path / "collections" / "ansible_collections" / "bai" / "cluster"
    link.parent.mkdir(parents=True)
    link.symlink_to(ROOT)
    (tmp_path / "ansible.cfg").write_text("")
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    proc = ansible_playbook(
        ["-i", "localhost,", str(tmp_path / "play.yml")],
        tmp_path,
        env={
            "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg"),
            "ANSIBLE_COLLECTIONS_PATH": str(tmp_path / "collections"),
            "ANSIBLE_NOCOLOR": "1",
        },
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
