"""What every API function shares: running a playbook and turning its failure into a
:class:`~bai_cli.errors.BaiClusterError`, and building its variables."""

from __future__ import annotations

import getpass
from collections.abc import Callable, Mapping
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.session.limits import check_numbers

from .. import runner
from ..errors import BaiClusterError, classify
from ..runner import PlaybookResult

Event = Callable[[dict[str, Any]], None]


def run(playbook: str, extravars: Mapping[str, Any], **kwargs: Any) -> PlaybookResult:
    """Run ``playbook`` (:func:`bai_cli.runner.run_playbook`); a failure raises."""
    result = runner.run_playbook(playbook, extravars, **kwargs)
    error = classify(result)
    if error is not None:
        raise error
    return result


def set_var(extravars: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        extravars[key] = value


def check_request_numbers(extravars: Mapping[str, Any]) -> None:
    """Every number of the request within its range (module_utils/session/limits.py), before
    anything runs; else ``BaiClusterError`` (bad_input) naming the variables."""
    problems = check_numbers(extravars)
    if problems:
        raise BaiClusterError("bad_input", "invalid request: " + "; ".join(problems))


def flag(value: Any) -> bool:
    """A set_stats boolean, also when a template made it the text 'True' or 'False'."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return bool(value)


def current_user() -> str | None:
    """Who runs this (recorded as who paused or drained an agent); None when unknown."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry
        return None
