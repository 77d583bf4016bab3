#!/usr/bin/env bash
# promtool, the Prometheus project's checker of alert rules and metrics, from Debian's
# `prometheus` package (scripts/prometheus_tools.sh unpacks it once under .cache/tools/),
# run with the arguments given.
#   scripts/promtool.sh check rules monitoring/bai_cluster.rules.yml
set -euo pipefail
BIN=$("$(dirname "${BASH_SOURCE[0]}")/prometheus_tools.sh")
exec "$BIN/promtool" "$@"
