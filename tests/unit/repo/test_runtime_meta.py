"""meta/runtime.yml: the action group ``bai.cluster.cluster`` holds every module, so
``module_defaults: {group/bai.cluster.cluster: {...}}`` reaches each of them.

The static checks read the files; one small localhost play (about 2 s, no Docker, no
host) shows that Ansible resolves the group and applies its defaults to a task.
"""

from __future__ import annotations

import ast
import importlib
import textwrap
from pathlib import Path

import yaml
from ansible_collections.bai.cluster.plugins.doc_fragments.attributes import ModuleDocFragment
from ansible_collections.bai.cluster.plugins.module_utils.engine.common import DOCKER_ARGUMENT_SPEC
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.ledger_store import (
    STORE_ARGUMENT_SPEC,
)
from playbook_run import ansible_playbook

ROOT = Path(__file__).resolve().parents[3]
MODULES = ROOT / "plugins" / "modules"
GROUP = "cluster"
FRAGMENTS = "ansible_collections.bai.cluster.plugins.doc_fragments"


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


def documented_options(module: str) -> set[str]:
    """The options a module documents, with those of its documentation fragments
    (ansible-test sanity checks them against its argument_spec)."""
    doc = documentation(module)
    options = set(doc.get("options") or {})
    for fragment in doc.get("extends_documentation_fragment") or []:
        parts = fragment.split(".")  # bai.cluster.NAME[.VARIANT]
        holder = importlib.import_module(f"{FRAGMENTS}.{parts[2]}").ModuleDocFragment
        text = getattr(holder, parts[3].upper() if len(parts) > 3 else "DOCUMENTATION")
        options |= set((yaml.safe_load(text) or {}).get("options") or {})
    return options


def test_the_docker_group_is_the_modules_with_the_docker_options():
    """group/bai.cluster.docker: docker_host and the other connection options reach
    exactly the modules that take them."""
    takes = [m for m in module_names() if set(DOCKER_ARGUMENT_SPEC) <= documented_options(m)]
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


# --- group/bai.cluster.ledger: where the session ledger is, given once per play ----------
LEDGER = "group/bai.cluster.ledger"
WHERE = "{{ session__ledger_where }}"
TASK_LISTS = ("pre_tasks", "tasks", "post_tasks", "handlers", "block", "rescue", "always")
INCLUDES = ("import_tasks", "include_tasks")


def test_the_ledger_group_is_the_modules_with_the_ledger_options():
    takes = [m for m in module_names() if set(STORE_ARGUMENT_SPEC) <= documented_options(m)]
    assert sorted(runtime()["action_groups"]["ledger"]) == takes


def ledger_tasks(tasks: list, folder: Path, ledger_modules: set[str]):
    """(task, where) for each task that reads or changes the ledger, in a task list and
    in the task files it imports or includes by a literal name."""
    for task in tasks or []:
        for key in TASK_LISTS:
            if key in task:
                yield from ledger_tasks(task[key], folder, ledger_modules)
        for key in INCLUDES:
            target = task.get(f"ansible.builtin.{key}", task.get(key))
            target = target.get("file") if isinstance(target, dict) else target
            if target and "{{" not in target:
                path = folder / target
                yield from ledger_tasks(
                    yaml.safe_load(path.read_text()), path.parent, ledger_modules
                )
        for module in ledger_modules:
            args = task.get(f"bai.cluster.{module}")
            if args is None:
                continue
            if module == "bai_agent_availability" and args.get("scope", "agent") == "agent":
                continue  # the agent's own record: no ledger
            yield task, args


def test_every_play_that_uses_the_ledger_gives_its_place_once():
    """A ledger task's store and path come from the play's module_defaults (from
    vars/session.yml), never written at the task: one that is forgotten would silently
    use the module's default, a file ledger. A literal ``store: swarm`` (asking a manager
    for the swarm's ledger) is the exception."""
    ledger_modules = set(runtime()["action_groups"]["ledger"])
    plays_using = 0
    for playbook in sorted((ROOT / "playbooks").glob("*.yml")):
        for play in yaml.safe_load(playbook.read_text()) or []:
            if "hosts" not in play:
                continue
            tasks = [t for key in TASK_LISTS[:4] for t in play.get(key) or []]
            found = list(ledger_tasks(tasks, playbook.parent, ledger_modules))
            where = f"{playbook.name}: {play.get('name')}"
            for task, args in found:
                assert "path" not in args, f"{where}: {task.get('name')} writes the ledger path"
                assert args.get("store", "swarm") == "swarm", f"{where}: {task.get('name')}"
            if any("store" not in args for _task, args in found):
                plays_using += 1
                assert (play.get("module_defaults") or {}).get(LEDGER) == WHERE, where
                assert play.get("vars_files") == "vars/session.yml", where
    assert plays_using >= 20  # the session, agent and maintenance playbooks
