"""The toolkit's error types, one home for all of them.

``SpecError`` (bad input), ``SessionConflict`` (the name is taken by something else) and
``Pending`` (valid, but nothing fits now) come from the pure logic; ``Failure`` is what a
module raises to end in its one ``fail_json`` with a message a person can act on.
"""

from __future__ import annotations


class SpecError(ValueError):
    """Invalid user input; the message says which field, what was given, what is allowed."""


class SessionConflict(ValueError):
    """The session name is taken by containers that do not match the request (another
    spec, leftovers of an earlier attempt); nothing may be changed."""


class Pending(Exception):
    """The session is valid but cannot be placed now (docs/placement.md).

    Its text starts with ``PENDING:``. ``permanent`` is True when waiting cannot help
    (the group has no agents, or the request exceeds the agents' *total* capacity), so
    callers can skip retry loops.
    """

    def __init__(self, reason: str, *, permanent: bool = False) -> None:
        super().__init__(f"PENDING: {reason}")
        self.reason = reason
        self.permanent = permanent


class Failure(Exception):
    """A module's run went wrong; the message is what its ``fail_json`` reports."""


class Refused(Failure):
    """An agent's admission refused a session: what its engine holds leaves no room (the
    create places the session again, with a fresh read of that agent)."""
