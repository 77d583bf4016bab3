#!/usr/bin/env bash
# Prepare this machine as a controller: a pinned Python venv in .venv/ and a Docker
# engine that answers. Idempotent and fast the second time (nothing is reinstalled
# unless requirements.txt or constraints.txt changed).
#
#   scripts/setup.sh            venv + engine
#   scripts/setup.sh venv       venv only
#   scripts/setup.sh engine     engine only
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv"
what=${1:-all}

log() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -n "$@"; fi
}

# The controller needs Python >= 3.12 (current ansible-core). Take the first that fits:
# $BAI_PYTHON, python3.13/python3.12 on PATH, pyenv's 3.12/3.13, then python3.
find_python() {
  local c
  local -a candidates=()
  [ -n "${BAI_PYTHON:-}" ] && candidates+=("$BAI_PYTHON")
  candidates+=(python3.12 python3.13)
  if command -v pyenv >/dev/null 2>&1; then
    local root; root=$(pyenv root)
    for c in "$root"/versions/3.12.* "$root"/versions/3.13.*; do
      [ -x "$c/bin/python3" ] && candidates+=("$c/bin/python3")
    done
  fi
  candidates+=(python3)
  for c in "${candidates[@]}"; do
    command -v "$c" >/dev/null 2>&1 || continue
    if "$c" -c 'import sys, venv; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      command -v "$c"; return 0
    fi
  done
  return 1
}

setup_venv() {
  local stamp="$VENV/.bai-requirements.sha256" want
  want=$(cat "$ROOT/requirements.txt" "$ROOT/constraints.txt" | sha256sum | cut -d' ' -f1)
  if [ -x "$VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    log "venv up to date ($VENV)"; setup_cli; link_collection; return 0
  fi
  local py
  py=$(find_python) || die "no Python >= 3.12 found. Install python3.12 (or set BAI_PYTHON=/path/to/python3.12) and re-run."
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating venv with $py"
    "$py" -m venv "$VENV"
  fi
  log "installing pinned requirements (first run takes about a minute)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    -r "$ROOT/requirements.txt" -c "$ROOT/constraints.txt"
  echo "$want" > "$stamp"
  log "venv ready: $("$VENV/bin/ansible" --version | head -1)"
  setup_cli
  link_collection
}

# The bai-cluster CLI (bai_cli/, editable, no dependencies pulled): installed again only
# when pyproject.toml changes or the command is missing.
setup_cli() {
  local stamp="$VENV/.bai-cli.sha256" want
  want=$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)
  if [ -x "$VENV/bin/bai-cluster" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then return 0; fi
  log "installing the bai-cluster CLI"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e "$ROOT"
  echo "$want" > "$stamp"
}

# The checkout is the collection bai.cluster (galaxy.yml): link it into the venv's
# site-packages the way pip-installed collections live there, so Ansible, pytest, mypy and
# the CLI all import ansible_collections.bai.cluster.* from this checkout with no path set.
link_collection() {
  local site link
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  link="$site/ansible_collections/bai/cluster"
  # ansible.cfg's collections_path names .cache/collections first: a copy of the
  # collection that Molecule or ansible-galaxy installed in ~/.ansible/collections would
  # otherwise shadow this checkout for ansible-playbook.
  local cfg_link="$ROOT/.cache/collections/ansible_collections/bai/cluster"
  if [ "$(readlink "$cfg_link" 2>/dev/null)" != "../../../.." ]; then
    mkdir -p "$(dirname "$cfg_link")"
    ln -sfn ../../../.. "$cfg_link"
  fi
  [ "$(readlink "$link" 2>/dev/null)" = "$ROOT" ] && return 0
  mkdir -p "$(dirname "$link")"
  ln -sfn "$ROOT" "$link"
  log "collection bai.cluster -> $ROOT"
}

engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

setup_engine() {
  if engine_answers; then log "docker engine answers"; return 0; fi
  if ! command -v dockerd >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || die "no Docker engine and no apt-get: install Docker yourself and re-run."
    log "installing the distribution's Docker engine (docker.io)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap shellcheck >/dev/null
  fi
  log "starting dockerd"
  if [ -d /run/systemd/system ]; then
    as_root systemctl start docker
  else
    # No systemd (containers, Firecracker VMs): run dockerd in the background ourselves.
    as_root bash -c 'nohup dockerd >/var/log/dockerd.log 2>&1 </dev/null &'
  fi
  local i
  for i in $(seq 1 60); do
    engine_answers && { log "docker engine answers after ${i}s"; return 0; }
    sleep 1
  done
  die "dockerd did not answer within 60s; see /var/log/dockerd.log"
}

setup_tools() {
  # Host tools: debootstrap (image builds) and shellcheck (ansible-test sanity's shell
  # check, which is skipped without it). Installed once.
  local -a missing=()
  command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
  command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
  [ "${#missing[@]}" -eq 0 ] && return 0
  command -v apt-get >/dev/null 2>&1 || die "${missing[*]} missing and no apt-get: install ${missing[*]}."
  log "installing ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
    || { as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; }
}

setup_data_root() {
  # inventories/local makes this machine its only agent: sessions mount data folders from
  # under its data root (bai_data_roots, default /srv/bai-data), which must exist. Made
  # once (root, 0755), as roles/nfs_client makes it on the agents of other inventories.
  local root=/srv/bai-data
  [ -d "$root" ] && return 0
  log "creating $root (the local agent's data root, inventories/local)"
  as_root mkdir -p -m 0755 "$root"
}

setup_isolation() {
  # inventories/local makes this machine an agent: its engine runs sessions only behind the
  # session isolation table (roles/session_isolation), as site.yml loads it on the agents.
  # The playbook runs when the table is missing or the role changed since it wrote its file.
  local file=/etc/bai-isolation/bai_isolation.nft
  # grep without -q reads all of nft's output: under pipefail, -q leaving early fails the pipe.
  if as_root nft -t list table inet bai_isolation 2>/dev/null | grep 'bai-cluster session isolation' >/dev/null \
    && [ -e "$file" ] && [ -z "$(find "$ROOT/roles/session_isolation" -newer "$file" -type f -print -quit)" ]; then
    return 0
  fi
  log "loading the session isolation table (playbooks/session_isolation.yml on inventories/local)"
  ANSIBLE_CONFIG="$ROOT/ansible.cfg" "$VENV/bin/ansible-playbook" -i "$ROOT/inventories/local" \
    "$ROOT/playbooks/session_isolation.yml" >/tmp/bai-setup-isolation.log 2>&1 \
    || die "playbooks/session_isolation.yml failed; see /tmp/bai-setup-isolation.log"
  as_root touch "$file"  # rewritten only when its rules change: mark this role's version seen
}

case "$what" in
  all) setup_venv; setup_engine; setup_tools; setup_data_root; setup_isolation ;;
  venv) setup_venv ;;
  engine) setup_engine; setup_tools; setup_data_root ;;
  *) die "usage: $0 [all|venv|engine]" ;;
esac
