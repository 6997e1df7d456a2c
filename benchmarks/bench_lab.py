"""The lab's numbers: every figure docs/teaching.md and the exercises' solution cells quote,
measured by running the lab's own commands, recorded per CPU class, written into the text.

    python benchmarks/bench_lab.py measure [--seeds 0 1 2] [--capability avx2] [--only 01 opening]
    python benchmarks/bench_lab.py write        # the text's regions from the record
    python benchmarks/bench_lab.py check [--root DIR]  # exit 1 where text and record differ
    python benchmarks/bench_lab.py verify [--seeds 0]  # the lab's commands, against the record

``measure`` does what a lecturer does: ``rlnb teach build LAB``, then ``rlnb run
LAB/solution/NN_name.ipynb -p seed S`` for every exercise and seed, and the opening,
``rlnb run notebooks/01_grpo_step_by_step.ipynb -p num_steps 300 -p seed S``, all from one
empty warm-start cache; it reads each executed notebook's outputs (the live runs' tables, the
real-batch lines, the tables the cells display) and the opening's ``metrics.jsonl``, and stores
them with the wall time of each command in ``benchmarks/lab_numbers.json`` under the machine's
CPU class (torch's ``get_cpu_capability()``), with the cores, threads, load and versions.
``--capability avx2`` runs every command within AVX2 on a wider machine (``ATEN_CPU_CAPABILITY``,
``MKL_ENABLE_INSTRUCTIONS``, ``ONEDNN_MAX_CPU_ISA``: an AVX2 machine's numbers bit for bit,
``tests/support/record_warm_start.py``), recorded as that class.

``write`` renders every marked region (``<!-- lab-numbers: NAME -->`` ... ``<!-- /lab-numbers -->``,
in markdown or behind ``# `` in an exercise source) from the record (``lab_text.py``);
``check`` renders them again and fails on any difference, and on a percentage outside every
region (``tests/teach/test_lab_numbers.py`` runs it). ``verify`` is the end of a lecturer's dry
run: the same commands, compared value by value with this CPU class's record (times aside).

Every command runs with one thread (``OMP_NUM_THREADS=1``, as the guide's measurements): on a
machine doing other work, two OpenMP threads per process spin on each other and a run takes
many times as long.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path

from harness import ROOT, load_text

RECORD = ROOT / "benchmarks" / "lab_numbers.json"
EXERCISES = ["01_grpo_advantages", "02_clipped_surrogate", "03_loss_aggregation",
             "04_kl_estimators", "05_gae", "06_dpo_loss", "07_reward_function"]
OPENING_STEPS = 300
THREADS = 1


# --------------------------------------------------------------------------- running


def lab_env(capability: str | None, cache: Path) -> dict[str, str]:
    env = {**os.environ, "RLNB_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": str(THREADS), "MKL_NUM_THREADS": str(THREADS)}
    if capability:
        env["ATEN_CPU_CAPABILITY"] = capability
        if capability.lower() in ("avx2", "default"):  # the BLAS and oneDNN within AVX2 too
            env.update(MKL_ENABLE_INSTRUCTIONS="AVX2", ONEDNN_MAX_CPU_ISA="AVX2")
    return env


def rlnb(args: list[str], env: dict, cwd: Path, output: list | None = None) -> float:
    """Run ``rlnb ARGS`` as a lecturer would; its wall seconds (a failure ends the benchmark).
    Its stdout is appended to ``output`` when given."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "rlnb.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True)
    if proc.returncode:
        print(proc.stdout[-3000:] + proc.stderr[-3000:], file=sys.stderr)
        sys.exit(f"bench_lab: `rlnb {' '.join(args)}` failed (exit {proc.returncode})")
    if output is not None:
        output.append(proc.stdout)
    return time.perf_counter() - start


def preflight(env: dict, tmp: Path) -> dict:
    """``rlnb preflight`` from an empty cache, as a student runs it the day before: its wall
    time and what it estimated for the lab's live runs."""
    out: list[str] = []
    seconds = rlnb(["preflight"], {**env, "RLNB_CACHE_DIR": str(tmp / "preflight-cache")},
                   tmp, out)
    estimate = re.search(r"all live runs together: about ([^(]+?) \(", out[0])
    return {"seconds": seconds, "load": load_text(), "output": out[0],
            "estimate": estimate.group(1) if estimate else None}


def cpu_class(env: dict) -> str:
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True).stdout.strip()


def machine(env: dict, capability: str | None) -> dict:
    import platform

    import torch
    import transformers

    return {"cpu_class": cpu_class(env), "emulated": bool(capability),
            "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "threads": THREADS, "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d")}


# --------------------------------------------------------------------------- reading notebooks


class _Table(HTMLParser):
    """The rows of a pandas DataFrame's HTML: the header row, then [index, values...] rows."""

    def __init__(self):
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def frame(html: str) -> dict[str, dict[str, float]]:
    """A displayed DataFrame as {index: {column: value}} (columns without " (last N)")."""
    parser = _Table()
    parser.feed(html)
    header, *rows = [r for r in parser.rows if r]
    columns = [re.sub(r" \(last \d+\)$", "", c) for c in header[1:]]
    return {r[0]: {c: _number(v) for c, v in zip(columns, r[1:])} for r in rows}


def _number(text: str):
    try:
        return float(text.replace("−", "-"))
    except ValueError:
        return text


def cells(nb: dict):
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            yield "".join(cell["source"]), cell


def stdout(cell: dict) -> str:
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")


def html(cell: dict) -> str:
    for o in cell.get("outputs", []):
        if "text/html" in o.get("data", {}):
            return "".join(o["data"]["text/html"])
    raise ValueError("the cell displayed no table")


def cell_with(nb: dict, text: str) -> dict:
    found = [c for source, c in cells(nb) if text in source]
    if not found:
        raise ValueError(f"no cell holds {text!r}")
    return found[0]


def line_value(out: str, label: str) -> str:
    match = re.search(re.escape(label) + r"[^:\n]*: (.+)", out)
    if match is None:
        raise ValueError(f"no line {label!r} in {out[:300]!r}")
    return match.group(1).strip()


def duration(cell: dict) -> float:
    return cell["metadata"].get("papermill", {}).get("duration") or 0.0


def cell_seconds(nb: dict) -> dict:
    """How long the cells that compute took: the real batch (a warm-started trainer and one
    rollout), the live runs, and all the rest (the checks, the small tables, the imports)."""
    batch = sum(duration(c) for s, c in cells(nb) if "warm_trainer(" in s)
    live = sum(duration(c) for s, c in cells(nb) if "run_experiment(" in s)
    return {"batch": batch, "live": live,
            "rest": sum(duration(c) for _, c in cells(nb)) - batch - live}


def read_exercise(name: str, nb: dict) -> dict:
    """What one executed solution notebook shows: its live run's table, and its own extras."""
    got = {"live": frame(html(cell_with(nb, "run_experiment(")))}
    if name == "01_grpo_advantages":
        out = stdout(cell_with(nb, "largest difference from the trainer"))
        got["batch"] = {
            "trainer_difference": float(line_value(out, "largest difference from the trainer")),
            "recipe_difference": float(line_value(out, "largest difference from the embedded")),
            "right_per_group": ast.literal_eval(line_value(out, "rewards per group").split(
                " right")[0]),
            "zero_groups": int(line_value(out, "groups whose advantages are all 0").split()[0])}
    elif name == "03_loss_aggregation":
        out = stdout(cell_with(nb, "weight per token, by response length"))
        got["weights"] = {level: {int(k): float(v) for k, v in ast.literal_eval(
            line_value(out, level)).items()} for level in ("token level", "sequence level")}
    elif name == "04_kl_estimators":
        got["bias"] = frame(html(cell_with(nb, "k1 < 0 (share)")))
    elif name == "05_gae":
        got["lambdas"] = frame(html(cell_with(nb, 'f"λ = {lam}"')))
    elif name == "06_dpo_loss":
        out = stdout(cell_with(nb, "d loss/d logprob chosen"))
        got["gradient"] = [dict(zip(("margin", "loss", "chosen", "rejected"), map(float, m)))
                           for m in re.findall(r"margin +([\d.]+): loss ([\d.]+) +d loss/d "
                                               r"logprob chosen ([-+\d.]+) +rejected ([-+\d.]+)",
                                               out)]
    elif name == "07_reward_function":
        out = stdout(cell_with(nb, "rewards equal to the task's"))
        got["batch"] = {"equal": line_value(out, "rewards equal to the task's") == "True",
                        "accuracy": float(line_value(out, "accuracy of the samples")),
                        "signal": float(line_value(out, "fraction of groups with signal"))}
    return got


def read_opening(run_dir: Path) -> dict:
    """Notebook 01's run: held-out accuracy at each validation, the panels' means over the
    first and the last 10 training steps, and how long each part of the notebook took."""
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    accuracy = {r["step"]: r["validation/accuracy"] for r in records
                if "validation/accuracy" in r}
    steps = [r for r in records if "train/reward" in r]
    keys = {"reward": "train/reward", "kl": "train/kl_penalty",
            "entropy": "train/approx_entropy", "clip": "train/clip_fraction",
            "length": "train/mean_gen_tokens_per_sample", "signal": "train/groups_with_signal",
            "step_seconds": "timing/train/total_step_time"}

    def mean(rows, key):
        values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
        return sum(values) / len(values) if values else None

    panels = {name: {"first": mean(steps[:10], key), "last": mean(steps[-10:], key),
                     "min": min((r[key] for r in steps[10:] if key in r), default=None),
                     "max": max((r[key] for r in steps[10:] if key in r), default=None),
                     "first_step": steps[0].get(key)} for name, key in keys.items()}
    nb = json.loads((run_dir / "notebook.ipynb").read_text())
    durations = [(src, c["metadata"].get("papermill", {}).get("duration") or 0.0)
                 for src, c in cells(nb)]
    part = {"setup": "rlnb.TrainingRun(", "dashboard": "Dashboard(", "training": ".run("}
    parts = {k: sum(d for s, d in durations if v in s) for k, v in part.items()}
    parts["stages"] = sum(d for _, d in durations) - sum(parts.values())
    return {"accuracy": {str(k): v for k, v in sorted(accuracy.items())}, "panels": panels,
            "parts": parts}


# --------------------------------------------------------------------------- measuring


def measure_class(seeds: list[int], only: list[str], capability: str | None,
                  cache: Path | None = None, save=lambda out: None) -> dict:
    """Every command of the lab for each seed, from one empty cache (or ``cache``, as it is:
    a lecturer's, filled by ``rlnb preflight``); the class's record, handed to ``save`` after
    each command too (a long measurement keeps what it measured if a later command fails)."""
    with tempfile.TemporaryDirectory(prefix="rlnb-bench-lab-") as tmp:
        tmp = Path(tmp)
        env = lab_env(capability, cache or tmp / "cache")
        out = {"machine": machine(env, capability), "load_before": load_text(),
               "build_seconds": rlnb(["teach", "build", str(tmp / "lab")], env, tmp),
               "seeds": {}}
        for seed in seeds:
            got = out["seeds"].setdefault(str(seed), {})
            for name in EXERCISES:
                if only and name[:2] not in only:
                    continue
                run = tmp / "runs" / f"{name}-{seed}"
                seconds = rlnb(["run", str(tmp / "lab" / "solution" / f"{name}.ipynb"), "-p",
                                "seed", str(seed), "--run-dir", str(run)], env, tmp)
                nb = json.loads((run / "notebook.ipynb").read_text())
                got[name] = {**read_exercise(name, nb), "seconds": seconds,
                             "cells": cell_seconds(nb)}
                print(f"seed {seed} {name}: {seconds:.0f} s (load {load_text()})", flush=True)
                save(out)
            if not only or "opening" in only:
                run = tmp / "runs" / f"opening-{seed}"
                seconds = rlnb(["run", str(ROOT / "notebooks" / "01_grpo_step_by_step.ipynb"),
                                "-p", "num_steps", str(OPENING_STEPS), "-p", "seed", str(seed),
                                "--run-dir", str(run)], env, tmp)
                got["opening"] = {**read_opening(run), "seconds": seconds}
                print(f"seed {seed} opening: {seconds:.0f} s (load {load_text()})", flush=True)
                save(out)
        if "preflight" in only:
            out["preflight"] = preflight(env, tmp)
            print(f"preflight: {out['preflight']['seconds']:.0f} s (load {load_text()})")
        out["load_after"] = load_text()
    return out


def merge(record: dict, cls: str, new: dict) -> dict:
    """``new`` into the record's class ``cls``: a partial measurement keeps what it did not
    measure again."""
    old = record.setdefault("classes", {}).get(cls, {"seeds": {}})
    seeds = old.get("seeds", {})
    for seed, parts in new["seeds"].items():
        seeds.setdefault(seed, {}).update(parts)
    record["classes"][cls] = {**old, **{k: v for k, v in new.items() if k != "seeds"},
                              "seeds": seeds}
    return record


def read_record(path: Path = RECORD) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {"classes": {}}


# --------------------------------------------------------------------------- verifying


def differences(expected, got, where: str = "") -> list[str]:
    """Where two records of the same runs differ (times aside; both as JSON stores them, so a
    table's integer keys and a NaN compare as the record holds them)."""
    if where == "":
        expected, got = (json.loads(json.dumps(x)) for x in (expected, got))
    if isinstance(expected, float) and isinstance(got, float) and math.isnan(expected):
        return [] if math.isnan(got) else [f"{where}: recorded nan, now {got!r}"]
    if isinstance(expected, dict) and isinstance(got, dict):
        out = []
        for key in expected.keys() | got.keys():
            if key in ("seconds", "parts", "step_seconds", "cells"):
                continue
            if key not in got or key not in expected:
                side = "the record" if key in expected else "this run"
                out.append(f"{where}/{key}: only in {side}")
            else:
                out += differences(expected[key], got[key], f"{where or 'seed'}/{key}")
        return out
    return [] if expected == got else [f"{where}: recorded {expected!r}, now {got!r}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["measure", "write", "check", "verify"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--only", nargs="+", default=[], metavar="NN|opening|preflight",
                        help="measure only these exercises (01 ... 07), the opening, and/or "
                             "rlnb preflight (measured only when named)")
    parser.add_argument("--capability", choices=["avx2", "default"], default=None,
                        help="run every command within this CPU class (emulated)")
    parser.add_argument("--root", type=Path, default=ROOT, help="check this checkout's text")
    parser.add_argument("--cache", type=Path, default=None,
                        help="the warm-start cache to use as it is (default: an empty one)")
    parser.add_argument("--record", type=Path, default=RECORD,
                        help="the record to read and (measure) write")
    parser.add_argument("--times", type=Path, default=None,
                        help="verify: write each command's wall time (and its cells') here")
    args = parser.parse_args()
    from lab_text import check_text, write_text

    if args.action == "write":
        return write_text(read_record())
    if args.action == "check":
        return check_text(read_record(args.root / "benchmarks" / "lab_numbers.json"), args.root)
    def save(partial: dict) -> None:
        if args.action == "measure":
            cls = partial["machine"]["cpu_class"]
            args.record.write_text(json.dumps(merge(read_record(args.record), cls, partial),
                                              indent=1, ensure_ascii=False) + "\n")

    new = measure_class(args.seeds, args.only, args.capability, args.cache, save)
    if args.times:
        args.times.write_text(json.dumps(
            {part: {k: got[k] for k in ("seconds", "cells", "parts") if k in got}
             for parts in new["seeds"].values() for part, got in parts.items()}, indent=1))
    cls = new["machine"]["cpu_class"]
    if args.action == "measure":
        save(new)
        print(f"bench_lab: {args.record}: class {cls}, seeds {args.seeds}")
        return 0
    recorded = read_record(args.record).get("classes", {}).get(cls)
    if recorded is None:
        print(f"bench_lab: no record for CPU class {cls}: nothing to compare with")
        return 1
    found = [line for seed, parts in new["seeds"].items() for part, got in parts.items()
             for line in differences({part: recorded["seeds"].get(seed, {}).get(part)},
                                     {part: got}, "")]
    print(f"bench_lab verify ({cls}, seeds {args.seeds}): "
          + ("every number as recorded" if not found else f"{len(found)} differences"))
    for line in found:
        print(f"  {line}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
