#!/usr/bin/env bash
# The wheels benchmarks/gpu_check.py installs on the GPU machine: what its image lacks for rlnb
# and for the TRL comparison (it has torch 2.11, transformers, accelerate, peft, triton, numpy,
# pandas, pyarrow, pyyaml, tqdm, safetensors, fsspec, xxhash; not pydantic, datasets, TRL,
# math-verify). Run here, with network to PyPI; the versions are the lock's (TRL: the one the
# comparisons use). The folder must stay under 64 MiB (what one device call carries).
#
#   bash tools/gpu_wheels.sh [FOLDER]          # default .whl (ignored by git)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.whl}
py=${PY:-3.12}  # PY=3.11 for a rehearsal on this machine
mkdir -p "$out"
lock() { grep -i -E "^${1//-/[-_]}==" requirements-lock.txt | head -1; }
names=(pydantic pydantic-core annotated-types typing-inspection datasets dill multiprocess
       math-verify latex2sympy2-extended antlr4-python3-runtime)
pins=()
for n in "${names[@]}"; do
    pin=$(lock "$n") || { echo "gpu_wheels: $n is not in requirements-lock.txt" >&2; exit 2; }
    pins+=("$pin")
done
pins+=("trl==1.16.0")
# the GPU machine's Python is 3.12 (x86-64, manylinux); pure-Python wheels match any
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$py" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$out" "${pins[@]}"
size=$(du -sm "$out" | cut -f1)
echo "gpu_wheels: ${#pins[@]} wheels in $out, ${size} MiB"
[ "$size" -le 64 ] || { echo "gpu_wheels: over the 64 MiB a device call carries" >&2; exit 2; }
