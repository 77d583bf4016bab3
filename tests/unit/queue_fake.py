"""bai_session_ledger's queue steps over a file ledger, as the queue tests run them."""

from __future__ import annotations

from ansible_collections.bai.cluster.plugins.modules import bai_session_ledger
from docker_fake import FakeEngine, run_module
from ledger_fake import fresh_read as read

AGENTS = [{"name": "a1", "group": "default", "resources": None}]


def create(path, name, cpu, *, queue=False, ticket=None, owner="u", policies=None):
    args = {
        "state": "reserved",
        "path": str(path),
        "spec": {"name": name, "size": 1, "resources": {"cpu": cpu}, "owner": owner},
        "agents": AGENTS,
        "agent_info": [read()],
        "queue": queue,
    }
    if ticket:
        args["ticket"] = ticket
    if policies:
        args["policies"] = policies
    return run_module(bai_session_ledger, args, FakeEngine())


def ledger_step(path, **args):
    return run_module(bai_session_ledger, {"path": str(path), **args}, FakeEngine())
