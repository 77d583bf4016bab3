"""Run one of the project's playbooks through ansible-runner, leaving nothing on disk.

Every run gets a private data dir from :func:`tempfile.mkdtemp` (mode 0700) that is
removed when the run ends, whatever happens:

- extravars go to ``env/extravars`` in that dir, created with mode 0600 (never on the
  command line, never in the environment); ansible-runner passes it as ``-e @file``.
  Every string in it that Jinja would see a template in is tagged ``!unsafe``
  (:func:`unsafe_yaml`): a request's values are data, which Ansible never renders as
  templates (docs/security.md);
- ``suppress_env_files=True``: ansible-runner writes none of its ``env/*`` files;
- artifacts (``artifact_dir``) live inside the same dir, ``rotate_artifacts=1``; events
  are handed to the caller in memory and not written as ``job_events/*.json`` files;
- set_stats data comes back from the ``playbook_on_stats`` event (``artifact_data``).

The session playbooks keep the private keys out of every event (``no_log``), so even
the ansible-runner callback's short-lived partial files never hold one.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.bai.cluster.plugins.module_utils.session.request import looks_like_template

FAILED_EVENTS = ("runner_on_failed", "runner_item_on_failed", "runner_on_unreachable")
# Tail of the playbook's own output kept for errors that happen outside any task
# (syntax errors, a missing inventory).
STDOUT_TAIL = 4000
RECAP = ("ok", "changed", "failures", "dark", "skipped", "rescued", "ignored")


def repo_root() -> Path:
    """The project directory holding the playbooks: $BAI_CLUSTER_HOME, else the checkout
    this package lives in (it is installed in editable mode)."""
    env = os.environ.get("BAI_CLUSTER_HOME")
    root = Path(env).resolve() if env else Path(__file__).resolve().parents[1]
    if not (root / "playbooks" / "session_create.yml").is_file():
        raise FileNotFoundError(
            f"{root} is not a bai-cluster checkout (no playbooks/session_create.yml); "
            "set BAI_CLUSTER_HOME to the repository"
        )
    return root


def resolve_inventory(inventory: str | None, root: Path) -> str | None:
    """An inventory path as given (relative to the current directory), else relative to
    the repository (``-i inventories/local`` works from anywhere); None keeps the
    default of ansible.cfg (the lab)."""
    if not inventory:
        return None
    for base in (Path.cwd(), root):
        candidate = base / inventory
        if candidate.exists():
            return str(candidate.resolve())
    return inventory  # e.g. "host1,host2," - ansible reports what it cannot use


@dataclass
class Failure:
    """One failed task result (a loop item counts on its own)."""

    task: str
    host: str
    msg: str
    res: dict[str, Any] = field(default_factory=dict)
    ignored: bool = False
    unreachable: bool = False


@dataclass
class PlaybookResult:
    """What a run left behind, in memory."""

    rc: int
    status: str
    stats: dict[str, Any]
    failures: list[Failure]
    ok_results: dict[str, list[dict[str, Any]]]
    output_tail: str = ""
    counts: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.status == "successful"

    @property
    def fatal(self) -> list[Failure]:
        """Failures that were not ignored."""
        return [f for f in self.failures if not f.ignored]


def event_failure(event: Mapping[str, Any]) -> Failure | None:
    """The :class:`Failure` in a runner event, or None."""
    name = event.get("event")
    if name not in FAILED_EVENTS:
        return None
    data = event.get("event_data") or {}
    res = data.get("res") or {}
    msg = res.get("msg") or res.get("stderr") or res.get("module_stderr") or ""
    if not msg and res.get("results"):
        msg = "; ".join(str(r.get("msg")) for r in res["results"] if r.get("failed"))
    return Failure(
        task=str(data.get("task") or ""),
        host=str(data.get("host") or ""),
        msg=" ".join(str(msg).split()),
        res=dict(res),
        ignored=bool(data.get("ignore_errors")),
        unreachable=name == "runner_on_unreachable",
    )


def write_private(path: Path, text: str) -> None:
    """Create ``path`` with mode 0600 from the start (no window with wider access)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


class _UnsafeDumper(yaml.SafeDumper):
    """YAML for ``-e @file``: every string value that Jinja would see a template in is
    tagged ``!unsafe``; the others are plain double-quoted strings."""


def _unsafe_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    # Only where it is needed: Ansible's !unsafe constructor resolves the scalar's type
    # again, so !unsafe "yes" would load as True, "123" as 123 and "" as None. A string
    # without a template's marks is never rendered, and stays a string when quoted.
    tag = "!unsafe" if looks_like_template(text) else "tag:yaml.org,2002:str"
    return dumper.represent_scalar(tag, text, style='"')


_UnsafeDumper.add_representer(str, _unsafe_str)
_UnsafeDumper.add_multi_representer(str, _unsafe_str)


def unsafe_yaml(extravars: Mapping[str, Any]) -> str:
    """``extravars`` as YAML in which every string that Jinja would see a template in is
    tagged ``!unsafe``, so that Ansible never renders one (``{{ lookup('pipe', ...) }}``
    in an env value stays those characters; ``{{.State.Status}}`` in a command too), and
    every other string is double-quoted, so that ``yes``, ``123`` or ``""`` stay strings.
    Keys stay plain: Ansible never renders keys. Double quotes with escapes carry any
    string byte for byte (newlines, control characters, non-ASCII)."""

    def plain_keys(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {_Key(key): plain_keys(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain_keys(item) for item in value]
        return value

    return yaml.dump(
        plain_keys(dict(extravars)),
        Dumper=_UnsafeDumper,
        allow_unicode=True,
        default_flow_style=False,
        sort_keys=False,
        width=float("inf"),
    )


class _Key(str):
    """A mapping key: written as a plain string, without the tag."""


_UnsafeDumper.add_representer(_Key, lambda dumper, key: dumper.represent_str(str(key)))


def search_path() -> str:
    """PATH with this interpreter's bin directory first.

    ``.venv/bin/bai-cluster`` then finds the virtualenv's ``ansible-playbook``
    without the virtualenv being activated.
    """
    here = str(Path(sys.executable).parent)
    rest = [p for p in os.environ.get("PATH", os.defpath).split(os.pathsep) if p and p != here]
    return os.pathsep.join([here, *rest])


@dataclass
class Events:
    """What a run's events leave in memory: the failed task results, the ok results by
    task, the set_stats data and the play recap's per-host counts. Every event is handed
    on to ``on_event`` as it arrives."""

    on_event: Callable[[dict[str, Any]], None] | None = None
    failures: list[Failure] = field(default_factory=list)
    ok_results: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)

    def handler(self, event: dict[str, Any]) -> bool:
        failure = event_failure(event)
        if failure is not None:
            self.failures.append(failure)
        data = event.get("event_data") or {}
        if event.get("event") == "runner_on_ok":
            self.ok_results.setdefault(str(data.get("task")), []).append(data.get("res") or {})
        if event.get("event") == "playbook_on_stats":
            self.stats.update(data.get("artifact_data") or {})
            for key in RECAP:
                self.counts[key] = dict(data.get(key) or {})
        if self.on_event is not None:
            self.on_event(event)
        return False  # keep events in memory only: no job_events/*.json files


def runner_env(root: Path) -> dict[str, str]:
    """The environment of ansible-playbook: the repository's ansible.cfg, no colours, and
    the search path with this Python's bin directory (:func:`search_path`)."""
    return {
        "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "PATH": search_path(),
    }


def run_playbook(
    playbook: str,
    extravars: Mapping[str, Any] | None = None,
    *,
    inventory: str | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    verbosity: int = 0,
    tags: str | None = None,
    keep_dir: str | None = None,
    check: bool = False,
) -> PlaybookResult:
    """Run ``playbook`` (relative to the repository) and return its outcome.

    ``on_event`` sees every runner event as it arrives. ``keep_dir`` (debugging and
    tests only) copies the private data dir there before it is removed. ``check`` runs
    it in check mode (``--check``: report, change nothing).
    """
    import ansible_runner  # imported late: `bai-cluster --help` stays fast

    root = repo_root()
    path = (root / playbook).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no playbook {path}")
    private = Path(tempfile.mkdtemp(prefix="bai-cli-"))
    events = Events(on_event)
    # ansible-runner turns Ctrl-C (and SIGTERM) into cancelling the run, and leaves its
    # handlers in place; put ours back after it, and raise what the signal meant.
    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        (private / "env").mkdir(mode=0o700)
        write_private(private / "env" / "extravars", unsafe_yaml(extravars or {}))
        runner = ansible_runner.run(
            private_data_dir=str(private),
            project_dir=str(root),
            playbook=str(path),
            inventory=resolve_inventory(inventory, root),
            artifact_dir=str(private / "artifacts"),
            rotate_artifacts=1,
            suppress_env_files=True,
            quiet=True,
            verbosity=verbosity or None,
            tags=tags,
            cmdline="--check" if check else None,
            envvars=runner_env(root),
            event_handler=events.handler,
        )
        try:
            with runner.stdout as handle:
                tail = handle.read()[-STDOUT_TAIL:]
        except Exception:  # no stdout file: nothing ran
            tail = ""
        if keep_dir:
            shutil.copytree(private, Path(keep_dir) / private.name, dirs_exist_ok=True)
        if str(runner.status) == "canceled":
            raise KeyboardInterrupt(f"{playbook} was cancelled")
        return PlaybookResult(
            rc=runner.rc if runner.rc is not None else 1,
            status=str(runner.status),
            stats=events.stats,
            failures=events.failures,
            ok_results=events.ok_results,
            output_tail=tail,
            counts=events.counts,
        )
    finally:
        for number, previous in handlers.items():
            if previous is not None and threading.current_thread() is threading.main_thread():
                signal.signal(number, previous)
        shutil.rmtree(private, ignore_errors=True)
