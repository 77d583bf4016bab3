"""The time report `make test` prints at its end: each stage's time, then the slowest tests.

Reads what scripts/test.sh leaves in a log folder (default .cache/test-logs):
  stages.tsv    one line per stage: its name, its seconds, its exit code (tab-separated)
  *.xml         pytest's JUnit XML of each lane (a test's time is its setup, call and
                teardown together)

  python scripts/test_report.py [--logs DIR] [--top 20]
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def stages(folder: Path) -> list[tuple[str, float, str]]:
    path = folder / "stages.tsv"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        name, seconds, code = [*line.split("\t"), "", ""][:3]
        rows.append((name, float(seconds or 0), code))
    return rows


def tests(folder: Path) -> list[tuple[float, str, str]]:
    """(seconds, lane, test id) of every test case in the lanes' JUnit files."""
    found = []
    for xml in sorted(folder.glob("*.xml")):
        try:
            root = ET.parse(xml).getroot()
        except ET.ParseError as err:  # a lane cut off while writing: say so, go on
            print(f"test_report: {xml.name}: unreadable ({err})", file=sys.stderr)
            continue
        for case in root.iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            found.append((float(case.get("time") or 0), xml.stem, name))
    return found


def report(folder: Path, top: int) -> str:
    lines = ["== make test: time report"]
    rows = stages(folder)
    if rows:
        width = max(len(row[0]) for row in rows)
        lines.append("stages (seconds, exit code; stages on one line of test.sh ran at once):")
        for name, seconds, code in rows:
            lines.append(f"  {name:<{width}}  {seconds:7.0f}  {code}")
    cases = sorted(tests(folder), reverse=True)
    if cases:
        total = sum(case[0] for case in cases)
        lines.append(
            f"the {min(top, len(cases))} slowest of {len(cases)} tests "
            f"({total:.0f} s in all; seconds with set-up and teardown, lane):"
        )
        for seconds, lane, name in cases[:top]:
            lines.append(f"  {seconds:7.1f}  {lane:<6} {name}")
    if len(lines) == 1:
        lines.append(f"  nothing recorded in {folder}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=Path, default=Path(".cache/test-logs"))
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args(argv)
    print(report(args.logs, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
