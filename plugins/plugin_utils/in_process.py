"""Run one of the collection's modules inside the controller's process.

A module that is pure logic over the data the play hands it, and that only runs on the
controller, costs a Python start and an AnsiballZ payload per call when it is shipped as
a module. ``InProcessAction`` is an action plugin that imports the module instead and
calls its ``run(module)``, with the same argument spec and the same results.

It serves any module of plugins/modules that has a module-level ``ARGUMENT_SPEC`` and a
``run(module)`` returning its result: plugins/action/bai_session_plan.py and
plugins/action/bai_session_keypair.py subclass it and name their module in ``MODULE``.
"""

from __future__ import annotations

import importlib
import subprocess
from typing import Any, NoReturn

from ansible.plugins.action import ActionBase

MODULES = "ansible_collections.bai.cluster.plugins.modules."


class _Done(Exception):
    """exit_json/fail_json of the shim: carries the module's result."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__()
        self.result = result


class _Module:
    """The part of AnsibleModule that the modules' run() use: params, check_mode,
    exit/fail_json and run_command."""

    def __init__(self, params: dict[str, Any], check_mode: bool) -> None:
        self.params = params
        self.check_mode = check_mode

    def exit_json(self, **result: Any) -> NoReturn:
        raise _Done(result)

    def fail_json(self, msg: str, **result: Any) -> NoReturn:
        raise _Done({**result, "failed": True, "msg": msg})

    def run_command(self, args: list[str]) -> tuple[int, str, str]:
        """AnsibleModule.run_command for an argument list: (rc, stdout, stderr), no stdin;
        a program that cannot be started fails the task, as it does there."""
        try:
            done = subprocess.run(
                args,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="surrogateescape",
                check=False,
            )
        except OSError as exc:
            raise _Done({"failed": True, "msg": str(exc), "rc": exc.errno, "cmd": args}) from None
        return done.returncode, done.stdout, done.stderr


class InProcessAction(ActionBase):
    """Run plugins/modules/<MODULE>.py's run() in this process."""

    MODULE: str  # set by each subclass: the module's file name without .py

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        code = importlib.import_module(MODULES + self.MODULE)
        _validation, params = self.validate_argument_spec(argument_spec=code.ARGUMENT_SPEC)
        try:
            outcome = code.run(_Module(params, bool(self._task.check_mode)))
        except _Done as done:
            outcome = done.result
        result.update(outcome)
        return result
