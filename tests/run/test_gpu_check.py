"""benchmarks/gpu_check.py's rehearsal (``--cpu``): the script the GPU machine runs, on a 2-layer
model of the recipe's architecture, so it cannot rot between GPU visits. Every stage's record is
in its JSON; a stage that fails is recorded and the next still runs."""

import json
import subprocess
import sys

from paths import ROOT


def test_the_gpu_check_rehearses_on_the_cpu_and_writes_every_stage(tmp_path):
    out = tmp_path / "gpu_check.json"
    done = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--cpu", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    stages = json.loads(out.read_text())["stages"]
    assert stages["versions"]["ok"] and stages["versions"]["torch"].startswith("2.")
    grpo = stages["rlnb_grpo"]
    assert grpo["ok"], grpo.get("traceback")
    assert grpo["device"] == "cpu" and grpo["parameters"] > 0 and grpo["seconds_per_step"] > 0
    assert grpo["generation_tokens_per_s"] > 0 and grpo["training_tokens_per_s"] > 0
    assert grpo["mfu_training"] is None  # no card: no peak to divide by
    # the second step's measured peaks beside the plan, one pair per stage
    assert {k.split("/")[1] for k in grpo["memory"]} == {
        f"{s}_{kind}_gib" for s in ("generation", "logprobs", "update") for kind in ("plan", "peak")}
    # TRL lives in its own venv here: recorded as missing, not a crash
    assert stages["trl_grpo"]["ok"] is False and "trl" in stages["trl_grpo"]["error"]
