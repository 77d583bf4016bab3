"""Session names and the Docker object names derived from them.

The session-name rule lives here only: the spec parser, the app proxy's route logic, the
``bai.cluster.session_name`` Jinja test (session playbooks) and the CLI all use it.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.errors import SpecError

SESSION_NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$"
SESSION_NAME_RE = re.compile(SESSION_NAME_PATTERN)
SESSION_NAME_RULE = (
    "1-32 characters of lowercase letters, digits and '-', starting and ending "
    "with a letter or digit (it becomes part of container and network names)"
)


def is_session_name(value: Any) -> bool:
    """True when ``value`` is a valid session name."""
    return isinstance(value, str) and SESSION_NAME_RE.match(value) is not None


def parse_session_name(value: Any, field_name: str = "name") -> str:
    """``value`` if it is a valid session name, else ``SpecError`` saying the rule."""
    if value is None:
        raise SpecError(f"{field_name}: required; {SESSION_NAME_RULE}")
    if not is_session_name(value):
        raise SpecError(f"{field_name}: got {value!r}; a session name is {SESSION_NAME_RULE}")
    return str(value)


def container_name(session: str, hostname: str) -> str:
    """The Docker name of one container of a session, e.g. ``bai-s1-main1``."""
    return f"bai-{session}-{hostname}"


def network_name(session: str) -> str:
    """The Docker name of a session's network, e.g. ``bai-s1-net``."""
    return f"bai-{session}-net"


def kernel_id() -> str:
    """A fresh kernel UUID; main1's kernel id doubles as the session id."""
    return str(uuid.uuid4())
