"""The ledger's document (module_utils/scheduling/ledger/document.py): its text, the Ledger it is
read as and written from (byte for byte what was read), and a damaged one refused, never
read as empty."""

import ast
import json
from pathlib import Path

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import LedgerError
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import document, roster
from ledger_fake import (
    info,
    place,
)

SCHEDULING = Path(document.__file__).parent

# Every top-level key the toolkit writes, and two it does not know (kept as they are).
RICH = {
    "version": 1,
    "sessions": {
        "s1": {
            "name": "s1",
            "session_id": "sid-1",
            "state": "ready",
            "reserved_at": 990.5,
            "expires_at": None,
            "ready_at": 1000.25,
            "kernels": [{"host": "main1", "agent": "a1", "cpu": 2.0, "mem": 1024, "gpu": 0}],
        },
        # Every field a reservation has, an integer where a float is usual, and keys this
        # toolkit does not know, in the reservation and in a kernel.
        "s2": {
            "name": "s2",
            "session_id": "sid-2",
            "spec_hash": "h2",
            "state": "ready",
            "reserved_at": 990,
            "expires_at": None,
            "ready_at": 1000,
            "owner": "alice",
            "type": "batch",
            "lifetime_s": 600,
            "deadline": 1600,
            "end_signal": "USR1@300",
            "end_signal_at": 1290.5,
            "adopted": True,
            "submitted_at": 980.0,
            "preempted_by": {"session": "high", "at": 1300.0},
            "spec": {"name": "s2", "restarts": 2},
            "authorized_keys": ["ssh-ed25519 AAAA alice"],
            "attempt": 1,
            "attempts": [{"attempt": 0, "state": "lost", "members": {"main1": "a1"}}],
            "kernels": [
                {
                    "host": "main1",
                    "agent": "a2",
                    "cpu": 1,
                    "mem": 0,
                    "gpu": 1,
                    "gpu_devices": [3],
                    "zz_kernel_note": "kept",
                }
            ],
            "zz_reservation_note": [1, None],
        },
        "s3": {"session_id": "sid-3", "kernels": []},  # fields it lacks stay out
    },
    "agents": {"a1": {"stored_at": 1000.0, "agent": {"name": "a1"}, "sessions": {}}},
    "queue": {"q1": {"name": "q1", "seq": 3, "submitted_at": 1001.0, "reason": "é ✓"}},
    "queue_seq": 3,
    "ended": {"sid-0": {"name": "s0", "removed_at": 999.0, "exit_code": 0}},
    "forsaken": {"sid-9": {"name": "s9", "agents": ["a2"], "at": 998.0}},
    "aliases": ["old-ledger"],
    "availability": {"id-a2": {"availability": "pause", "by": "alice", "at": 5}},
    "clock": 1002.125,
    "zz_future": {"b": [1, 2.5, None, True]},
    "aa_note": None,
}


def test_loads_and_dumps_round_trip():
    ledger = document.empty()
    place(ledger, "s1", [info("a1")], size=2)
    assert document.loads(document.dumps(ledger)) == ledger


def test_a_rich_ledger_is_written_back_byte_for_byte():
    text = json.dumps(RICH, indent=1, sort_keys=True) + "\n"
    compact = json.dumps(RICH, separators=(",", ":"), sort_keys=True)
    ledger = document.loads(text)
    assert document.dumps(ledger) == text
    assert document.dumps_compact(ledger) == compact
    assert document.dumps(document.loads(compact)) == text
    assert ledger.to_dict() == RICH
    assert ledger.extra == {"zz_future": RICH["zz_future"], "aa_note": None}
    assert (ledger.queue_seq, ledger.clock, ledger.aliases) == (3, 1002.125, ["old-ledger"])


def test_keys_a_ledger_lacks_stay_out_of_its_text():
    text = '{"version": 1, "sessions": {}}'
    ledger = document.loads(text)
    assert ledger.agents is None and ledger.queue is None and ledger.clock is None
    assert document.dumps_compact(ledger) == '{"sessions":{},"version":1}'
    assert document.dumps(ledger) == '{\n "sessions": {},\n "version": 1\n}\n'
    # A new ledger has its (empty) kept reads, as it always had.
    assert document.empty().to_dict() == {"version": 1, "sessions": {}, "agents": {}}


def test_a_known_key_of_another_type_is_kept_as_it_is():
    """Never written by this toolkit: kept (so written back unchanged), read as absent."""
    data = {"version": 1, "sessions": {}, "queue": None, "clock": "soon", "queue_seq": True}
    ledger = document.Ledger.from_dict(data)
    assert ledger.queue is None and ledger.clock is None and ledger.queue_seq is None
    assert ledger.to_dict() == data
    assert document.dumps(ledger) == json.dumps(data, indent=1, sort_keys=True) + "\n"


def test_an_integer_clock_stays_an_integer():
    ledger = document.loads('{"version": 1, "sessions": {}, "clock": 5}')
    assert document.dumps_compact(ledger) == '{"clock":5,"sessions":{},"version":1}'


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty"),  # a truncated file is damaged, never an empty ledger (case 7)
        (" \n", "empty"),
        ("{", "not JSON"),
        ("[]", "no 'sessions'"),
        ('{"version": 9, "sessions": {}}', "version 9"),
    ],
)
def test_a_damaged_ledger_is_refused_with_the_reason(text, says):
    with pytest.raises(LedgerError, match=says):
        document.loads(text)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"version": 1}, "no 'sessions'"),
        ({"version": 1, "sessions": []}, "no 'sessions'"),
        ({"sessions": {}}, "ledger version None"),
        ("ledger", "no 'sessions'"),
    ],
)
def test_from_dict_refuses_what_loads_refuses(data, says):
    with pytest.raises(LedgerError, match=says):
        document.Ledger.from_dict(data)


def test_a_dict_is_no_ledger():
    """mypy refuses a dict where the scheduling code takes a Ledger (make lint); at run
    time it fails at once, never half-read."""
    with pytest.raises(AttributeError):
        roster.given_out({"version": 1, "sessions": {}})  # type: ignore[arg-type]


def test_every_ledger_parameter_is_typed_as_the_ledger():
    """No function of scheduling/ takes the ledger as a dict, a Mapping or Any."""
    loose = []
    for path in sorted(SCHEDULING.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for arg in [*node.args.args, *node.args.kwonlyargs]:
                if arg.arg != "ledger":
                    continue
                shown = ast.unparse(arg.annotation) if arg.annotation else "(none)"
                if shown not in ("Ledger", "document.Ledger"):
                    loose.append(f"{path.name}:{node.lineno} {node.name}: {shown}")
    assert loose == []
