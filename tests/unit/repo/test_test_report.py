"""scripts/test_report.py: the time report at the end of `make test`, from the stage times
scripts/test.sh writes and the lanes' JUnit XML. Runs on files under tmp_path."""

from __future__ import annotations

from repo_scripts import load_script

tr = load_script("test_report.py", "test_report_script")

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3">
<testcase classname="tests.integration.test_a" name="test_fast" time="1.5"/>
<testcase classname="tests.integration.test_a" name="test_slow" time="300.25"/>
<testcase classname="tests.integration.test_b" name="test_mid" time="42.0"/>
</testsuite></testsuites>
"""


def test_the_slowest_tests_come_first_with_their_lane_and_only_the_top_ones(tmp_path):
    (tmp_path / "lab.xml").write_text(JUNIT)
    (tmp_path / "local.xml").write_text(
        JUNIT.replace("test_mid", "test_other").replace("42.0", "99")
    )
    text = tr.report(tmp_path, top=2)
    lines = text.splitlines()
    assert "the 2 slowest of 6 tests" in text
    slow = [line for line in lines if "test_slow" in line]
    assert len(slow) == 2 and all("300.2" in line for line in slow), lines
    assert "test_other" not in text and "test_fast" not in text  # below the top 2
    header = next(i for i, line in enumerate(lines) if "slowest" in line)
    assert lines[header + 1 :] == slow  # the two 300 s runs, nothing after them


def test_stages_are_listed_in_order_with_seconds_and_exit_code(tmp_path):
    (tmp_path / "stages.tsv").write_text("first stage\t382.4\t0\nlab lane\t2029\t1\n")
    lines = tr.report(tmp_path, top=20).splitlines()
    first = next(i for i, line in enumerate(lines) if "first stage" in line)
    lab = next(i for i, line in enumerate(lines) if "lab lane" in line)
    assert first < lab
    assert lines[first].split()[-2:] == ["382", "0"]
    assert lines[lab].split()[-2:] == ["2029", "1"]


def test_a_cut_off_junit_file_is_named_and_the_rest_is_reported(tmp_path, capsys):
    (tmp_path / "lab.xml").write_text(JUNIT[:120])
    (tmp_path / "local.xml").write_text(JUNIT)
    text = tr.report(tmp_path, top=20)
    assert "lab.xml: unreadable" in capsys.readouterr().err
    assert "of 3 tests" in text


def test_an_empty_folder_says_nothing_was_recorded(tmp_path):
    assert "nothing recorded" in tr.report(tmp_path, top=20)
