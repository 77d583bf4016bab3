"""Compile each source file of a module's payload once, not twice.

A module runs from its AnsiballZ zip, and Python's zipimport compiles a module's source
twice on import: ``find_spec`` asks the loader for the file name (``get_filename``), which
compiles the source to find it, and ``exec_module`` compiles it again (``get_code``);
neither keeps the code. With no bytecode in the zip, compiling was almost half of a
module run's CPU time on our largest modules, half of it the second compile (measured
with py-spy on a session create).

Importing this module (first, before the module's other imports of this collection)
memoizes zipimport's per-file compile for the rest of the process: the same archive,
prefix and module name give the same code object. The zip does not change while the
module runs, so nothing else changes; each entry is read once at most. Where zipimport has
no such function (another Python), this does nothing.
"""

from __future__ import annotations

import zipimport
from typing import Any

_COMPILED: dict[tuple[str, str, str], Any] = {}


def _install() -> None:
    compile_module = getattr(zipimport, "_get_module_code", None)
    if compile_module is None or getattr(compile_module, "bai_compile_once", False):
        return

    def compiled_once(importer: Any, fullname: str) -> Any:
        key = (str(importer.archive), str(importer.prefix), fullname)
        found = _COMPILED.get(key)
        if found is None:
            found = _COMPILED[key] = compile_module(importer, fullname)
        return found

    compiled_once.bai_compile_once = True  # type: ignore[attr-defined]
    zipimport._get_module_code = compiled_once  # type: ignore[attr-defined]


_install()
