"""What a module needs to speak of an engine without the Docker SDK: the connection
options every bai_* module that talks to an engine accepts (documented by the
bai.cluster.docker fragment), and the text of an engine's error.

Apart from docker_api.py on purpose: a module that reaches an engine only now and then
(bai_session_ledger, with the swarm's store) takes the options without importing the
SDK, which costs a module run about 0.2 s.
"""

from __future__ import annotations

from typing import Any

DOCKER_ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "docker_host": {"type": "str"},
    "docker_timeout": {"type": "int", "default": 60},
}


def error_text(exc: BaseException) -> str:
    """The engine's own explanation where there is one, else the exception text."""
    explanation = getattr(exc, "explanation", None)
    if explanation:
        return str(explanation)
    return str(exc) or type(exc).__name__
