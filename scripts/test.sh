#!/usr/bin/env bash
# `make test`: every test the project has, on a clean checkout, in the least time two
# cores allow.
#
# The images the lab needs are built first (everything else builds FROM them). Then two
# things at once: the integration tests' image bai/session-hpc and the browser
# (scripts/test_images.sh, browser_setup.sh), and the lab brought up and converged with
# site.yml. Then two lanes at once: the integration tests on the lab (`make
# integration-lab`, pytest -m lab) and, beside them, lint and the unit tests (no Docker),
# the integration tests on this machine's engine (`make integration-local`, -m "not
# lab") and the Molecule scenarios. The machine's cores are busy throughout; lint and the
# unit tests sit in the local lane, which is the shorter one, so that the lab comes up
# sooner and the lanes end together. The two kinds never touch each other's engines
# (tests/integration/conftest.py checks each module's own engines are empty before and
# after it). Nothing is deselected. A side stage keeps its output in .cache/test-logs/,
# printed once it is done. At the end, passed or not: the time report (each stage, the
# 20 slowest tests; scripts/test_report.py).
#
# The caller (make test) has run `make setup`; BAI_SETUP_DONE tells the stages so (two
# setups at once would race on the venv).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export BAI_SETUP_DONE=1
logs=.cache/test-logs
mkdir -p "$logs"
rm -f "$logs"/*.xml "$logs/stages.tsv"
export TEST_LOGS=$logs

stage() { make --no-print-directory "$@"; }

# A stage's name, seconds and exit code, for the report; timed() runs it and notes them.
note() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$logs/stages.tsv"; }
timed() {
  local name=$1 began=$SECONDS rc=0
  shift
  "$@" || rc=$?
  note "$name" "$((SECONDS - began))" "$rc"
  return "$rc"
}
report() { python scripts/test_report.py --logs "$logs" || true; }
trap report EXIT

side=()
trap 'for pid in "${side[@]}"; do kill "$pid" 2>/dev/null || true; done' INT TERM

# A side stage's output, printed once its process is done; 0 when it passed.
finish() {
  local log=$1 pid=$2 rc=0
  wait "$pid" || rc=$?
  echo "== ${log%.log} (run beside the lab; exit $rc):"
  cat "$logs/$log"
  return "$rc"
}

# Stops naming the stages that failed, if any did.
failed=()
stop_if_failed() {
  if [ "${#failed[@]}" -gt 0 ]; then
    printf 'make test: failed: %s\n' "$(IFS=,; echo "${failed[*]}")" >&2
    exit 1
  fi
}

began=$SECONDS
timed "images" stage images
timed "  test images, browser" stage test-images >"$logs/test-images.log" 2>&1 &
side+=($!)
lab=0
timed "  lab up, site.yml" stage lab-up site || lab=$?
finish test-images.log "${side[0]}" || failed+=("the test images")
[ "$lab" -eq 0 ] || failed+=("the lab or site.yml")
stop_if_failed
echo "make test: images, the lab and its converge done in $((SECONDS - began)) s"
note "first stage, in all" "$((SECONDS - began))" 0

began=$SECONDS
side=()
# The local lane: lint and the unit tests, the local integration tests, then every
# Molecule scenario, each timed.
local_lane() {
  local rc=0 scenario
  timed "  local lane: lint and unit tests" stage lint unit || rc=$?
  timed "  local lane: integration tests" stage integration-local || rc=$?
  for scenario in default multinode systemd; do
    timed "  local lane: molecule $scenario" stage molecule SCENARIOS="$scenario" || rc=$?
  done
  return "$rc"
}
local_lane >"$logs/local-molecule.log" 2>&1 &
side+=($!)
lab=0
timed "  lab lane: integration tests" stage integration-lab || lab=$?
echo "make test: the lab's integration tests done in $((SECONDS - began)) s (exit $lab)"
finish local-molecule.log "${side[0]}" || failed+=("lint, the unit or local integration tests, or Molecule")
[ "$lab" -eq 0 ] || failed+=("the lab's integration tests")
note "the two lanes, in all" "$((SECONDS - began))" "${#failed[@]}"
stop_if_failed
echo "make test: integration tests and Molecule done in $((SECONDS - began)) s"
