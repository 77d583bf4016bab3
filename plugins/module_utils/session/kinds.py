"""The two kinds of session (docs/sessions.md): interactive, which runs until it is
destroyed, and batch, which runs one command to its end; and the command a batch session
is given."""

from __future__ import annotations

from typing import Any, Optional

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError

TYPE_INTERACTIVE = "interactive"
TYPE_BATCH = "batch"
TYPES = (TYPE_INTERACTIVE, TYPE_BATCH)
# LABEL_BATCH's values: main1 runs the command, the others are members of its gang.
MAIN = "main"
MEMBER = "member"

MAX_COMMAND_BYTES = 64 * 1024


def check_command(command: Any, session_type: str) -> Optional[str]:
    """The command of a ``session_type`` session: required (one shell line) for a batch
    session, refused for an interactive one."""
    if session_type not in TYPES:
        raise SpecError(f"type: got {session_type!r}; allowed: {', '.join(TYPES)}")
    if session_type == TYPE_INTERACTIVE:
        if command not in (None, ""):
            raise SpecError(
                "command: only a batch session runs a command (session_type: batch); an "
                "interactive session runs until it is destroyed"
            )
        return None
    if not isinstance(command, str) or not command.strip():
        raise SpecError(
            "command: a batch session needs its command, one shell line "
            "(session_command, or bai-cluster session run NAME -- COMMAND...)"
        )
    if "\0" in command:
        raise SpecError("command: contains a NUL byte")
    if len(command.encode("utf-8")) > MAX_COMMAND_BYTES:
        raise SpecError(f"command: longer than {MAX_COMMAND_BYTES} bytes")
    return command
