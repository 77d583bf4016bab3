#!/usr/bin/env bash
# A real browser for the integration tests (tests/integration/browser.py): Debian's
# chromium, its chromedriver, and NSS's certutil (to trust the lab's CA in a throwaway
# NSS database, so HTTPS is verified for real). Installed from apt only when missing;
# idempotent and fast the second time (one dpkg-query, nothing else).
#
#   scripts/browser_setup.sh
#
# Selenium itself is a Python package pinned in requirements.txt (scripts/setup.sh).
# Selenium's own driver download needs the internet: the tests always name
# /usr/bin/chromedriver.
set -euo pipefail

PACKAGES=(chromium chromium-driver libnss3-tools)

log() { printf '[browser-setup] %s\n' "$*" >&2; }
die() { printf '[browser-setup] ERROR: %s\n' "$*" >&2; exit 1; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -n "$@"; fi
}

installed() {
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = "installed" ]
}

missing=()
for p in "${PACKAGES[@]}"; do
  installed "$p" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  log "chromium, chromium-driver and libnss3-tools present"
  exit 0
fi

command -v apt-get >/dev/null 2>&1 \
  || die "${missing[*]} missing and no apt-get: install Chromium, its chromedriver (/usr/bin/chromedriver) and NSS's certutil yourself."

# Wait for another apt/dpkg run (scripts/setup.sh may be installing docker.io) rather than fail.
apt_get() {
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 \
    -o Acquire::Check-Valid-Until=false "$@"
}

# apt-get update only when the package lists lack a candidate (fresh machine, cleaned lists),
# or when installing from the lists we have fails (stale lists naming files the mirror dropped).
has_candidates() {
  local p cand
  for p in "$@"; do
    cand=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}')
    [ -n "$cand" ] && [ "$cand" != "(none)" ] || return 1
  done
}

log "installing ${missing[*]} (about a minute the first time)"
if ! has_candidates "${missing[@]}"; then
  log "apt-get update (no candidate for ${missing[*]} in the package lists)"
  apt_get update -qq
fi
if ! apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
  log "install failed with the current package lists: apt-get update and retry"
  apt_get update -qq
  apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

for p in "${PACKAGES[@]}"; do
  installed "$p" || die "$p still not installed after apt-get install"
done
[ -x /usr/bin/chromedriver ] || die "/usr/bin/chromedriver missing after installing chromium-driver"
log "ready: $(/usr/bin/chromium --version 2>/dev/null || echo chromium), $(/usr/bin/chromedriver --version 2>/dev/null | head -1)"
