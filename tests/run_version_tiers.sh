#!/usr/bin/env bash
# The version tiers: the smoke tests (`pytest -m smoke`: import rlnb and its widgets, one step of
# each loop, one notebook through papermill and the CLI, the sampler against model.generate) at
# the newest versions pip resolves from pyproject.toml today and at the lowest versions
# pyproject.toml allows. The full suite runs on requirements-lock.txt; a tier is for what breaks
# when a dependency moves (an import, a signature, a default), which one step of everything shows.
#
#   bash tests/run_version_tiers.sh              # both tiers: build, then test
#   TIERS=lower bash tests/run_version_tiers.sh
#   PHASE=build TIER_DIR=d bash tests/run_version_tiers.sh   # only build the venvs in d
#   PHASE=test TIER_DIR=d bash tests/run_version_tiers.sh    # test, building what d lacks
#
# newest: pip resolves rlnb[notebook,dev] afresh (only torch pinned, by constraints.txt). When
#         that resolution is exactly the lock's versions, the full suite has already run on it
#         and the tier says so instead of installing the same versions twice.
# lower:  every `name>=X` of pyproject.toml's dependencies and notebook/dev extras pinned to X
#         (tools/lower_bounds.py), torch at its pin.
# Each tier builds a throwaway venv under $TIER_DIR (default: a temporary folder); a venv counts
# as built only when its stamp (written after its last install step) names the pins it was
# built from, so tests/run_all.sh can build while the suite runs and test afterwards (a test
# phase builds whatever is not built yet).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TIERS=${TIERS:-newest lower}
PHASE=${PHASE:-all}
work=${TIER_DIR:-$(mktemp -d)}
mkdir -p "$work"
say() { printf '[version tiers] %s\n' "$*"; }
quiet() { grep -v "^WARNING: Location '.*' is ignored: it is neither a file nor a directory" || true; }
# pins, normalised; pip, setuptools and wheel left out (pip freeze, which made the lock, omits them)
lock_pins() {
    grep -v '^#' "$1" | tr 'A-Z_' 'a-z-' | grep -vE '^(pip|setuptools|wheel)==' | LC_ALL=C sort
}

build() {  # build NAME PINS-FILE PIP-ARGS...: the venv, unless its stamp says it is built
    local name=$1 pins=$2; shift 2
    local venv="$work/venv-$name" stamp="$work/$name.built" start=$SECONDS
    local want
    want=$(cat "$pins" pyproject.toml constraints.txt | sha256sum | cut -c1-16)
    if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        say "$name: $venv is built"
        return
    fi
    rm -f "$stamp"
    say "$name: building $venv"
    # --clear: a venv left in a reused TIER_DIR would keep packages the pins no longer name
    "$PYTHON" -m venv --clear "$venv"
    # the log keeps what -q would drop: on a resolution failure, the lines naming the conflict.
    # --no-compile: byte-compiling every installed module (torch's above all) took half the
    # install; the modules the tests import are compiled as they are imported
    if ! "$venv/bin/python" -m pip install --disable-pip-version-check --no-compile "$@" \
            > "$work/$name-pip.log" 2>&1; then
        quiet < "$work/$name-pip.log" | tail -25
        say "$name: pip install failed (full log: $work/$name-pip.log)"
        exit 1
    fi
    "$venv/bin/python" -m ipykernel install --sys-prefix --name python3 >/dev/null
    "$venv/bin/python" -m pip freeze --exclude-editable --disable-pip-version-check 2>&1 |
        quiet | sed -E 's/\+cpu$//' > "$work/$name-freeze.txt"
    echo "$want" > "$stamp"
    say "$name: installed in $((SECONDS - start)) s: $(grep -iE '^(torch|transformers|tokenizers|accelerate|papermill|ipykernel|pandas|numpy)==' "$work/$name-freeze.txt" | tr '\n' ' ')"
}

smoke() {  # smoke NAME: the smoke tests in the tier's venv
    local name=$1 start=$SECONDS
    say "$name: running the smoke tests"
    # -p no:xdist: a score of tests, where two workers' start-up would cost more than they save
    "$work/venv-$name/bin/python" -m pytest -q -p no:cacheprovider -p no:xdist -m smoke
    say "$name: smoke tests passed in $((SECONDS - start)) s"
}

newest_pins() {  # what a fresh install would resolve today, without installing it
    "$PYTHON" -m venv "$work/resolver"
    "$work/resolver/bin/python" -m pip install -q --disable-pip-version-check --dry-run \
        --ignore-installed --report "$work/newest.json" -c constraints.txt \
        -e ".[notebook,dev,ray]" 2>&1 | quiet
    "$work/resolver/bin/python" - "$work/newest.json" > "$work/newest-pins.txt" <<'PY'
import json, sys
for item in json.load(open(sys.argv[1]))["install"]:
    meta = item["metadata"]
    if meta["name"].lower() != "rlnb":
        print(f"{meta['name']}=={meta['version'].split('+')[0]}")
PY
}

for t in $TIERS; do
    case $t in
    newest)
        # resolved once per TIER_DIR: the test phase tests what the build phase built
        [ -f "$work/newest-pins.txt" ] || newest_pins
        if diff <(lock_pins "$work/newest-pins.txt") <(lock_pins requirements-lock.txt) \
                > "$work/newest.diff"; then
            say "newest: pip resolves exactly requirements-lock.txt today; the full suite ran on it"
            continue
        fi
        say "newest: differs from the lock in $(grep -c '^<' "$work/newest.diff") packages:"
        grep '^<' "$work/newest.diff" | head -20
        build newest "$work/newest-pins.txt" -c constraints.txt -c "$work/newest-pins.txt" \
            -e ".[notebook,dev]"
        [ "$PHASE" = build ] || smoke newest ;;
    lower)
        "$PYTHON" tools/lower_bounds.py > "$work/lower.txt"
        build lower "$work/lower.txt" -c constraints.txt -c "$work/lower.txt" -e ".[notebook,dev]"
        [ "$PHASE" = build ] || smoke lower ;;
    *) say "unknown tier $t (newest, lower)"; exit 2 ;;
    esac
done
