"""engine/runner.py's run_module (the modules' one tail) and common/deadline.py's
poll_until (their one wait), with stand-ins for the module and the clock."""

from __future__ import annotations

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common import deadline
from ansible_collections.bai.cluster.plugins.module_utils.common.deadline import poll_until
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import (
    Failure,
    Refused,
    SpecError,
)
from ansible_collections.bai.cluster.plugins.module_utils.engine.runner import run_module, says


class Ended(Exception):
    """What the stand-in module's exit_json and fail_json raise (as AnsibleModule exits)."""


class Module:
    def __init__(self) -> None:
        self.ended: tuple[str, dict] | None = None

    def exit_json(self, **result):
        self.ended = ("exit", result)
        raise Ended

    def fail_json(self, **result):
        self.ended = ("fail", result)
        raise Ended


def ended(fn, *handlers):
    module = Module()
    with pytest.raises(Ended):
        run_module(module, fn, *handlers)
    return module.ended


def boom(exc):
    def fn():
        raise exc

    return fn


def test_run_module_exits_with_what_the_work_returns():
    assert ended(lambda: {"changed": True}, (Failure, str)) == ("exit", {"changed": True})


def test_the_first_handler_that_matches_says_the_message():
    handlers = (
        (Refused, lambda exc: {"msg": f"refused: {exc}", "refused": True}),
        ((Failure, SpecError), str),
        (ValueError, says("agent a1: ", bad_input=True)),
    )
    assert ended(boom(Refused("full")), *handlers) == (
        "fail",
        {"msg": "refused: full", "refused": True},
    )
    assert ended(boom(SpecError("bad")), *handlers) == ("fail", {"msg": "bad"})
    assert ended(boom(ValueError("odd")), *handlers) == (
        "fail",
        {"msg": "agent a1: odd", "bad_input": True},
    )


def test_says_puts_its_prefix_before_the_text_of_the_error():
    say = says("Docker error on session s1: ", lambda exc: exc.args[0].upper())
    assert ended(boom(OSError("gone")), (OSError, say)) == (
        "fail",
        {"msg": "Docker error on session s1: GONE"},
    )


def test_an_error_no_handler_names_propagates():
    module = Module()
    with pytest.raises(KeyError):
        run_module(module, boom(KeyError("x")), (Failure, str))
    assert module.ended is None


def test_poll_until_returns_once_done_and_raises_what_expired_makes_after_the_timeout(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(deadline.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(deadline.time, "sleep", lambda s: now.__setitem__(0, now[0] + s))
    tries = []

    def done():
        tries.append(now[0])
        return len(tries) == 3

    poll_until(done, 10, lambda: Failure("late"))
    assert tries == [0.0, 0.1, 0.2]
    tries.clear()
    with pytest.raises(Failure, match="late"):
        poll_until(lambda: tries.append(1) and False, 1, lambda: Failure("late"), interval=0.25)
    # Tried at 0, 0.25, ..., 1.0 and once more past the deadline (checked after each try).
    assert len(tries) == 6
