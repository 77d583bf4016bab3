"""Unit tests of plugins/module_utils/engine/docker_api.py's pure helpers.

``last_exit_code`` is given a stand-in for the low-level API client that answers
``events()`` the way Docker 20.10 does (``die`` events with ``Actor.Attributes.exitCode``
as a string); the integration tests run it against a real engine.
"""

from __future__ import annotations

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.engine.docker_api import (
    DockerException,
    last_exit_code,
)


class Events:
    """Records the events() query and answers with the given events (or raises)."""

    def __init__(self, events: list[dict] | Exception) -> None:
        self.answer = events
        self.queries: list[dict] = []

    def events(self, **query):
        self.queries.append(query)
        if isinstance(self.answer, Exception):
            raise self.answer
        return iter(self.answer)


def die(code: str) -> dict:
    return {"Type": "container", "Action": "die", "Actor": {"Attributes": {"exitCode": code}}}


def test_a_stopped_container_reports_its_state_and_asks_nothing_more():
    api = Events([die("9")])
    assert last_exit_code(api, "c1", {"Running": False, "ExitCode": 1}, 100) == "1"
    assert api.queries == []


def test_a_restarting_container_still_holds_its_exit_code():
    api = Events([])
    state = {"Running": True, "Restarting": True, "ExitCode": 3}
    assert last_exit_code(api, "c1", state, 100) == "3"
    assert api.queries == []


def test_a_container_the_restart_policy_started_again_reports_the_last_die_event():
    # The state of a restarted container says ExitCode 0: the code it stopped with is
    # only in the events, the last one counts.
    api = Events([die("1"), die("137")])
    state = {"Running": True, "Restarting": False, "ExitCode": 0}
    assert last_exit_code(api, "c1", state, 100) == "137"
    (query,) = api.queries
    assert query["since"] == 100 and query["until"] > 100
    assert query["filters"] == {"container": "c1", "event": "die"}


@pytest.mark.parametrize(
    "answer", [[], [{"Actor": {}}], DockerException("events: connection reset")]
)
def test_no_die_event_is_unknown_not_zero(answer):
    api = Events(answer)
    assert last_exit_code(api, "c1", {"Running": True, "ExitCode": 0}, 100) == "unknown"
