"""The mount policy (docs/mounts.md): which host folders a session may mount, and where.

A source must lie under one of the agent's data roots (``bai_data_roots``), both as
written and once symlinks are resolved on the agent; a destination must not hide the
container's system folders or the toolkit's own files. Pure functions: the agent-side
module resolves the path and hands the facts in.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Sequence
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError

DEFAULT_DATA_ROOT = "/srv/bai-data"

# Host paths a session must never see: the kernel's views, the host's configuration and
# programs, the engine's state and sockets. A data root may not be one of them, lie
# under one, or hold one.
SYSTEM_PATHS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var/lib/containerd",
    "/var/lib/docker",
    "/var/run",
)

# Container paths a mount may not cover: the system folders the image's programs and
# the kernel interfaces live in, and the toolkit's files (entrypoint, session keys).
PROTECTED_DESTINATIONS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/home/work/.ssh",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt/bai",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var/run",
)


def within(path: str, base: str) -> bool:
    """``path`` is ``base`` or lies below it (both normalised absolute paths)."""
    return path == base or base == "/" or path.startswith(base.rstrip("/") + "/")


def _norm(path: str) -> str:
    return "/" + posixpath.normpath(path).lstrip("/")


def _clash(path: str, protected: Iterable[str]) -> str | None:
    """The first protected path that ``path`` equals, lies under or would contain."""
    for item in protected:
        if within(path, item) or within(item, path):
            return item
    return None


def data_roots(value: Any, where: str = "bai_data_roots") -> list[str]:
    """The agent's data roots, checked and normalised; a root that is (or holds, or lies
    under) a system path is refused, since everything under a root may be mounted."""
    if value is None or value == "":
        return [DEFAULT_DATA_ROOT]
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise SpecError(f"{where}: got {value!r}; expected a list of absolute folder paths")
    roots: list[str] = []
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item.startswith("/"):
            raise SpecError(
                f"{where}[{i}]: got {item!r}; expected an absolute folder path like "
                f"{DEFAULT_DATA_ROOT}"
            )
        root = _norm(item)
        clash = _clash(root, SYSTEM_PATHS)
        if root == "/" or clash:
            raise SpecError(
                f"{where}[{i}]: {root} cannot be a data root: everything under a data root "
                f"may be mounted into sessions, and "
                + ("it is the whole file system" if root == "/" else f"it overlaps {clash}")
            )
        if root not in roots:
            roots.append(root)
    return roots


def _roots_text(roots: Sequence[str]) -> str:
    return ", ".join(roots)


def source_error(src: str, roots: Sequence[str], where: str = "src") -> str | None:
    """Why ``src`` (a normalised absolute path, as requested) may not be mounted, or None."""
    if any(within(src, root) for root in roots):
        return None
    clash = _clash(src, SYSTEM_PATHS)
    what = (
        "the agent's whole file system"
        if src == "/"
        else f"a system path of the agent (overlaps {clash})"
        if clash
        else "outside the agent's data roots"
    )
    return (
        f"{where}: {src} is {what}; mount sources must lie under a data root "
        f"(bai_data_roots: {_roots_text(roots)})"
    )


def resolved_source_error(
    src: str, real: str, kind: str, roots: Sequence[str], where: str = "src"
) -> str | None:
    """Why ``src`` may not be mounted once the agent resolved it to ``real`` (symlinks and
    ``..`` followed) of file type ``kind`` (directory, file, socket, ...), or None. The
    roots are the agent's, resolved too."""
    problem = source_error(src, roots, where)
    if problem:
        return problem
    if not any(within(real, root) for root in roots):
        return (
            f"{where}: {src} resolves to {real}, outside the agent's data roots "
            f"(bai_data_roots: {_roots_text(roots)}); a symbolic link may not lead out of them"
        )
    if kind not in ("directory", "file"):
        return f"{where}: {src} is a {kind}; only folders and regular files can be mounted"
    return None


def destination_error(dst: str, where: str = "dst") -> str | None:
    """Why a mount at ``dst`` (a normalised absolute path) is refused, or None."""
    if dst == "/":
        return f"{where}: cannot mount over the container's root '/'"
    clash = _clash(dst, PROTECTED_DESTINATIONS)
    if clash:
        return (
            f"{where}: {dst} would cover {clash}, which the container needs; mount under "
            f"/home/work (e.g. /home/work/data) or /data instead"
        )
    return None
