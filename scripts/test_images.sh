#!/usr/bin/env bash
# Prepare the images the integration tests use, before they run (`make test-images`):
# the tests themselves download and build nothing.
#
# bai/session-hpc (tests/images/session-hpc: Open MPI, mpi4py, CPU PyTorch, FROM
# bai/session) installs its Python packages from wheels in its build context, pinned in
# tests/images/session-hpc/requirements.txt. pip inside a build container cannot reach
# PyPI through this machine's proxy, so the wheels are downloaded here, on the host, for
# the session image's Python (the requirements file's `# python-version:` line), into
# .cache/wheels/<first 16 hex of the requirements file's sha256>/: once per content of
# that file. A download goes to a temporary folder renamed only when pip succeeded, so a
# half download is never reused.
#
# The build context (.cache/session-hpc: the image's files and the wheels) is then built
# through playbooks/image_build.yml's image_build_extra. Its tag is a hash of the
# context's content and of its base image: when nothing changed, nothing is rebuilt.
#
#   scripts/test_images.sh                   download (if needed) and build
#   scripts/test_images.sh --print-cache-dir print the wheel cache folder, do nothing else
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv"
SRC="$ROOT/tests/images/session-hpc"
REQ="$SRC/requirements.txt"
CONTEXT="$ROOT/.cache/session-hpc"
IMAGE=bai/session-hpc

log() { printf '[test-images] %s\n' "$*" >&2; }
die() { printf '[test-images] ERROR: %s\n' "$*" >&2; exit 1; }

[ -f "$REQ" ] || die "$REQ is missing"
key=$(sha256sum "$REQ" | cut -c1-16)
WHEELS="$ROOT/.cache/wheels/$key"

case "${1:-}" in
  --print-cache-dir) printf '%s\n' "$WHEELS"; exit 0 ;;
  "") ;;
  *) die "unknown argument: $1 (usage: $0 [--print-cache-dir])" ;;
esac

[ -x "$VENV/bin/python" ] || die "no venv in $VENV: run 'make setup' first"
py_version=$(sed -n 's/^# *python-version: *\([0-9.]*\).*/\1/p' "$REQ" | head -n1)
[ -n "$py_version" ] || die "$REQ has no '# python-version: X.Y' line"

start=$SECONDS
tmp=""
cleanup() { if [ -n "$tmp" ]; then rm -rf "$tmp"; fi; }
trap cleanup EXIT

# --- the wheels, cached by the requirements file's content -------------------------------
if [ -d "$WHEELS" ]; then
  log "wheels: cache hit, $(find "$WHEELS" -name '*.whl' | wc -l) wheels in ${WHEELS#"$ROOT"/}"
else
  log "wheels: cache miss, downloading for Python $py_version into ${WHEELS#"$ROOT"/}"
  mkdir -p "$ROOT/.cache/wheels"
  tmp=$(mktemp -d "$ROOT/.cache/wheels/.download.XXXXXX")
  chmod 755 "$tmp"
  t0=$SECONDS
  "$VENV/bin/python" -m pip download --progress-bar off --disable-pip-version-check \
    --python-version "$py_version" --only-binary=:all: -r "$REQ" -d "$tmp" \
    || die "pip download failed (nothing was cached)"
  # Another run may have finished the same download meanwhile: keep the first one.
  mv -T "$tmp" "$WHEELS" 2>/dev/null || [ -d "$WHEELS" ] || die "cannot rename $tmp to $WHEELS"
  rm -rf "$tmp"
  tmp=""
  log "wheels: downloaded $(find "$WHEELS" -name '*.whl' | wc -l) wheels in $((SECONDS - t0)) s"
fi

# --- the build context: exactly the image's files and the wheels -------------------------
# Made anew in a temporary folder and swapped in, so no file of an earlier context (an old
# wheel) stays behind and changes the content hash. Wheels are hard links when possible.
tmp=$(mktemp -d "$ROOT/.cache/.session-hpc.XXXXXX")
chmod 755 "$tmp"
find "$SRC" -maxdepth 1 -type f -exec cp -p {} "$tmp"/ \;
mkdir "$tmp/wheels"
cp -pl "$WHEELS"/*.whl "$tmp/wheels/" 2>/dev/null || cp -p "$WHEELS"/*.whl "$tmp/wheels/"
rm -rf "$CONTEXT"
mv -T "$tmp" "$CONTEXT"
tmp=""

# --- the image -----------------------------------------------------------------------------
image_id() { docker image inspect --format '{{.Id}}' "$IMAGE:latest" 2>/dev/null || true; }
before=$(image_id)
log "building $IMAGE from ${CONTEXT#"$ROOT"/} (playbooks/image_build.yml; content-hash tag)"
t0=$SECONDS
extra=$(printf '{"image_build_extra": [{"name": "%s", "context": "%s", "base": "bai/session"}]}' \
  "$IMAGE" "$CONTEXT")
ANSIBLE_CONFIG=${ANSIBLE_CONFIG:-$ROOT/ansible.cfg} PATH="$VENV/bin:$PATH" \
  ansible-playbook "$ROOT/playbooks/image_build.yml" -e "$extra"
after=$(image_id)
[ -n "$after" ] || die "$IMAGE:latest is missing after the build"
if [ "$before" = "$after" ]; then
  log "image: $IMAGE:latest unchanged, nothing rebuilt (${after#sha256:}; $((SECONDS - t0)) s)"
else
  log "image: $IMAGE:latest built (${after#sha256:}; $((SECONDS - t0)) s)"
fi
log "done in $((SECONDS - start)) s"
