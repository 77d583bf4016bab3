"""bai_session_ledger's steps called directly (module_utils/scheduling/steps/by_state.py,
reserve.py, schedule.py, ledger_request.py): a request built from the module's options,
no AnsibleModule, and the failures the module reports as they are."""

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import document
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger import (
    ledger_store as store_,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.ledger.records import (
    QueueEntry,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps import by_state as steps
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.ledger_request import (
    LedgerFailure,
    LedgerRequest,
    check,
)
from ansible_collections.bai.cluster.plugins.module_utils.scheduling.steps.reserve import reserve
from ansible_collections.bai.cluster.plugins.modules.bai_session_ledger import ARGUMENT_SPEC
from availability_fake import AGENTS, read


def test_a_request_from_the_module_s_defaults_is_the_request_s_defaults():
    params = {key: option.get("default") for key, option in ARGUMENT_SPEC.items()}
    assert LedgerRequest.from_params(params) == LedgerRequest()


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"state": "ready"}, "state=ready needs name"),
        ({"state": "absent", "name": "s", "left_on": ["a1"]}, "left_on needs session_id"),
        ({"state": "reserved"}, "state=reserved needs spec and agent_info or agents"),
        ({"state": "reconciled"}, "state=reconciled needs agent_info"),
    ],
)
def test_a_request_that_lacks_what_its_state_needs_is_refused(options, says):
    with pytest.raises(LedgerFailure, match=says):
        check(LedgerRequest(**options))


def test_reserve_places_and_reserves_without_a_module():
    spec = {"name": "s1", "size": 1, "resources": {"cpu": 2}}
    request = LedgerRequest(spec=spec, agents=AGENTS, agent_info=[read("a1"), read("a2")])
    ledger = document.empty()
    placed = reserve(request, ledger, 1000.0)
    assert placed["changed"] and placed["reservation"]["state"] == document.CREATING
    assert ledger.sessions["s1"].kernels[0].agent in ("a1", "a2")
    # The same name queued with another request: refused with the module's keys.
    ledger.queue = {"s2": QueueEntry.from_dict({"spec_hash": "other"})}
    with pytest.raises(LedgerFailure, match="is queued \\(PENDING\\) with another") as failed:
        reserve(LedgerRequest(spec={**spec, "name": "s2"}, agents=AGENTS), ledger, 1000.0)
    assert failed.value.fields == {"conflict": True}


def test_a_damaged_ledger_fails_every_step_but_identity_and_reconcile(tmp_path):
    store = store_.FileStore(str(tmp_path / "ledger.json"), 5)
    damaged = store_.Snapshot(document.empty(), "", "the ledger is not JSON", None)
    out = steps.step(LedgerRequest(state="identity"), store, damaged, 1000.0)
    assert out == {"changed": False, "ledger_time": 1000.0, "damaged": "the ledger is not JSON"}
    with pytest.raises(LedgerFailure, match="the ledger is not JSON; rebuild it"):
        steps.step(LedgerRequest(state="read"), store, damaged, 1000.0)


def test_an_identity_read_says_only_whether_the_ledger_is_there():
    # The module's identity read loads none of the scheduling steps: it is this alone.
    ledger = document.empty()
    there = store_.Snapshot(ledger, "", "", None)
    assert store_.identity_read(there, 5.0) == {"changed": False, "ledger_time": 5.0}
    for missing in ("new", "lost"):
        gone = store_.Snapshot(ledger, missing, "", None)
        assert store_.identity_read(gone, 5.0) == {
            "changed": False,
            "ledger_time": 5.0,
            "missing": True,
        }
    # The same as the step the other states go through.
    store = store_.FileStore("/nonexistent/ledger.json", 5)
    for snapshot in (there, store_.Snapshot(ledger, "new", "", None)):
        assert steps.step(LedgerRequest(state="identity"), store, snapshot, 5.0) == (
            store_.identity_read(snapshot, 5.0)
        )


def test_an_owner_scoped_read_refuses_another_owners_session_and_remembers_ended_owners():
    spec = {"name": "s1", "size": 1, "resources": {"cpu": 2}, "owner": "alice"}
    ledger = document.empty()
    placed = reserve(
        LedgerRequest(spec=spec, agents=AGENTS, agent_info=[read("a1"), read("a2")]), ledger, 1000.0
    )
    mine = steps.shown(LedgerRequest(state="read", name="s1", owner="alice"), ledger, 1001.0, "")
    assert mine["reservation"]["owner"] == "alice"
    with pytest.raises(LedgerFailure, match="s1 is held by another owner, not bob") as refused:
        steps.shown(LedgerRequest(state="read", name="s1", owner="bob"), ledger, 1001.0, "")
    assert refused.value.fields == {"not_owner": True}
    # A session the ledger does not know is nobody's here (the agents' labels decide).
    unknown = steps.shown(LedgerRequest(state="read", name="s9", owner="bob"), ledger, 1001.0, "")
    assert unknown["reservation"] is None
    # A batch session that ended: its record keeps its owner, and the scoped read follows it.
    session_id = placed["session_id"]
    ended = {"state": "succeeded", "exit_code": 0}
    steps.released(
        LedgerRequest(state="absent", name="s1", session_id=session_id, ended=ended),
        ledger,
        1002.0,
    )
    gone = steps.shown(LedgerRequest(state="read", name="s1", owner="alice"), ledger, 1003.0, "")
    assert gone["reservation"] is None and gone["ended"][0]["owner"] == "alice"
    with pytest.raises(LedgerFailure, match="held by another owner"):
        steps.shown(LedgerRequest(state="read", name="s1", owner="bob"), ledger, 1003.0, "")
