"""module_utils/network/isolation.py: the session bridges' interface names, the check of table
inet bai_isolation, and bai_session_containers' refusal without it (nothing made).

SIMULATED: the host that answers ``nft`` is a stand-in (FakeHost below) and the engine is
tests/unit/docker_fake.py's; the integration tests (test_isolation_local.py) run the real
table against a real engine."""

from __future__ import annotations

import containers_fake as containers
import pytest
from ansible_collections.bai.cluster.plugins.module_utils.network import isolation
from ansible_collections.bai.cluster.plugins.modules import bai_session_containers
from docker_fake import run_module
from hypothesis import given
from hypothesis import strategies as st

LOADED = (
    "table inet bai_isolation {\n"
    '\tcomment "bai-cluster session isolation 0123abcd"\n'
    "\tset uplinks {\n"
    "\t\ttype ifname\n"
    "\t}\n"
    "}\n"
)


class FakeHost:
    """What table_state needs of a module: get_bin_path and run_command."""

    def __init__(self, nft: str | None = "/usr/sbin/nft", answer=(0, LOADED, "")):
        self.nft, self.answer, self.ran = nft, answer, []

    def get_bin_path(self, name):
        return self.nft if name == "nft" else None

    def run_command(self, args):
        self.ran.append(args)
        return self.answer


def test_a_session_bridge_is_named_by_its_session_id_within_the_kernel_s_15_characters():
    name = isolation.bridge_name("0b5c2d4e-9f10-4a2b-8c3d-112233445566")
    assert name == "bais-0b5c2d4e9f"
    assert len(name) == isolation.IFNAME_MAX


@given(st.uuids())
def test_every_session_id_gives_a_prefixed_interface_name_linux_accepts(uuid):
    name = isolation.bridge_name(str(uuid))
    assert name.startswith(isolation.BRIDGE_PREFIX)
    assert 0 < len(name) <= isolation.IFNAME_MAX
    assert all(c.isalnum() or c == "-" for c in name)


def test_the_loaded_table_is_found_with_a_terse_listing():
    host = FakeHost()
    state = isolation.table_state(host)
    assert state == {
        "loaded": True,
        "marker": "bai-cluster session isolation 0123abcd",
        "problem": None,
    }
    # -t: the dynamic set's elements (one per interface that forwarded) are left out.
    assert host.ran == [["/usr/sbin/nft", "-t", "list", "table", "inet", "bai_isolation"]]
    assert isolation.table_problem(host, "agent1") is None


@pytest.mark.parametrize(
    ("host", "problem"),
    [
        (FakeHost(nft=None), "nft is not installed"),
        (
            # What nft 1.0 says of a table that is not there.
            FakeHost(answer=(1, "", "Error: No such file or directory\nlist table inet x\n")),
            "the table is not loaded",
        ),
        (FakeHost(answer=(1, "", "Error: Operation not permitted\n")), "Operation not permitted"),
        (FakeHost(answer=(1, "", "")), "nft exited 1"),
        (
            FakeHost(answer=(0, 'table inet bai_isolation {\n\tcomment "mine"\n}\n', "")),
            "is not the toolkit's",
        ),
        (FakeHost(answer=(0, "table inet bai_isolation {\n}\n", "")), "is not the toolkit's"),
    ],
)
def test_a_missing_or_foreign_table_is_a_problem_that_names_the_agent_and_the_fix(host, problem):
    state = isolation.table_state(host)
    assert state["loaded"] is False
    assert problem in state["problem"]
    text = isolation.table_problem(host, "agent7")
    assert text is not None
    assert "table inet bai_isolation" in text and "agent agent7" in text
    assert "playbooks/session_isolation.yml --limit agent7" in text


def test_no_container_and_no_network_is_made_on_an_agent_without_the_table(
    engine, tmp_path, data_root
):
    plan = containers.plan_for()
    args = containers.args_for(plan, tmp_path, data_root)
    missing = {"loaded": False, "marker": None, "problem": "the table is not loaded"}
    patches = {**containers.HOST, (isolation, "table_state"): lambda host: missing}
    result = run_module(bai_session_containers, args, engine, patches=patches)

    assert result["failed"] is True
    assert result["msg"].startswith(
        "cannot start session s1: the session isolation table (nftables table inet "
        "bai_isolation) is not in place on agent agent1 (the table is not loaded)"
    )
    assert "nothing was created" in result["msg"]
    assert engine.session_containers("s1") == []
    assert engine.network_named("bai-s1-net") is None


def test_a_session_bridge_gets_the_interface_name_the_table_matches(engine, tmp_path, data_root):
    plan = containers.plan_for()
    result = containers.run(containers.args_for(plan, tmp_path, data_root), engine)

    assert result["changed"] is True, result
    network = engine.network_named("bai-s1-net")
    assert network["Options"][isolation.BRIDGE_NAME_OPTION] == isolation.bridge_name(
        plan["session_id"]
    )
