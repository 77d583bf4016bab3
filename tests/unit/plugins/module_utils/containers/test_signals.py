"""Signals to a session's members (module_utils/containers/signals.py, bai_session_signal):
which signals one may send and how they are named; the module in check mode.

SIMULATED: the module runs against tests/unit/docker_fake.py's engine in check mode
(nothing is executed); test_signal_local.py and test_signal_lab.py send real signals to
real containers and time them."""

from __future__ import annotations

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import SpecError
from ansible_collections.bai.cluster.plugins.module_utils.session import signal_names
from ansible_collections.bai.cluster.plugins.modules import bai_session_signal
from containers_fake import args_for, plan_for
from containers_fake import run as make
from docker_fake import GI, FakeEngine, run_module


@pytest.mark.parametrize(
    ("given", "name"),
    [("USR1", "USR1"), ("SIGUSR1", "USR1"), ("sigterm", "TERM"), ("10", "USR1"), (" 2 ", "INT")],
)
def test_a_signal_is_named_by_name_with_or_without_sig_or_number(given, name):
    assert signal_names.signal_name(given) == name


@pytest.mark.parametrize("given", ["KILL", "SIGKILL", "9", "0", "99", "USR1; rm -rf /", ""])
def test_kill_unknown_signals_and_anything_else_are_refused(given):
    with pytest.raises(SpecError, match="signal"):
        signal_names.signal_name(given)


def test_the_module_names_the_running_members_in_check_mode_and_refuses_a_bad_signal(tmp_path):
    engine = FakeEngine(ncpu=8, mem_total=16 * GI)
    root = tmp_path / "data"
    root.mkdir()
    plan = plan_for()
    make(args_for(plan, tmp_path, root), engine)
    engine.stop("bai-s1-sub1")
    args = {"session": "s1", "session_id": plan["session_id"], "signal": "USR1", "agent": "a1"}
    done = run_module(bai_session_signal, args, engine, check_mode=True)
    assert done["members"] == {"bai-s1-main1": {}} and done["signal"] == "USR1", done
    refused = run_module(bai_session_signal, {**args, "signal": "KILL"}, engine)
    assert refused["failed"] and refused["bad_input"], refused
    other = run_module(
        bai_session_signal, {**args, "session_id": "another"}, engine, check_mode=True
    )
    assert other["members"] == {} and other["changed"] is False
