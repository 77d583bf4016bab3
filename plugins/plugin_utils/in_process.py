"""Run one of the collection's modules inside the controller's process.

A module that is pure logic over the data the play hands it, and that only runs on the
controller, costs a Python start and an AnsiballZ payload per call when it is shipped as
a module. ``InProcessAction`` is an action plugin that imports the module instead and
calls its ``run(module)``, with the same argument spec and the same results.

It serves any module of plugins/modules that has a module-level ``ARGUMENT_SPEC`` and a
``run(module)`` returning its result: plugins/action/bai_session_plan.py and
plugins/action/bai_session_keypair.py subclass it and name their module in ``MODULE``.

``HereFirstAction`` does the same for a module that runs on a host of the inventory (the
session ledger's host), but only when that host is this controller itself - the local
connection, no become, the controller's own Python as its interpreter (an all-in-one
inventory such as inventories/local, or a file ledger on the controller) - so the run
differs in nothing but the Python start it saves. Anywhere else the module is shipped
and run there as usual.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from typing import Any, NoReturn

from ansible.module_utils.common.process import get_bin_path
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
        self.warnings: list[str] = []

    def warn(self, warning: str) -> None:
        self.warnings.append(warning)

    def exit_json(self, **result: Any) -> NoReturn:
        raise _Done(self._warned(result))

    def fail_json(self, msg: str, **result: Any) -> NoReturn:
        raise _Done(self._warned({**result, "failed": True, "msg": msg}))

    def _warned(self, result: dict[str, Any]) -> dict[str, Any]:
        return {**result, "warnings": list(self.warnings)} if self.warnings else result

    def run_command(
        self,
        args: list[str],
        environ_update: dict[str, str] | None = None,
        expand_user_and_vars: bool = False,  # pylint: disable=unused-argument
        handle_exceptions: bool = True,
    ) -> tuple[int, str, str]:
        """AnsibleModule.run_command for an argument list (never expanded): (rc, stdout,
        stderr), no stdin; a program that cannot be started fails the task, as it does
        there, or raises OSError with handle_exceptions=False."""
        try:
            done = subprocess.run(
                args,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="surrogateescape",
                check=False,
                env={**os.environ, **(environ_update or {})},
            )
        except OSError as exc:
            if not handle_exceptions:
                raise
            raise _Done({"failed": True, "msg": str(exc), "rc": exc.errno, "cmd": args}) from None
        return done.returncode, done.stdout, done.stderr

    @staticmethod
    def get_bin_path(name: str) -> str | None:
        """AnsibleModule.get_bin_path without required: the program's path (PATH, then
        /sbin, /usr/sbin and /usr/local/sbin, as there), or None."""
        try:
            return str(get_bin_path(name))
        except ValueError:
            return None


class InProcessAction(ActionBase):
    """Run plugins/modules/<MODULE>.py's run() in this process."""

    MODULE: str  # set by each subclass: the module's file name without .py

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        code = importlib.import_module(MODULES + self.MODULE)
        _validation, params = self.validate_argument_spec(
            argument_spec=code.ARGUMENT_SPEC, required_if=getattr(code, "REQUIRED_IF", None)
        )
        module = _Module(params, bool(self._task.check_mode))
        try:
            outcome = module._warned(code.run(module))  # pylint: disable=protected-access
        except _Done as done:
            outcome = done.result
        result.update(outcome)
        return result


class HereFirstAction(InProcessAction):
    """Run plugins/modules/<MODULE>.py's run() in this process when the task's host (its
    delegate_to) is this controller; ship the module to it otherwise."""

    _requires_connection = True
    _supports_async = True  # an async task is always shipped, as the normal action does

    def run(self, tmp=None, task_vars=None):
        if not self._task.async_val and self._here(task_vars or {}):
            return super().run(tmp, task_vars)
        result = ActionBase.run(self, tmp, task_vars)
        wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
        result.update(
            self._execute_module(
                module_name=f"bai.cluster.{self.MODULE}",
                task_vars=task_vars,
                wrap_async=wrap_async,
            )
        )
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)  # as the normal action
        return result

    def _here(self, task_vars: dict[str, Any]) -> bool:
        """The local connection, no become, and the host's interpreter is this Python."""
        if self._connection.transport != "local" or self._play_context.become:
            return False
        host_vars = task_vars
        if self._task.delegate_to:
            host_vars = (task_vars.get("ansible_delegated_vars") or {}).get(
                self._task.delegate_to, {}
            )
        interpreter = host_vars.get("ansible_python_interpreter")
        if not interpreter:
            return False
        interpreter = self._templar.template(interpreter)
        return isinstance(interpreter, str) and os.path.realpath(interpreter) == os.path.realpath(
            sys.executable
        )
