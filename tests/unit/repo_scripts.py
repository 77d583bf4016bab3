"""The repository's Python scripts (scripts/*.py), which are no package, loaded as modules
for the tests in tests/unit/repo/ that call their functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def load_script(filename: str, module_name: str) -> ModuleType:
    """scripts/FILENAME run as the module ``module_name`` (registered in sys.modules, as
    an import would, so that what it defines can find its module)."""
    spec = importlib.util.spec_from_file_location(module_name, REPO / "scripts" / filename)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
