#!/usr/bin/env bash
# Give an image's build context the wheels of its requirements.txt, downloaded here (on
# the controller), for images whose build cannot reach PyPI (no proxy, no index inside a
# build container): the Dockerfile then installs them with `pip install --no-index
# --find-links`. Run by tasks/build.yml for a build with `wheels: true`.
#
#   wheels.sh CONTEXT OUT CACHE PLATFORM PIP...
#
# CONTEXT   the image's folder: a Dockerfile and a requirements.txt that pins every package
#           (transitive ones included) and names its Python (`# python-version: 3.11`).
# OUT       the build context made from it: CONTEXT's files and wheels/.
# CACHE     the wheel cache: CACHE/<key>/, key = first 16 hex of the sha256 of the
#           requirements file and PLATFORM, so a changed file or platform downloads anew
#           and an unchanged one never again. A download goes to a temporary folder renamed
#           only when it is complete, so a half download is never reused.
# PLATFORM  the newest manylinux tag the image accepts (its glibc and CPU, e.g.
#           manylinux_2_36_x86_64 for Debian 12 on x86-64); older manylinux tags and pure
#           Python wheels are accepted too. Only wheels: a package with none fails here.
# PIP...    the pip to download with (e.g. /venv/bin/python -m pip).
#
# Exactly the pinned files are downloaded (--no-deps): pip here judges the dependencies'
# markers by its own Python, not the image's, so the file, not this download, says what
# the image needs; the build's `pip install --no-index`, run by the image's Python, fails
# on anything missing. pip reads no configuration file for the download, and none of the
# environment's constraints, find-links or extra indexes: they could put another build of
# the same version (a machine's local wheel) in place of the index's, or fail the
# download. The index is PyPI, or PIP_INDEX_URL from the environment (with PIP_CERT and
# the proxy variables) where a site has a mirror.
#
# Prints `changed` last when OUT's content changed, `unchanged` otherwise (an identical
# OUT is left as it is).
set -euo pipefail
[ "$#" -ge 5 ] || { echo "usage: $0 CONTEXT OUT CACHE PLATFORM PIP..." >&2; exit 2; }
ctx=$1 out=$2 cache=$3 platform=$4
shift 4
pip=("$@")
req=$ctx/requirements.txt

die() { printf 'wheels.sh: %s\n' "$*" >&2; exit 1; }
[ -f "$req" ] || die "$req is missing"
[ -f "$ctx/Dockerfile" ] || die "$ctx/Dockerfile is missing"
[ ! -e "$ctx/wheels" ] || die "$ctx/wheels exists: the wheels are put there in the copy ($out), not in $ctx"
bad=$(grep -vE '^\s*(#|$)' "$req" | grep -vE '^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+\s*(#.*)?$' || true)
[ -z "$bad" ] || die "$req: not name==version: ${bad//$'\n'/, }"
py=$(sed -n 's/^# *python-version: *\([0-9][0-9.]*\).*/\1/p' "$req" | head -n1)
[ -n "$py" ] || die "$req has no '# python-version: X.Y' line"
[[ "$platform" =~ ^manylinux_2_([0-9]+)_([a-z0-9_]+)$ ]] || die "platform $platform is not manylinux_2_N_ARCH"
glibc=${BASH_REMATCH[1]} arch=${BASH_REMATCH[2]}

# manylinux_2_N_ARCH down to manylinux_2_5, and the old names of 2_17, 2_12 and 2_5
# (pip expands only the old names by itself).
platforms=()
for ((n = glibc; n >= 5; n--)); do platforms+=(--platform "manylinux_2_${n}_${arch}"); done
[ "$glibc" -lt 17 ] || platforms+=(--platform "manylinux2014_${arch}")
case $arch in
  x86_64 | i686)
    [ "$glibc" -lt 12 ] || platforms+=(--platform "manylinux2010_${arch}")
    platforms+=(--platform "manylinux1_${arch}") ;;
esac

mkdir -p "$cache" "$(dirname "$out")"
# One run at a time per cache (two image builds at once, e.g. make test's stages).
if command -v flock >/dev/null; then
  exec 9>"$cache/.lock"
  flock 9
fi

key=$({ cat "$req"; printf '# platform: %s\n' "$platform"; } | sha256sum | cut -c1-16)
wheels=$cache/$key
tmp=""
cleanup() { if [ -n "$tmp" ]; then rm -rf "$tmp"; fi; }
trap cleanup EXIT

if [ ! -d "$wheels" ]; then
  tmp=$(mktemp -d "$cache/.download.XXXXXX")
  echo "downloading the wheels of $req for Python $py, $platform, into $wheels" >&2
  env -u PIP_CONSTRAINT -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_NO_INDEX \
    PIP_CONFIG_FILE=/dev/null "${pip[@]}" download --progress-bar off --disable-pip-version-check \
    --python-version "$py" --implementation cp "${platforms[@]}" --only-binary=:all: \
    --no-deps -r "$req" -d "$tmp" >&2 || die "pip download failed (nothing was cached)"
  others=$(find "$tmp" -maxdepth 1 -type f ! -name '*.whl' -printf '%f ')
  [ -z "$others" ] || die "not wheels: $others"
  chmod 755 "$tmp"
  mv -T "$tmp" "$wheels"
  tmp=""
fi

# The context, made anew beside OUT and swapped in only when its content differs: no
# file of an earlier context (an old wheel) stays behind. Wheels are hard links if possible.
tmp=$(mktemp -d "$out.XXXXXX")
chmod 755 "$tmp"
cp -pR "$ctx"/. "$tmp"/
mkdir "$tmp/wheels"
cp -pl "$wheels"/*.whl "$tmp/wheels/" 2>/dev/null || cp -p "$wheels"/*.whl "$tmp/wheels/"
digest() { (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum); }
if [ -d "$out" ] && [ "$(digest "$out")" = "$(digest "$tmp")" ]; then
  echo unchanged
else
  rm -rf "$out"
  mv -T "$tmp" "$out"
  tmp=""
  echo changed
fi
