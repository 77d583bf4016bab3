#!/usr/bin/env bash
# `make test`: every stage CI runs, on a clean checkout, in the least time two cores allow.
#
# The images the lab needs are built first (everything else builds FROM them). Then three
# things at once: lint and the unit tests (no Docker), the integration tests' image
# bai/session-hpc (scripts/test_images.sh: only test_distributed.py needs it), and the lab
# brought up and converged with site.yml. The two side stages keep their output in
# .cache/test-logs/ and it is printed once they are done. Then, one after the other, the
# integration tests and the Molecule scenarios, which share the machine's engine.
#
# The caller (make test) has run `make setup`; BAI_SETUP_DONE tells the stages so (two
# setups at once would race on the venv).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export BAI_SETUP_DONE=1
logs=.cache/test-logs
mkdir -p "$logs"

stage() { make --no-print-directory "$@"; }

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

began=$SECONDS
stage images
stage lint unit >"$logs/lint-unit.log" 2>&1 &
side+=($!)
stage test-images >"$logs/test-images.log" 2>&1 &
side+=($!)
lab=0
stage lab-up site || lab=$?
failed=()
finish lint-unit.log "${side[0]}" || failed+=("lint or the unit tests")
finish test-images.log "${side[1]}" || failed+=("the test images")
[ "$lab" -eq 0 ] || failed+=("the lab or site.yml")
if [ "${#failed[@]}" -gt 0 ]; then
  printf 'make test: failed: %s\n' "$(IFS=,; echo "${failed[*]}")" >&2
  exit 1
fi
echo "make test: images, lint, unit tests, the lab and its converge done in $((SECONDS - began)) s"

stage integration-tests
stage molecule
