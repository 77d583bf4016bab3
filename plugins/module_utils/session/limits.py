"""The ranges of a request's numbers (docs/sessions.md, "Numbers in a request").

Every number a request can carry besides the spec's own (size, replicas, resources and
lifetime_s, checked by spec.py and parse.py) is listed here once, with its range and
unit: the playbooks check what ``-e`` gives (the request check in
playbooks/session_manager.yml, through the lookup ``bai.cluster.bai_request``) and the
``bai-cluster`` command checks its options with the same table, before anything is made.
A value out of range raises ``SpecError`` naming the variable and the range.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.common.parse import type_name

DAY = 86400
YEAR = 365 * DAY
_NUMBER_RE = re.compile(r"^-?[0-9]+(?:\.[0-9]+)?$")


@dataclass(frozen=True)
class Limit:
    """A number's range: ``low`` to ``high`` (both allowed), whole or not, what it is."""

    low: float
    high: float
    what: str
    whole: bool = True

    def describe(self) -> str:
        kind = "a whole number" if self.whole else "a number"
        return f"{kind} from {_text(self.low)} to {_text(self.high)} ({self.what})"


def _text(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)


# The session network's MTU: 1280 is IPv6's minimum (and the least a TCP connection over
# an overlay tolerates); 9000 the usual jumbo frame (an overlay adds its 50 bytes of
# VXLAN on the agents' own network).
MTU = Limit(1280, 9000, "bytes, the session network's MTU")
# A session's containers (session_size, a role's replicas and their sum); spec.py checks
# them with the rest of the spec.
SIZE = Limit(1, 64, "containers")
LIMITS: dict[str, Limit] = {
    "session_network_mtu": MTU,
    "session_wait_s": Limit(0, DAY, "seconds a PENDING session waits for capacity", whole=False),
    "session_wait_delay_s": Limit(1, 600, "seconds between two placement attempts"),
    "session_create_timeout_s": Limit(1, DAY, "seconds one agent may take to create"),
    "session_ssh_timeout_s": Limit(1, 3600, "seconds each container may take until sshd"),
    "session_reservation_ttl_s": Limit(1, 7 * DAY, "seconds a dead create's reservation lasts"),
    "session_agent_read_max_age_s": Limit(0, DAY, "seconds a kept read of an agent stands"),
    "session_stop_grace_s": Limit(0, 3600, "seconds between SIGTERM and SIGKILL"),
    "session_batch_timeout_s": Limit(0, YEAR, "seconds to wait for a batch end, 0: no limit"),
    "session_lifetime_s": Limit(0, YEAR, "seconds the session may run, 0: no limit"),
    "session_end_signal_s": Limit(1, DAY, "seconds before the end to send the signal"),
    "session_restarts": Limit(0, 100, "times a batch session's gang may start again"),
    "session_topology_prefer_s": Limit(0, DAY, "seconds to wait for one domain before widening"),
    "session_log_max_bytes": Limit(1024, 1024**3, "bytes of each container's output kept"),
    "session_schedule_limit": Limit(1, 1000, "queued sessions one scheduler pass starts"),
    "session_schedule_lease_s": Limit(10, DAY, "seconds a scheduler pass's start is leased"),
    "agent_drain_timeout_s": Limit(0, 7 * DAY, "seconds a drain waits for the sessions"),
    "agent_drain_delay_s": Limit(1, 600, "seconds between two looks at a draining agent"),
}


def check_number(name: str, value: Any, limit: Limit | None = None) -> int | float:
    """``value`` (a number, or a string of one: ``-e key=value`` gives strings) as a
    number within ``name``'s range, else ``SpecError`` naming ``name`` and the range."""
    limit = limit or LIMITS[name]
    allowed = limit.describe()
    number: int | float
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise SpecError(f"{name}: got {type_name(value)} {value!r}; expected {allowed}")
    if isinstance(value, str):
        text = value.strip()
        if not _NUMBER_RE.match(text):
            raise SpecError(f"{name}: got {value!r}; expected {allowed}")
        number = float(text) if "." in text else int(text)
    else:
        number = value
    if not math.isfinite(number):
        raise SpecError(f"{name}: got {value!r}; expected {allowed}")
    if limit.whole:
        if not float(number).is_integer():
            raise SpecError(f"{name}: got {value!r}; expected {allowed}")
        number = int(number)
    if not limit.low <= number <= limit.high:
        raise SpecError(f"{name}: got {_text(number)}; expected {allowed}")
    return number


def check_numbers(given: Mapping[str, Any]) -> list[str]:
    """The problems of the numbers in ``given`` (variables by name; those without a range
    here and those set to None are passed over), one message each."""
    problems = []
    for name, value in given.items():
        if name in LIMITS and value is not None:
            try:
                check_number(name, value)
            except SpecError as exc:
                problems.append(str(exc))
    return problems
