"""Errors of the API and how a failed run maps to one (and to the CLI's exit code).

Exit codes: 0 success, 2 bad input, 3 PENDING, 1 anything else. The playbooks already
tell these apart, so no marker was added to them:

- bad input: every session and agent playbook first checks the request's variables
  (``session_manager.yml``, "Check the request's variables": no string Ansible would
  render, every number in range); ``session_create.yml`` validates the request in its
  first task, "Check the session request" (``bai_session_plan``: "invalid session spec:
  ..."), and
  ``session_destroy.yml`` in "Check the session name"; "Check the people's public
  keys" checks ``session_authorized_keys``. A request that validates but
  names something the agents lack (an image, a mount source) fails placement with a
  plain spec error: also bad input.
- PENDING: "Stop when the session cannot be placed" fails with the placement's message;
  the placement task before it ("Place the session on the agents", ``failed_when:
  false``) returned ``pending: true`` (and the message contains ``PENDING``).
- The owner's limits (``bai_session_policies``) refuse it: the same task fails, the
  placement returned ``policy: true``; kind ``policy``, exit 3 like PENDING (it can start
  once the owner's own sessions end).
- A name taken by another spec (``conflict: true``) and everything else: 1.
"""

from __future__ import annotations

from typing import Any

from .progress import step_of
from .runner import Failure, PlaybookResult

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_PENDING = 3

VALIDATION_TASKS = (
    "Check the request's variables",
    "Check the session request",
    "Check the session name",
    "Check the people's public keys",
    "Check the agent name",
    "Check the agent and the availability asked for",
    "Check the agent to remove",
)
PLACEMENT_STOP = "Stop when the session cannot be placed"
PLACEMENT = "Place the session on the agents"
KIND_EXIT = {
    "bad_input": EXIT_BAD_INPUT,
    "pending": EXIT_PENDING,
    # The owner's limits refuse it now; it can start once the owner's sessions end.
    "policy": EXIT_PENDING,
    "conflict": EXIT_FAILED,
    "not_found": EXIT_FAILED,
    "unreachable": EXIT_FAILED,
    "failed": EXIT_FAILED,
}


class BaiClusterError(Exception):
    """A failed operation: ``kind`` (bad_input, pending, policy, conflict, not_found,
    unreachable, failed), the ``step`` and ``task`` where it failed and one readable
    ``message``; ``exit_code`` is what the CLI exits with."""

    def __init__(
        self, kind: str, message: str, step: str | None = None, task: str | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.step = step
        self.task = task

    @property
    def exit_code(self) -> int:
        return KIND_EXIT.get(self.kind, EXIT_FAILED)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "message": self.message,
            "step": self.step,
            "task": self.task,
            "exit_code": self.exit_code,
        }

    def __str__(self) -> str:
        where = ""
        if self.task:
            where = f" (step: {self.step or 'task'}, task: {self.task})"
        return f"{self.message}{where}"


def _last_placement(result: PlaybookResult) -> dict[str, Any]:
    """The last result of a placement task (each round's name starts with PLACEMENT)."""
    found = [
        res
        for task, results in result.ok_results.items()
        if task.startswith(PLACEMENT)
        for res in results
    ]
    return dict(found[-1]) if found else {}


def _last_error_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith(("ERROR!", "[ERROR]")) or "ERROR" in line[:12]:
            return line
    return lines[-1] if lines else ""


# How a host that did not answer failed, by what Ansible said of it (the first match).
NO_ANSWER = (
    ("Cannot connect to the Docker daemon", "its Docker engine does not answer"),
    ("Error while fetching server API version", "its Docker engine does not answer"),
    ("Is the docker daemon running", "its Docker engine does not answer"),
    (
        "Module result deserialization failed",
        "its node gave no answer: the machine or its engine is gone",
    ),
    ("No start of json char found", "its node gave no answer: the machine or its engine is gone"),
    ("is not running", "its node is not running"),
)


def no_answer(failure: Failure) -> str | None:
    """How ``failure``'s host did not answer (its connection failed, its engine does not
    answer, its node is gone), in plain words; None for any other failure."""
    if failure.unreachable:
        return "its connection failed"
    return next((how for said, how in NO_ANSWER if said in failure.msg), None)


def _not_answering(result: PlaybookResult, first: Failure, how: str, step: str) -> BaiClusterError:
    """``first.host`` did not answer: who, how, and whether the run went on with the others
    (the other hosts' results of that task), then what Ansible said."""
    others = len(result.ok_results.get(first.task) or [])
    went_on = f"; the run went on with the {others} other host(s) that answered" if others else ""
    return BaiClusterError(
        "unreachable",
        f"{first.host} did not answer ({how}){went_on}. Ansible said: {first.msg}",
        step,
        first.task,
    )


def classify(result: PlaybookResult) -> BaiClusterError | None:
    """The error a finished run stands for, or None when it succeeded."""
    fatal = result.fatal
    if not fatal:
        if result.ok:
            return None
        message = (
            _last_error_line(result.output_tail) or f"ansible-playbook failed ({result.status})"
        )
        return BaiClusterError("failed", message)
    # The step is where things went wrong first; the message is the last word (the
    # session playbook's rescue reports the original failure and the clean-up).
    first = next((f for f in fatal if step_of(f.task) != "cleanup"), fatal[0])
    message = fatal[-1].msg or first.msg or "failed"
    step = step_of(first.task) or "task"
    how = no_answer(first)
    if how:
        return _not_answering(result, first, how, step)
    if first.task.startswith(VALIDATION_TASKS):
        return BaiClusterError("bad_input", message, step, first.task)
    if first.task.startswith(PLACEMENT_STOP):
        placement = _last_placement(result)
        if placement.get("pending") or "PENDING" in message:
            return BaiClusterError("pending", message, step, first.task)
        if placement.get("conflict"):
            return BaiClusterError("conflict", message, step, first.task)
        if placement.get("policy"):
            return BaiClusterError("policy", message, step, first.task)
        return BaiClusterError("bad_input", message, step, first.task)
    return BaiClusterError("failed", message, step, first.task)
