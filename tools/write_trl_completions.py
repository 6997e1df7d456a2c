"""Write the TRL completions files the foreign-rollouts test reads: TRL's own GRPOTrainer, run for
two steps on rlnb's tiny model with ``log_completions=True``, writes
``<output_dir>/completions/completions_<step>.parquet``; this copies them to ``OUT/completions/``.

    python tools/write_trl_completions.py tests/data/trl_grpo_run --trl-python .venv-trl/bin/python

The TRL side runs in TRL's own venv (docs/benchmarks.md: ``python -m venv .venv-trl``, then
``pip install torch==2.13.0 trl``); rlnb only saves the model it trains. Two reward functions:
``digits`` (the share of digits in the completion) and ``exact`` (1 for the right sum, None for a
prompt whose operands are equal: TRL writes NaN there). P = 4 prompts x G = 4 completions.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TRL_SIDE = r'''
import json, sys
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer
import trl

spec = json.loads(sys.argv[1])
torch.manual_seed(0)
tok = AutoTokenizer.from_pretrained(spec["model_dir"])
model = AutoModelForCausalLM.from_pretrained(spec["model_dir"], dtype=torch.float32)
prompts = [f"{a}+{b}=" for a, b in ((3, 4), (5, 5), (12, 30), (7, 7), (21, 2), (8, 1))]
data = Dataset.from_dict({"prompt": prompts, "solution": [str(eval(p[:-1])) for p in prompts]})

def digits(completions, **kwargs):
    return [sum(c.isdigit() for c in t) / max(len(t), 1) for t in completions]

def exact(prompts, completions, solution, **kwargs):
    out = []
    for p, t, s in zip(prompts, completions, solution):
        a, b = p.rstrip("=").split("+")
        out.append(None if a == b else float(t.strip() == s))
    return out

args = GRPOConfig(output_dir=spec["out"], use_cpu=True, bf16=False, fp16=False,
                  gradient_checkpointing=False, per_device_train_batch_size=16,
                  gradient_accumulation_steps=1, num_generations=4, max_completion_length=4,
                  max_steps=2, temperature=1.0, beta=0.0, use_vllm=False, seed=0,
                  report_to="none", save_strategy="no", logging_steps=1, eval_strategy="no",
                  log_completions=True, disable_tqdm=True, dataloader_num_workers=0)
GRPOTrainer(model=model, reward_funcs=[digits, exact], args=args, train_dataset=data,
            processing_class=tok).train()
print(json.dumps({"trl": trl.__version__}))
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the folder to write completions/ into (must not exist)")
    parser.add_argument("--trl-python", default=".venv-trl/bin/python")
    args = parser.parse_args()
    out = Path(args.out)
    if out.exists():
        sys.exit(f"{out}: exists (nothing written)")
    from rlnb.engine.models.tiny import build_char_tokenizer, build_tiny_llama, save_tiny

    with tempfile.TemporaryDirectory() as tmp:
        tok = build_char_tokenizer()
        save_tiny(build_tiny_llama(len(tok), hidden_size=32, num_hidden_layers=1), tok,
                  f"{tmp}/model")
        spec = {"model_dir": f"{tmp}/model", "out": f"{tmp}/trl"}
        proc = subprocess.run([args.trl_python, "-c", TRL_SIDE, json.dumps(spec)],
                              capture_output=True, text=True)
        if proc.returncode:
            sys.exit(proc.stderr[-3000:])
        version = json.loads(proc.stdout.strip().splitlines()[-1])["trl"]
        (out / "completions").mkdir(parents=True)
        for f in sorted(Path(f"{tmp}/trl/completions").glob("*.parquet")):
            shutil.copy(f, out / "completions" / f.name)
        (out / "WRITTEN_BY.txt").write_text(
            f"trl {version}: tools/write_trl_completions.py (GRPOTrainer, log_completions=True)\n")
    print(f"wrote {sorted(p.name for p in (out / 'completions').iterdir())} with trl {version}")


if __name__ == "__main__":
    main()
