#!/usr/bin/env bash
# Regenerates requirements-lock.txt: the exact version of every package a fresh install of rlnb
# with all its extras resolves today. The README's install commands use it as a constraints file,
# so a fresh machine gets the versions the README's figures were measured with.
#
#   bash tools/update_lock.sh       # about 2 minutes; then rerun the tests and the figures
#
# torch stays at the constraints.txt pin (the CPU wheel); its local label (+cpu) is dropped, so
# the lock also admits the CUDA build of the same version on a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
quiet() { grep -v "^WARNING: Location '.*' is ignored: it is neither a file nor a directory" || true; }
"$PYTHON" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check \
    -c constraints.txt -e ".[notebook,dev,ray,envs]" 2>&1 | quiet
{
    echo "# The exact versions rlnb's tests and README figures were measured with: every package a"
    echo "# fresh install of rlnb[notebook,dev,ray,envs] resolved on $(date -u +%F) with"
    echo "# $("$tmp/venv/bin/python" --version) on $(uname -m) Linux. Made by tools/update_lock.sh;"
    echo "# use it as a constraints file: pip install -c requirements-lock.txt -e \".[notebook]\""
    "$tmp/venv/bin/python" -m pip freeze --exclude-editable --disable-pip-version-check 2>&1 |
        quiet | sed -E 's/^(torch==[0-9.]+)\+cpu$/\1/' | LC_ALL=C sort -f
} > requirements-lock.txt.tmp
mv requirements-lock.txt.tmp requirements-lock.txt
echo "wrote requirements-lock.txt ($(grep -vc '^#' requirements-lock.txt) packages)"
