"""Session names and the Docker object names derived from them.

The session-name rule lives here only: the spec parser, the app proxy's route logic, the
``bai.cluster.session_name`` Jinja test (session playbooks) and the CLI all use it. So do
the options that name a session in the modules that make or remove something of it
(``SESSION_ARGUMENT_SPEC``, documented by the doc fragment ``bai.cluster.session``).
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError

# The options state, session and session_id (doc fragment bai.cluster.session).
SESSION_ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
    "session": {"type": "str", "required": True},
    "session_id": {"type": "str"},
}

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
