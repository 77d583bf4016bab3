"""A pytest plugin for bench/ledger_diff/run.py: every ledger text the unit tests
serialize (document.dumps, dumps_compact), one JSON line [test id, function, text] each,
into $LEDGER_DIFF_LOG; uuid4 counts from 1 in each test, so session ids match between
two checkouts' runs."""

from __future__ import annotations

import itertools
import json
import os
import uuid

import pytest

_LOG = open(os.environ["LEDGER_DIFF_LOG"], "w", encoding="utf-8")  # noqa: SIM115


@pytest.fixture(autouse=True)
def _log_ledger_texts(monkeypatch, request):
    from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import document

    ids = itertools.count(1)
    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(int=next(ids)))
    for name in ("dumps", "dumps_compact"):
        write = getattr(document, name)

        def logged(ledger, _write=write, _name=name):
            text = _write(ledger)
            _LOG.write(json.dumps([request.node.nodeid, _name, text]) + "\n")
            return text

        monkeypatch.setattr(document, name, logged)
    yield
    _LOG.flush()
