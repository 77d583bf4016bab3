#!/usr/bin/python
"""Ansible module bai_session_ledger: place and reserve under the ledger's lock."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bai_session_ledger
short_description: Place a session and reserve what it needs, safely against concurrent creates
description:
  - Runs on the ledger host (the Swarm manager, else the first agent; C(delegate_to)) and
    keeps the reservation ledger there, a JSON file guarded by an exclusive C(flock) lock
    (docs/placement.md). Every create of the cluster, from any controller, places its
    session through this module, so two creates never hand out the same CPU, memory or
    GPU device, and two creates of one name make one session.
  - The lock is held only while the ledger is read, the session placed and its
    reservation written (milliseconds), never while containers are created. The kernel
    drops it when the process dies, so a killed create blocks nobody.
  - O(state=reserved) places the session like M(bai.cluster.bai_session_plan) (same options
    O(spec) and O(agent_info), same results) with each reserved session counted by its
    reservation, not only by the running containers the agents report; a new session's
    reservation is written as C(creating) and expires after O(ttl) seconds unless
    O(state=ready) confirms it. A session found on the agents but not in the ledger (made
    before it) is taken into the ledger as it is.
  - O(state=ready) confirms this run's reservation (matched by O(session_id)); it lasts
    until the session is destroyed.
  - O(state=absent) drops the reservation of O(name) (only O(session_id)'s when given, so a
    failed create never drops the session of a run that won the name).
  - O(state=read) returns the ledger.
version_added: "1.0.0"
author: bai-cluster developers (@bai-cluster)
options:
  state:
    description: What to do (see above).
    type: str
    choices: [reserved, ready, absent, read]
    default: reserved
  path:
    description: The ledger file on this host; its directory is created (mode 0700).
    type: path
    default: /var/lib/bai-cluster/ledger.json
  name:
    description: Session name, for O(state=ready) and O(state=absent).
    type: str
  session_id:
    description: The session id that O(state=ready) confirms or O(state=absent) limits itself to.
    type: str
  spec:
    description:
      - The validated spec (RV(bai.cluster.bai_session_plan#module:spec)), for
        O(state=reserved).
    type: dict
  agent_info:
    description:
      - The registered C(results) of a looped M(bai.cluster.bai_agent_info) task, for
        O(state=reserved).
    type: list
    elements: dict
  ttl:
    description:
      - Seconds a C(creating) reservation lasts unless confirmed; longer than a create
        may take.
    type: int
    default: 900
  lock_timeout:
    description: Seconds to wait for the ledger's lock before failing.
    type: int
    default: 60
attributes:
  check_mode:
    support: full
    description: Places and reports, writes nothing.
  diff_mode:
    support: none
    description: The ledger's change is the reservation returned.
  idempotent:
    support: full
    description: >-
      A rerun of a session that exists changes nothing; each new session is one new
      reservation.
"""

EXAMPLES = r"""
- name: Place the session and reserve its resources
  bai.cluster.bai_session_ledger:
    spec: "{{ request.spec }}"
    agent_info: "{{ info.results }}"
  delegate_to: "{{ groups['manager'][0] }}"
  register: plan

- name: Confirm the reservation once the session runs
  bai.cluster.bai_session_ledger:
    state: ready
    name: "{{ plan.summary.name }}"
    session_id: "{{ plan.session_id }}"
  delegate_to: "{{ groups['manager'][0] }}"
"""

RETURN = r"""
action:
  description:
    - C(create) or C(exists), as M(bai.cluster.bai_session_plan) returns it; the other
      results of that module come with it (O(state=reserved)).
  returned: O(state=reserved)
  type: str
reservation:
  description:
    - The session's ledger entry (name, session_id, state, kernels with agent and
      resources).
  returned: O(state=reserved), O(state=ready)
  type: dict
ledger:
  description: Every reservation by session name, and per agent what they give out.
  returned: O(state=read)
  type: dict
dropped:
  description: Reservations this run found expired or stale and removed.
  returned: O(state=reserved)
  type: list
  elements: str
pending:
  description: True when the failure is a PENDING placement (waiting may help unless RV(permanent)).
  returned: failure
  type: bool
permanent:
  description: True when waiting cannot help a PENDING placement.
  returned: failure
  type: bool
"""

import errno
import fcntl
import os
import tempfile
import time
from contextlib import contextmanager

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bai.cluster.plugins.module_utils import ledger as book
from ansible_collections.bai.cluster.plugins.module_utils.errors import (
    Pending,
    SessionConflict,
    SpecError,
)
from ansible_collections.bai.cluster.plugins.module_utils.plan import agents_from_info, plan_session
from ansible_collections.bai.cluster.plugins.module_utils.spec import (
    normalize_spec,
    spec_canonical,
    spec_hash,
)


class Busy(Exception):
    """The lock was not had within lock_timeout."""


@contextmanager
def locked(path: str, timeout: float):
    """Hold an exclusive flock on PATH.lock (made 0600; its directory 0700)."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise Busy(path) from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)  # releases the lock


def load(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            return book.loads(handle.read())
    except FileNotFoundError:
        return book.empty()


def save(path: str, ledger: dict) -> None:
    """Write atomically: a temporary file in the same folder, fsync, rename."""
    fd, tmp = tempfile.mkstemp(prefix=".ledger.", dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(book.dumps(ledger))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def reserve(module: AnsibleModule, ledger: dict, now: float) -> dict:
    params = module.params
    try:
        spec = normalize_spec(dict(params["spec"] or {}))
    except SpecError as exc:
        module.fail_json(msg=f"invalid session spec: {exc}")
    info = list(params["agent_info"] or [])
    dropped = book.expire(ledger, now) + book.drop_stale(ledger, info)
    entry = ledger["sessions"].get(spec.name)
    counted = book.adjust(info, ledger)
    try:
        agents, existing, inventory = agents_from_info(None, None, counted)
    except SpecError as exc:
        module.fail_json(msg=f"bai_session_ledger: {exc}")
    read_at = min((float(r.get("read_at") or 0) for r in info if "agent" in r), default=0.0)
    try:
        if entry is not None:
            entry = {**entry, "name": spec.name}
        if book.before_placing(entry, existing, read_at) == "place" and entry is not None:
            del ledger["sessions"][spec.name]  # stale: its containers are gone
        plan = plan_session(spec, agents or [], existing, inventory=inventory)
    except Pending as exc:
        module.fail_json(
            msg=f"session {spec.name}: {exc}",
            pending=True,
            permanent=exc.permanent,
            dropped=dropped,
        )
    except SessionConflict as exc:
        module.fail_json(msg=str(exc), conflict=True)
    except SpecError as exc:
        module.fail_json(msg=f"session {spec.name}: {exc}; nothing was created")
    plan = {
        **plan,
        "requested_mode": spec.mode,
        "spec": spec_canonical(spec),
        "spec_hash": spec_hash(spec),
        "size": spec.size,
    }
    changed = bool(dropped)
    if spec.name not in ledger["sessions"]:
        entry = book.reservation(plan, now=now, ttl=params["ttl"])
        if plan["action"] == "exists":  # made before the ledger: take it in as it is
            entry.update(state=book.READY, expires_at=None, ready_at=now)
        ledger["sessions"][spec.name] = entry
        changed = True
    return {
        **plan,
        "changed": changed,
        "reservation": ledger["sessions"][spec.name],
        "dropped": dropped,
    }


def run(module: AnsibleModule) -> dict:
    params = module.params
    state, path = params["state"], params["path"]
    if state in ("ready", "absent") and not params["name"]:
        module.fail_json(msg=f"bai_session_ledger: state={state} needs name")
    if state == "ready" and not params["session_id"]:
        module.fail_json(msg="bai_session_ledger: state=ready needs session_id")
    if state == "reserved" and (params["spec"] is None or params["agent_info"] is None):
        module.fail_json(msg="bai_session_ledger: state=reserved needs spec and agent_info")
    if state == "read" and not os.path.exists(path):
        return {"changed": False, "ledger": {"sessions": {}, "given_out": {}}}
    try:
        with locked(path, params["lock_timeout"]):
            ledger = load(path)
            now = time.time()
            if state == "reserved":
                result = reserve(module, ledger, now)
            elif state == "ready":
                changed = book.mark_ready(ledger, params["name"], params["session_id"], now)
                result = {"changed": changed, "reservation": ledger["sessions"].get(params["name"])}
            elif state == "absent":
                changed = book.release(ledger, params["name"], params["session_id"])
                result = {"changed": changed}
            else:
                result = {
                    "changed": False,
                    "ledger": {"sessions": ledger["sessions"], "given_out": book.given_out(ledger)},
                }
            if result["changed"] and not module.check_mode:
                save(path, ledger)
    except Busy:
        module.fail_json(
            msg=f"the session ledger {path} stayed locked for {params['lock_timeout']} s "
            f"(another create holds it; if none runs, a stuck process on this host does)"
        )
    except book.LedgerError as exc:
        module.fail_json(msg=f"session ledger {path}: {exc}; nothing was changed")
    except OSError as exc:
        module.fail_json(msg=f"session ledger {path}: {exc.strerror or exc}")
    return result


ARGUMENT_SPEC = {
    "state": {
        "type": "str",
        "choices": ["reserved", "ready", "absent", "read"],
        "default": "reserved",
    },
    "path": {"type": "path", "default": "/var/lib/bai-cluster/ledger.json"},
    "name": {"type": "str"},
    "session_id": {"type": "str"},
    "spec": {"type": "dict"},
    "agent_info": {"type": "list", "elements": "dict"},
    "ttl": {"type": "int", "default": 900},
    "lock_timeout": {"type": "int", "default": 60},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
