#!/usr/bin/env bash
# promtool, the Prometheus project's checker of alert rules and metrics, from Debian's
# `prometheus` package: downloaded once (apt-get download, nothing installed, no service
# started) and unpacked under .cache/tools/; then run with the arguments given.
#   scripts/promtool.sh check rules monitoring/bai_cluster.rules.yml
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS="$ROOT/.cache/tools/prometheus"
PROMTOOL="$TOOLS/usr/bin/promtool"
if [ ! -x "$PROMTOOL" ]; then
  command -v apt-get >/dev/null 2>&1 || { echo "promtool.sh: no apt-get to fetch Debian's prometheus package" >&2; exit 1; }
  work=$(mktemp -d /tmp/bai-promtool.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  chmod 0755 "$work"
  (cd "$work" && { apt-get download -qq prometheus 2>/dev/null \
    || { apt-get update -qq && apt-get download -qq prometheus; }; }) >/dev/null
  mkdir -p "$TOOLS"
  dpkg-deb -x "$work"/prometheus_*.deb "$TOOLS"
  echo "promtool.sh: $("$PROMTOOL" --version 2>&1 | head -1) in $TOOLS" >&2
fi
exec "$PROMTOOL" "$@"
