"""The unit tests, laid out like the code they test (tests/unit/plugins/module_utils/...,
tests/unit/bai_cli/, and tests/unit/repo/ for checks of the whole repository). The
helpers they share (ledger_fake, docker_fake, gpu_fakes, playbook_run, repo_scripts, ...)
and the fixtures stay in this folder, which pytest puts on sys.path because this file is
here. The pytest fixtures below serve the tests that make session containers."""

import pytest
from docker_fake import GI, FakeEngine


@pytest.fixture
def engine() -> FakeEngine:
    """An agent's engine in memory: 8 CPUs and 16 GiB, the agent1 of containers_fake's
    plans. A test file that needs another engine has a fixture of its own."""
    return FakeEngine(ncpu=8, mem_total=16 * GI)


@pytest.fixture
def data_root(tmp_path):
    """A data root (bai_data_roots) under the test's folder, with a folder ``ds`` in it."""
    root = tmp_path / "data"
    (root / "ds").mkdir(parents=True)
    return root


@pytest.fixture(autouse=True)
def gate_settles_at_once(monkeypatch):
    """The gate waits for a new overlay's links before its second run (gate.LINK_SETTLE_S);
    the fake engine's links do not settle with time, so the unit tests do not wait."""
    from ansible_collections.bai.cluster.plugins.module_utils.containers import gate

    monkeypatch.setattr(gate, "LINK_SETTLE_S", 0.0)
