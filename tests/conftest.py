"""Policy for every test run (unit and integration).

With CI=true a skipped test fails: a lab that did not come up, an image that was not
built or an engine that did not answer must not pass as "skipped". A test that cannot run
on the project's machines at all says why with ``@pytest.mark.cannot_run_here("...")``
and stays a skip there too.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")

# No per-example deadline: `make test` runs the unit tests beside the image builds, and
# a busy machine must not turn a slow example into a failure (a wrong result still fails).
# With CI set, Hypothesis loads its own "ci" profile, which has none either.
if not IN_CI:
    settings.register_profile("bai", deadline=None)
    settings.load_profile("bai")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (IN_CI and report.skipped) or hasattr(report, "wasxfail"):
        return
    if item.get_closest_marker("cannot_run_here") is not None:
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
    reason = str(reason).removeprefix("Skipped: ")
    report.outcome = "failed"
    report.longrepr = (
        f"skipped with CI=true, which counts as a failure: {reason}. A test that cannot run "
        f"on these machines at all says why with @pytest.mark.cannot_run_here(reason)."
    )
