"""How a module ends: with what its work returned (``exit_json``), or with the message of
a known error (``fail_json``) - the one tail of the bai_* modules (community.docker keeps
the same in its ``run_module``).

    run_module(module, fn, *handlers)   exit_json(**fn()), or fail_json for a known error
    says(prefix, text, **extra)         a handler: ``prefix + text(exc)``, and extra keys

A handler is a pair (exception types, what to say): the first pair whose types match
the exception says it - a message, or fail_json's keyword arguments (``msg`` and any
others). An exception no pair names propagates, as it would without the runner.

    run_module(
        module,
        lambda: run(module, docker_.api),
        (Failure, str),
        (DockerException, says("Docker error on session s1: ", error_text)),
    )
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Union

Types = Union[type[BaseException], tuple[type[BaseException], ...]]
Said = Union[str, Mapping[str, Any]]
Handler = tuple[Types, Callable[[Any], Said]]


def run_module(module: Any, fn: Callable[[], Mapping[str, Any]], *handlers: Handler) -> None:
    """Run ``fn`` (the module's work) and exit with what it returns; an exception one of
    ``handlers`` names ends the module in fail_json with what that handler says."""
    try:
        result = fn()
    except Exception as exc:  # only those a handler names: the others are raised again
        say = next((say for types, say in handlers if isinstance(exc, types)), None)
        if say is None:
            raise
        said = say(exc)
        module.fail_json(**({"msg": said} if isinstance(said, str) else dict(said)))
    module.exit_json(**result)


def says(
    prefix: str = "", text: Callable[[Any], str] = str, **extra: Any
) -> Callable[[Any], dict[str, Any]]:
    """A handler's answer: the message ``prefix`` + ``text(exc)``, with fail_json's
    ``extra`` keyword arguments (``bad_input=True``, ...)."""
    return lambda exc: {"msg": prefix + text(exc), **extra}
