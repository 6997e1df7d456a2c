#!/usr/bin/env bash
# Everything CI tests, in the order it runs them, with the time of each part at the end:
#   1. the full suite on the lock: `pytest -q -n 2` (two workers; tests/conftest.py);
#   2. the vLLM tier: tests/run_vllm_tier.sh (vLLM's CPU build in its own venv, .venv-vllm),
#      beside the version tiers: tests/run_version_tiers.sh (the smoke tests at the newest and
#      at the lowest versions pyproject.toml allows), the three at once.
# The tiers' venvs are built in the background while the suite runs: their installs wait on the
# network and the disk far more than on the cores, and built one after the other they took
# about 8 of CI's minutes. Their logs go to $RLNB_CI_LOGS (default: a temporary folder) and are
# shown when a build fails.
#
#   bash tests/run_all.sh            # run from the repository's venv (README, "Quick start")
#   PYTEST_ARGS="-n 3" bash tests/run_all.sh
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${RLNB_CI_LOGS:-$(mktemp -d)}
mkdir -p "$logs"
rm -f "$logs"/*.done  # a reused log folder's: `finish` must wait for this run's parts
# The version tiers' venvs (3.2 GB) are throwaway unless TIER_DIR names where to keep them:
# removed at the end, so that runs on one machine do not pile them up (a CI run once failed
# midway on a full disk). The vLLM tier's .venv-vllm (3.7 GB) stays in the checkout, reused.
keep_tiers=${TIER_DIR:+yes}
export TIER_DIR=${TIER_DIR:-$logs/tiers}
free_gb() { df -P -k "$1" 2>/dev/null | awk 'NR==2 {printf "%.1f", $4 / 1048576}'; }
need_gb=10
for where in "$logs" "${TMPDIR:-/tmp}" .; do
    free=$(free_gb "$where")
    if [ -n "$free" ] && awk -v f="$free" -v n="$need_gb" 'BEGIN {exit !(f < n)}'; then
        printf 'WARNING: %s GB free under %s; the suite and the tiers'"'"' venvs need about %s GB\n' \
            "$free" "$where" "$need_gb" >&2
    fi
done
start=$SECONDS
parts=()
failed=0
part() {  # part NAME COMMAND...: run it in the foreground, timed
    local name=$1 t0=$SECONDS rc=0
    shift
    printf '\n=== %s\n' "$name"
    "$@" || rc=$?
    parts+=("$(printf '%6d s  %-6s load %-15s free %5s GB  %s' $((SECONDS - t0)) "rc=$rc" \
        "$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')" "$(free_gb "$logs")" "$name")")
    [ $rc = 0 ] || failed=1
    return 0
}
background() {  # background NAME LOG COMMAND...: start it; `finish NAME` waits and times it
    local name=$1 log=$2
    shift 2
    ( t0=$SECONDS; "$@" > "$log" 2>&1; rc=$?
      echo "$rc $((SECONDS - t0))" > "$logs/$name.done" ) &
}
finish() {  # finish NAME LOG [WHEN [quiet]]: wait for a background part and record it; its log
            # is shown on failure, unless quiet (the caller shows it whole)
    local name=$1 log=$2 when=${3:-(during the suite)} rc secs
    while [ ! -f "$logs/$name.done" ]; do sleep 2; done
    read -r rc secs < "$logs/$name.done"
    parts+=("$(printf '%6d s  %-6s %-20s %s' "$secs" "rc=$rc" "$when" "$name")")
    [ "$rc" = 0 ] || failed=1
    if [ "$rc" != 0 ] && [ "${4:-}" != quiet ]; then
        printf '\n=== %s failed; its log (%s) ends:\n' "$name" "$log"
        tail -40 "$log"
    fi
}

background "build the vLLM tier's venv" "$logs/vllm-build.log" \
    env PHASE=build bash tests/run_vllm_tier.sh
background "build the version tiers' venvs" "$logs/tiers-build.log" \
    env PHASE=build bash tests/run_version_tiers.sh

# shellcheck disable=SC2086  # PYTEST_ARGS is a list of flags
part "pytest -q ${PYTEST_ARGS:--n 2} (the suite on the lock)" pytest -q ${PYTEST_ARGS:--n 2}
finish "build the vLLM tier's venv" "$logs/vllm-build.log"
finish "build the version tiers' venvs" "$logs/tiers-build.log"
# the three tiers' tests side by side: each is a few minutes of one process, mostly
# single-threaded (imports, one step of each loop, a notebook), so two cores hold three
tiers=("the vLLM tier|bash tests/run_vllm_tier.sh"
       "the newest tier|env PHASE=test TIERS=newest bash tests/run_version_tiers.sh"
       "the lower tier|env PHASE=test TIERS=lower bash tests/run_version_tiers.sh")
tier_start=$SECONDS
for i in "${!tiers[@]}"; do
    # shellcheck disable=SC2086  # the command is a word list
    background "${tiers[$i]%%|*}" "$logs/tier$i.log" ${tiers[$i]#*|}
done
for i in "${!tiers[@]}"; do
    name=${tiers[$i]%%|*}
    finish "$name" "$logs/tier$i.log" "(beside the others)" quiet
    printf '\n=== %s\n' "$name"
    cat "$logs/tier$i.log"
done
parts+=("$(printf '%6d s  %-6s load %-15s %s' $((SECONDS - tier_start)) "" \
    "$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')" "the three tiers, side by side")")

[ -n "$keep_tiers" ] || rm -rf "$TIER_DIR"
printf '\n=== tests/run_all.sh: time per part (%s cores; the builds overlapped the suite)\n' "$(nproc)"
printf '%s\n' "${parts[@]}"
printf '%6d s  total\n' $((SECONDS - start))
exit $failed
