"""Action plugin: run bai_session_plan inside the controller's process.

The module is pure logic over the data the play hands it (plugins/module_utils/
bai_cluster.py), and session_create.yml runs it on the controller twice per run. Shipping
it as a module costs a Python start and an AnsiballZ payload per call (~0.35 s each on
a 2 vCPU machine); here the same ``run()`` of plugins/modules/bai_session_plan.py is
called directly, with the same argument spec and the same results.

``InProcessAction`` does this for any of the project's modules that has a module-level
``ARGUMENT_SPEC`` and a ``run(module)`` returning its result, and that only works on the
controller (bai_session_keypair.py subclasses it).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from ansible.plugins.action import ActionBase

PLUGINS = Path(__file__).resolve().parent.parent


def _load(name: str, path: Path):
    """Import a file under a module name once per process (cached in sys.modules)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


class _Done(Exception):
    """exit_json/fail_json of the shim: carries the module's result."""

    def __init__(self, result: dict):
        super().__init__()
        self.result = result


class _Module:
    """The part of AnsibleModule that the modules' run() use: params, check_mode, exit/fail_json."""

    def __init__(self, params: dict, check_mode: bool):
        self.params = params
        self.check_mode = check_mode

    def exit_json(self, **result):
        raise _Done(result)

    def fail_json(self, msg: str, **result):
        raise _Done({**result, "failed": True, "msg": msg})


class InProcessAction(ActionBase):
    """Run plugins/modules/<MODULE>.py's run() here, after loading its module_utils."""

    MODULE = "bai_session_plan"
    UTILS = ("bai_gpu", "bai_cluster")  # in import order: bai_cluster imports bai_gpu

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        # The module's `from ansible.module_utils.X import ...` resolves to the project's
        # module_utils, as it does inside AnsiballZ.
        for util in self.UTILS:
            _load(f"ansible.module_utils.{util}", PLUGINS / "module_utils" / f"{util}.py")
        code = _load(f"{self.MODULE}_module", PLUGINS / "modules" / f"{self.MODULE}.py")
        _, params = self.validate_argument_spec(argument_spec=code.ARGUMENT_SPEC)
        try:
            outcome = code.run(_Module(params, bool(self._task.check_mode)))
        except _Done as done:
            outcome = done.result
        result.update(outcome)
        return result


ActionModule = InProcessAction
