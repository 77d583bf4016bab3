"""The placement rules, in the order they narrow a domain (domain.py).

To add a rule: write it in a file of its own in this package (a class with ``name``
and ``narrow``, as group.py), and add an instance of it to ``RULES`` below. A rule
reads what it needs from the request (``PlacementRequest.constraint``) and the agents
(``Agent.label``); docs/development.md has the whole list of files to touch.
"""

from __future__ import annotations

from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.domain import (
    Domain,
    Rule,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.group import (
    InResourceGroup,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.request import (
    PlacementRequest,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.placement.topology import (
    InOneDomain,
)

RULES: tuple[Rule, ...] = (InResourceGroup(), InOneDomain())


def narrow(request: PlacementRequest, domain: Domain) -> list[Domain]:
    """``domain`` narrowed by every rule, in order: the parts to try, best first."""
    parts = [domain]
    for rule in RULES:
        parts = [part for whole in parts for part in rule.narrow(request, whole)]
    return parts
