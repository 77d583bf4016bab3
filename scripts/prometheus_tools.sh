#!/usr/bin/env bash
# The Prometheus project's programs as Debian ships them - prometheus, promtool and
# prometheus-node-exporter - for the checks and tests that need them: the packages are
# downloaded once (apt-get download: nothing installed, no service started) and unpacked
# under .cache/tools/NAME/; prints the folder of their usr/bin.
#   scripts/prometheus_tools.sh            -> .../.cache/tools/...; see scripts/promtool.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS="$ROOT/.cache/tools"
BIN="$TOOLS/prometheus/usr/bin"
fetch() {  # fetch PACKAGE FOLDER: unpack PACKAGE's files into FOLDER, once
  local package=$1 folder=$2 work
  [ -e "$folder/.unpacked-$package" ] && return 0
  command -v apt-get >/dev/null 2>&1 || { echo "prometheus_tools.sh: no apt-get to fetch $package" >&2; exit 1; }
  work=$(mktemp -d /tmp/bai-prometheus.XXXXXX)
  chmod 0755 "$work"
  (cd "$work" && { apt-get download -qq "$package" 2>/dev/null \
    || { apt-get update -qq && apt-get download -qq "$package"; }; }) >/dev/null
  mkdir -p "$folder"
  dpkg-deb -x "$work/${package}"_*.deb "$folder"
  rm -rf "$work"
  touch "$folder/.unpacked-$package"
  echo "prometheus_tools.sh: $package unpacked in $folder" >&2
}
fetch prometheus "$TOOLS/prometheus"
fetch prometheus-node-exporter "$TOOLS/prometheus"
echo "$BIN"
