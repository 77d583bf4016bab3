"""Module payloads with their bytecode, for modules run by the controller's own Python.

A payload (AnsiballZ) is a zip of the module and the Python files it imports, which the
target's Python imports with zipimport. zipimport never caches bytecode: every module run
compiles every file it imports (once with common/compile_once.py), ansible-core's
module_utils included - half of a 0.3 s run of bai_session_ledger on this controller. A
zip that holds ``X.pyc`` beside ``X.py`` is imported from the bytecode. It must be for the
same Python version (the magic number; any other version falls back to the source, so a
variant is never wrong, only larger), and it is larger (about three times), which costs
where the payload is read through a pipe: a Python given its script on standard input
(Ansible's pipelining) reads it one byte per system call, about 0.5 s per MB. So the
callback uses this variant only for runs whose every host is the controller itself
without pipelining (plugins/callback/payload_cache.py).
"""

from __future__ import annotations

import base64
import dataclasses
import importlib.util
import io
import marshal
import pickle
import zipfile
from types import CodeType


class UnknownForm(Exception):
    """The payload is not in the form this code knows (another ansible-core's cache)."""


# PEP 552: a hash-based pyc whose source is not checked (flags bit 0 set, bit 1 clear).
_UNCHECKED_HASH = (0b01).to_bytes(4, "little")


def _pyc(code: CodeType, source: bytes) -> bytes:
    """A .pyc of ``code`` for this Python: magic number, flags, the source's hash, code."""
    return (
        importlib.util.MAGIC_NUMBER
        + _UNCHECKED_HASH
        + importlib.util.source_hash(source)
        + marshal.dumps(code)
    )


def zip_with_bytecode(data: bytes) -> bytes:
    """A payload's zip with, beside each ``X.py``, ``X.pyc``: its bytecode for this
    Python, hash-based and unchecked (its source is beside it in the same zip, which no one
    edits), so zipimport loads it instead of compiling the source."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        names = set(src.namelist())
        for info in src.infolist():
            source = src.read(info)
            dst.writestr(info, source)
            pyc = info.filename[:-3] + ".pyc"
            if not info.filename.endswith(".py") or pyc in names:
                continue
            code = compile(source, info.filename, "exec", dont_inherit=True, optimize=0)
            entry = zipfile.ZipInfo(pyc, info.date_time)
            entry.compress_type = info.compress_type
            entry.external_attr = info.external_attr
            dst.writestr(entry, _pyc(code, source))
    return out.getvalue()


def with_bytecode(payload: bytes) -> bytes:
    """A cached payload as ansible-core 2.19+ pickles it (``module_common._CachedModule``,
    whose ``zip_data`` is the zip in base64) with its zip's bytecode added."""
    try:
        # Ansible's own cache file, from this user's private run folder.
        cached = pickle.loads(payload)
        zip_data = base64.b64encode(zip_with_bytecode(base64.b64decode(cached.zip_data)))
        return pickle.dumps(dataclasses.replace(cached, zip_data=zip_data))
    except (
        pickle.UnpicklingError,
        AttributeError,
        TypeError,
        ValueError,
        zipfile.BadZipFile,
        SyntaxError,
        EOFError,
        ImportError,
    ) as exc:
        raise UnknownForm(str(exc)) from exc
