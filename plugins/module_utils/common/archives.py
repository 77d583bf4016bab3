"""In-memory tar archives of root-owned files: what ``put_archive`` copies into a
container (the session's keys, people's keys, the job runner), so that nothing touches
the agent's disk outside the container."""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Mapping
from typing import Optional


def root_tar(
    files: Mapping[str, bytes],
    *,
    mode: int,
    folder: Optional[str] = None,
    modes: Optional[Mapping[str, int]] = None,
) -> bytes:
    """An in-memory tar of ``files`` (root-owned, ``mode``, or ``modes[name]``), inside
    ``folder`` (0700)."""
    buffer = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        if folder:
            info = _root_owned(tarfile.TarInfo(folder), 0o700, now)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for name, data in sorted(files.items()):
            path = f"{folder}/{name}" if folder else name
            info = _root_owned(tarfile.TarInfo(path), (modes or {}).get(name, mode), now)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _root_owned(info: tarfile.TarInfo, mode: int, mtime: int) -> tarfile.TarInfo:
    info.mode = mode
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = mtime
    return info
