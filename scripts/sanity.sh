#!/usr/bin/env bash
# ansible-test sanity on this checkout, the way a published collection is checked.
#
# ansible-test must run from inside ansible_collections/<namespace>/<name>/, so the
# checkout's files (tracked, and new ones git does not ignore) are copied into such a
# tree under a temporary directory first.
#
# Each test runs in a virtual environment ansible-test makes with its own pinned
# requirements (cached in ~/.ansible/test/venv). To put pip into a new one, ansible-test
# downloads pip's get-pip.py from ci-files.testing.ansible.com, a host that is not
# reachable from every network; it uses a cached copy when there is one. When there is
# none, this script caches a stand-in that does the same job offline: pip from the
# Python's own ensurepip, then the packages ansible-test asks for, from the package
# index pip is configured with (PyPI).
#
#   scripts/sanity.sh [ansible-test sanity options, e.g. --test pylint]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv"
ns=$(sed -n 's/^namespace: *//p' "$ROOT/galaxy.yml")
name=$(sed -n 's/^name: *//p' "$ROOT/galaxy.yml")
work=$(mktemp -d /tmp/bai-sanity.XXXXXX)
trap 'rm -rf "$work"' EXIT
dest="$work/ansible_collections/$ns/$name"
mkdir -p "$dest"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
  | tar --null -T - -cf -) | tar -C "$dest" -xf -
pip_version=$("$VENV/bin/python" - <<'PY'
import re
from pathlib import Path
import ansible_test
text = (Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py").read_text()
print(re.search(r"pip='([0-9.]+)'", text).group(1))
PY
)
get_pip="$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"
if [ ! -s "$get_pip" ]; then
  mkdir -p "$(dirname "$get_pip")"
  cat > "$get_pip" <<'PY'
"""Offline stand-in for get-pip.py, cached by bai-cluster's scripts/sanity.sh.

ansible-test runs it in a new virtual environment with get-pip.py's arguments (pip
options, pip==VERSION and other packages, --no-setuptools, --no-wheel).
"""
import subprocess
import sys

# In a child: ensurepip.bootstrap() in this process would point PIP_CONFIG_FILE at
# /dev/null for the pip run below too (no index, proxy or certificate settings).
subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"])
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", "-q", *args]))
PY
fi
cd "$dest"
py=$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
PATH="$VENV/bin:$PATH" "$VENV/bin/ansible-test" sanity --local --python "$py" --color no "$@"
