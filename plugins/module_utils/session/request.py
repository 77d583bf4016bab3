"""Request input is data, never code (docs/security.md, "Request input is data").

Ansible renders every string of an extra var (``-e``) as a Jinja template when a task
reads it, so a request value such as ``{{ lookup('pipe', 'id') }}`` would run on the
controller, and a command line with ``{{.State.Status}}`` would fail to render. A value
marked ``!unsafe`` (what ``bai-cluster`` writes, or ``-e @request.yml`` with the tag) is
never rendered. The session playbooks check the request's variables first
(``request_problems``): a string that Ansible would render is refused, before anything
reads it, and so is a number out of its range (module_utils/session/limits.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.session.limits import check_numbers

# The variables of a request: the session and agent playbooks' own (their tuning too),
# and those of bai-cluster's show and logs playbooks. Inventory settings (bai_*) and
# Ansible's own (ansible_*) are the operator's, not a request's.
REQUEST_PREFIXES = ("session_", "agent_", "show_", "logs_")
# What makes Jinja (as Ansible configures it) see a template in a string.
TEMPLATE_MARKS = ("{{", "{%", "{#")
JINJA_HEADER = "#jinja2:"


def looks_like_template(text: str) -> bool:
    """True when Jinja would find a template in ``text``."""
    return text.startswith(JINJA_HEADER) or any(mark in text for mark in TEMPLATE_MARKS)


def template_strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """``(path, text)`` for every string in ``value`` (mappings' values and lists,
    recursively; keys are never rendered) that looks like a template."""
    if isinstance(value, str):
        if looks_like_template(value):
            yield where, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from template_strings(item, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from template_strings(item, f"{where}[{index}]")


def request_problems(
    given: Mapping[str, Any],
    trusted: Callable[[Any], bool],
    prefixes: tuple[str, ...] = REQUEST_PREFIXES,
) -> list[str]:
    """What is wrong with the request variables in ``given`` (the extra vars, as loaded,
    never rendered): strings Ansible would render (``trusted`` says whether it would
    render a string) and numbers out of range. One message per problem; [] when none."""
    request = {name: value for name, value in given.items() if str(name).startswith(prefixes)}
    problems = [
        f"{path}: {text!r} would be run as a Jinja template by Ansible; mark request values "
        f"!unsafe (-e @request.yml with !unsafe tags, as bai-cluster does) so that they "
        f"stay data"
        for name, value in sorted(request.items())
        for path, text in template_strings(value, name)
        if trusted(text)
    ]
    return problems + check_numbers(request)
