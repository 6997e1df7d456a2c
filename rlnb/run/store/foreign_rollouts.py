"""Other frameworks' rollouts in rlnb's views: NeMo-RL's, verl's and TRL's files read as steps of
rlnb's rollout table, turned into ``RolloutBatch`` es for the group and token views and the
counterfactual replay, or imported into a run directory for the funnel and ``rlnb doctor``.

    steps = ForeignRollouts("logs/exp_001")              # the format is found from the files
    batch = steps.batch(3, trainer)                       # step 3 on the trainer's tokenizer
    steps.funnel(3), steps.signal(3)                      # the funnel, the signal check
    advs = compare_estimators(trainer, batch)             # rlnb.engine.inspection.counterfactual
    TokenView(trainer, batch, advs["grpo"]).display()     # rlnb.widgets
    import_rollouts("logs/exp_001", "runs/nemo_import")   # rollouts/ + metrics.jsonl + config.yaml

The formats, read from each project's own writer (docs/guide.md#other-frameworks-rollouts):

- **NeMo-RL** (``<logger.log_dir>/train_data_step{N}.jsonl``, ``Logger.log_batched_dict_as_jsonl``
  at NVIDIA-NeMo/RL 7ea279a): one JSON line per sample, each value wrapped in a one-element list
  (the writer slices the batch one row at a time): ``content`` (the messages' texts),
  ``rewards``, ``input_lengths``, ``token_ids`` (right-padded), ``token_loss_mask`` (1 on
  generated tokens), ``sample_loss_mask``, ``advantages``, ``generation_logprobs``,
  ``prev_logprobs`` (per token, log-prob of token i at position i, rlnb's convention), ``idx``.
  Token ids and both log-probs: everything a replay needs but the reference log-probs.
- **verl** (``<trainer.rollout_data_dir>/{step}.jsonl``, ``RayPPOTrainer._dump_generations`` at
  volcengine/verl b178a3c): one line per sample with ``input`` and ``output`` (decoded without
  special tokens), ``score`` (the summed token scores), ``gts``, ``step`` and the reward
  function's extra keys. No token ids, log-probs, advantages or masks.
- **TRL** (``<output_dir>/completions/completions_{step:05d}.parquet``, written by
  ``GRPOTrainer.log`` when ``log_completions=True``, TRL >= 0.28): ``step``, ``prompt``,
  ``completion``, one column per reward function (unweighted; NaN where it returned None) and
  ``advantage``. No token ids or log-probs. ``trainer_state.json`` holds step aggregates only.

Implementation choices:
1) None of the three writes a group id. Rows are grouped by their prompt (NeMo-RL: the prompt's
   token ids, the key NeMo-RL's own baseline groups by; verl and TRL: the prompt text), numbered
   in order of first appearance. verl reorders rows (``balance_batch``), so its groups are
   rebuilt the same way, not from positions.
2) Text-only formats are tokenized with the trainer's tokenizer, prompt and response apart
   (approximately the ids they were sampled with: their prompts were decoded without special
   tokens). Their log-probs are not in the files: ``batch`` computes them under the trainer's
   policy (so π_gen = π_old = that policy, and the ratio is 1 at the replayed point) and says so
   in ``ForeignRollouts.missing``.
3) Rewards: NeMo-RL's ``rewards`` (after its scaling and shaping); verl's ``score``; TRL's reward
   columns summed (TRL's ``reward_weights`` are not in the file; each column is also kept as a
   reward component). A NaN reward (TRL's None) counts 0, as TRL sums it.
4) ``truncated`` and ``correct`` are not in any of the files: they read as False.
5) Bad input (a folder with none of the three layouts, a line that is not JSON, a NeMo-RL row
   without ``token_ids``, token ids outside the trainer's vocabulary) is one ValueError line
   naming the file (and line) and what was expected.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import torch

FORMATS = ("nemo-rl", "verl", "trl")
_NEMO = re.compile(r"train_data_step(\d+)\.jsonl")
_VERL = re.compile(r"(\d+)\.jsonl")
_TRL = re.compile(r"completions_(\d+)\.parquet")
_MISSING = {
    "nemo-rl": ["reference log-probs", "truncation", "correctness"],
    "verl": ["token ids (re-tokenized from text)", "log-probs (recomputed under the trainer's "
             "policy)", "advantages", "truncation", "correctness"],
    "trl": ["token ids (re-tokenized from text)", "log-probs (recomputed under the trainer's "
            "policy)", "truncation", "correctness"],
}


def _files(folder: Path) -> tuple[str, dict[int, Path]]:
    """``(format, step -> file)`` of ``folder`` (or of its ``completions/`` for TRL)."""
    if not folder.is_dir():
        raise ValueError(f"{folder}: no such directory" if not folder.exists() else
                         f"{folder}: a file, not a folder of rollout files")
    for fmt, where, pattern in (("nemo-rl", folder, _NEMO), ("trl", folder / "completions", _TRL),
                                ("trl", folder, _TRL), ("verl", folder, _VERL)):
        if where.is_dir():
            found = {int(m.group(1)): p for p in where.iterdir()
                     if (m := pattern.fullmatch(p.name))}
            if found:
                return fmt, dict(sorted(found.items()))
    raise ValueError(f"{folder}: no rollout files found (expected NeMo-RL's "
                     "train_data_step<N>.jsonl, verl's <step>.jsonl, or TRL's "
                     "completions/completions_<step>.parquet)")


def foreign_format(folder: str | Path) -> str | None:
    """The format of the rollout files in ``folder`` (one of ``FORMATS``), None if it holds
    none of them (or is no folder)."""
    try:
        return _files(Path(folder))[0]
    except ValueError:
        return None


def _json_lines(path: Path) -> list[dict]:
    rows = []
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{n} is not valid JSON ({err.msg})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{n}: expected a JSON object per line, got "
                             f"{type(row).__name__}")
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: empty (no sample in the file)")
    return rows


def _one(value: Any) -> Any:
    """NeMo-RL's writer wraps each value of a row in a one-element list (choice: module text)."""
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def _groups(keys: list) -> list[int]:
    """Group ids by first appearance of each key (choice 1)."""
    seen: dict[Any, int] = {}
    return [seen.setdefault(k, len(seen)) for k in keys]


def _nemo_rows(path: Path) -> dict[str, list]:
    need = ("token_ids", "token_loss_mask", "input_lengths", "rewards")
    out: dict[str, list] = {k: [] for k in ("prompt", "response", "reward", "kept", "prompt_ids",
                                            "response_ids", "token_mask", "advantages",
                                            "generation_logprobs", "prev_logprobs")}
    for n, raw in enumerate(_json_lines(path), 1):
        row = {k: _one(v) for k, v in raw.items()}
        absent = [k for k in need if k not in row]
        if absent:
            raise ValueError(f"{path}:{n}: no {', '.join(absent)} (a NeMo-RL train_data line "
                             "holds token_ids, token_loss_mask, input_lengths and rewards)")
        length = int(row["input_lengths"])
        ids, mask = list(row["token_ids"])[:length], list(row["token_loss_mask"])[:length]
        if not any(mask):
            raise ValueError(f"{path}:{n}: token_loss_mask marks no generated token")
        start = mask.index(1)
        content = row.get("content") or []
        texts = [str(c) for c in content] if isinstance(content, list) else [str(content)]
        out["prompt"].append("".join(texts[:-1]) if len(texts) > 1 else "")
        out["response"].append(texts[-1] if texts else "")
        out["reward"].append(float(row["rewards"]))
        out["kept"].append(float(row.get("sample_loss_mask", 1.0)) > 0)
        out["prompt_ids"].append(ids[:start])
        out["response_ids"].append(ids[start:])
        out["token_mask"].append([float(m) for m in mask[start:]])
        for key in ("advantages", "generation_logprobs", "prev_logprobs"):
            values = row.get(key)
            out[key].append(None if values is None else [float(v) for v in
                                                         list(values)[:length][start:]])
    out["group"] = _groups([tuple(p) for p in out["prompt_ids"]])
    return out


def _verl_rows(path: Path) -> dict[str, list]:
    rows = _json_lines(path)
    for n, row in enumerate(rows, 1):
        if "input" not in row or "output" not in row or "score" not in row:
            raise ValueError(f"{path}:{n}: expected verl's input, output and score keys, got "
                             f"{sorted(row)[:6]}")
    known = {"input", "output", "gts", "score", "step", "reward", "request_id"}
    extra = [k for k in rows[0] if k not in known and isinstance(rows[0][k], (int, float))
             and not isinstance(rows[0][k], bool)]
    prompts = [str(r["input"]) for r in rows]
    return {"prompt": prompts, "response": [str(r["output"]) for r in rows],
            "reward": [float(r["score"]) for r in rows], "group": _groups(prompts),
            "components": {k: [float(r.get(k, 0.0)) for r in rows] for k in extra}}


def _trl_rows(path: Path) -> dict[str, list]:
    import pandas as pd

    try:
        frame = pd.read_parquet(path)
    except Exception as err:  # pyarrow's errors name no file
        raise ValueError(f"{path}: not a Parquet file ({str(err).splitlines()[0]})") from None
    if "prompt" not in frame or "completion" not in frame:
        raise ValueError(f"{path}: expected TRL's prompt and completion columns, got "
                         f"{list(frame.columns)[:6]}")
    fixed = {"step", "prompt", "completion", "advantage"}
    funcs = [c for c in frame.columns if c not in fixed and frame[c].dtype.kind == "f"]

    def num(v):
        return 0.0 if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)

    components = {c: [num(v) for v in frame[c]] for c in funcs}
    prompts = [str(p) for p in frame["prompt"]]
    out = {"prompt": prompts, "response": [str(c) for c in frame["completion"]],
           "reward": [sum(vals) for vals in zip(*components.values())] or [0.0] * len(frame),
           "group": _groups(prompts), "components": components}
    if "advantage" in frame:
        out["sequence_advantage"] = [num(v) for v in frame["advantage"]]
    return out


class ForeignRollouts:
    """The rollout files another framework wrote in ``folder`` (module docstring)."""

    def __init__(self, folder: str | Path, fmt: str | None = None):
        self.folder = Path(folder)
        found, self.files = _files(self.folder)
        if fmt is not None and fmt not in FORMATS:
            raise ValueError(f"format {fmt!r}: one of {', '.join(FORMATS)}")
        if fmt is not None and fmt != found:
            raise ValueError(f"{self.folder}: holds {found} rollout files, not {fmt}")
        self.format = found
        self.missing = _MISSING[found]

    def __repr__(self) -> str:
        steps = list(self.files)
        return (f"ForeignRollouts({str(self.folder)!r}, {self.format}: steps {steps[0]}-"
                f"{steps[-1]} ({len(steps)} files); not in the files: {', '.join(self.missing)})")

    def steps(self) -> list[int]:
        return list(self.files)

    def rows(self, step: int) -> dict[str, list]:
        """Step ``step``'s samples as columns (``prompt``, ``response``, ``reward``, ``group``,
        and what the format holds)."""
        if step not in self.files:
            raise ValueError(f"{self.folder}: no step {step} (steps {self.steps()[0]}-"
                             f"{self.steps()[-1]})")
        reader = {"nemo-rl": _nemo_rows, "verl": _verl_rows, "trl": _trl_rows}[self.format]
        return reader(self.files[step])

    def batch(self, step: int, trainer):
        """Step ``step`` as a ``RolloutBatch`` on ``trainer``'s tokenizer (and policy, for the
        log-probs a text-only format lacks: choice 2)."""
        from rlnb.engine.data.batches import RolloutBatch

        cols = self.rows(step)
        tok, policy = trainer.policy.tokenizer, trainer.policy
        if "prompt_ids" in cols:
            p_ids, r_ids = cols["prompt_ids"], cols["response_ids"]
        else:
            p_ids = [tok(p, add_special_tokens=False)["input_ids"] for p in cols["prompt"]]
            r_ids = [tok(r, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
                     for r in cols["response"]]
        B = len(p_ids)
        L, R = max(map(len, p_ids)), max(1, max(map(len, r_ids)))
        pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        ids = torch.full((B, L + R), pad, dtype=torch.long)
        attn = torch.zeros(B, L + R, dtype=torch.long)
        tmask = torch.zeros(B, L + R)
        for i, (p, r) in enumerate(zip(p_ids, r_ids)):  # prompts left-padded, responses right
            ids[i, L - len(p):L], ids[i, L:L + len(r)] = torch.tensor(p), torch.tensor(r)
            attn[i, L - len(p):L + len(r)] = 1
            mask = cols["token_mask"][i] if "token_mask" in cols else [1.0] * len(r)
            tmask[i, L:L + len(r)] = torch.tensor(mask)
        policy.check_tokens(ids, f"{self.files[step]}: token ids")

        def per_token(key):
            if key not in cols or any(v is None for v in cols[key]):
                return None
            out = torch.zeros(B, L + R)
            for i, values in enumerate(cols[key]):
                out[i, L:L + len(values)] = torch.tensor(values)
            return out

        gen, prev = per_token("generation_logprobs"), per_token("prev_logprobs")
        if gen is None or prev is None:  # choice 2
            computed = policy.logprobs(ids, attn) * tmask
            gen = computed if gen is None else gen
            prev = computed if prev is None else prev
        rewards = torch.tensor(cols["reward"], dtype=torch.float32)
        batch = RolloutBatch(
            step=step, rows=[{"prompt": p} for p in cols["prompt"]], prompts=cols["prompt"],
            responses=cols["response"], group=torch.tensor(cols["group"]),
            prompt_ids=ids[:, :L], input_ids=ids, attention_mask=attn, token_mask=tmask,
            sample_mask=torch.tensor([1.0 if k else 0.0 for k in cols.get("kept", [True] * B)]),
            generation_logprobs=gen, prev_logprobs=prev, reference_logprobs=None,
            rewards=rewards,
            reward_components={k: torch.tensor(v) for k, v in cols.get("components", {}).items()},
            correct=torch.zeros(B, dtype=torch.bool), truncated=torch.zeros(B, dtype=torch.bool),
            response_lengths=tmask.sum(1).long(), weight_version=step)
        batch.metrics = {}
        batch.stored_advantages = per_token("advantages")  # what the framework trained with
        return batch

    def signal(self, step: int):
        """The signal check (``rlnb.engine.inspection.signal_check``) from step ``step``'s own
        groups: each prompt's rewards as its samples, the share of groups without signal for
        the G the run used and for G in {2, 4, 8, 16}."""
        from rlnb.engine.inspection.signal_check import report_from_samples

        cols = self.rows(step)
        by_group: dict[int, list[float]] = {}
        prompts: dict[int, str] = {}
        for g, p, r in zip(cols["group"], cols["prompt"], cols["reward"]):
            by_group.setdefault(g, []).append(r)
            prompts.setdefault(g, p)
        groups = sorted(by_group)
        G = max(len(v) for v in by_group.values())
        return report_from_samples([prompts[g] for g in groups], [by_group[g] for g in groups],
                                   G, step)

    def records(self) -> list[dict[str, float]]:
        """Each step's metric record as a run would log it: ``step``, ``train/reward`` (the
        mean reward) and the sample funnel; what ``import_rollouts`` writes and ``rlnb doctor``
        reads."""
        out = []
        for step in self.steps():
            rewards = self.rows(step)["reward"]
            out.append({"step": step, "train/reward": sum(rewards) / len(rewards),
                        **self.funnel(step)})
        return out

    def funnel(self, step: int) -> dict[str, float]:
        """Step ``step``'s sample funnel (``rlnb.engine.trainers.funnel``) from the file alone:
        generated, no signal, filtered and trained rows (truncation is not in the files)."""
        from rlnb.engine.trainers.funnel import sample_funnel

        cols = self.rows(step)
        B = len(cols["reward"])
        lengths = [len(m) for m in cols.get("token_mask", [])] or [1] * B
        width = max(lengths)
        token_mask = torch.zeros(B, width)
        advantages = torch.zeros(B, width)
        for i, n in enumerate(lengths):
            token_mask[i, :n] = torch.tensor(cols["token_mask"][i]) if "token_mask" in cols else 1
            if cols.get("advantages") and cols["advantages"][i] is not None:
                advantages[i, :n] = torch.tensor(cols["advantages"][i])
            elif "sequence_advantage" in cols:
                advantages[i, :n] = cols["sequence_advantage"][i]
        rewards = torch.tensor(cols["reward"], dtype=torch.float32)
        if not cols.get("advantages") and "sequence_advantage" not in cols:
            advantages = (rewards - _group_means(cols["group"], rewards))[:, None] * token_mask
        kept = torch.tensor([1.0 if k else 0.0 for k in cols.get("kept", [True] * B)])
        out = sample_funnel(torch.tensor(cols["group"]), rewards, torch.zeros(B, dtype=torch.bool),
                            token_mask, kept, advantages)
        del out["funnel/truncated"]  # choice 4: not in the files
        return out


def _group_means(group: list[int], rewards: torch.Tensor) -> torch.Tensor:
    g = torch.tensor(group)
    sums = torch.zeros(int(g.max()) + 1).index_add_(0, g, rewards)
    counts = torch.zeros(int(g.max()) + 1).index_add_(0, g, torch.ones_like(rewards))
    return (sums / counts)[g]


def import_rollouts(folder: str | Path, run_dir: str | Path, fmt: str | None = None) -> Path:
    """Write another framework's rollouts as an rlnb run directory: ``rollouts/`` (rlnb's table
    for each step, token columns where the format has them), ``metrics.jsonl`` (each step's
    funnel and mean reward) and ``config.yaml`` (``imported: {format, source}``). A directory
    that exists is refused: nothing is overwritten."""
    import yaml

    from rlnb.run.store.rollout_store import RolloutStore

    source = ForeignRollouts(folder, fmt)
    run_dir = Path(run_dir)
    if run_dir.exists():
        raise ValueError(f"{run_dir}: exists; import into a new folder (nothing was written)")
    tables = {}
    for step, metrics in zip(source.steps(), source.records()):  # all read first: a bad file
        cols = source.rows(step)                                  # writes nothing
        table = {"prompt": cols["prompt"], "response": cols["response"],
                 "reward": cols["reward"], "group": cols["group"],
                 "kept": cols.get("kept", [True] * len(cols["reward"]))}
        if "prompt_ids" in cols:
            table["input_ids"] = [p + r for p, r in zip(cols["prompt_ids"], cols["response_ids"])]
            table["token_mask"] = [[0.0] * len(p) + m for p, m in zip(cols["prompt_ids"],
                                                                     cols["token_mask"])]
            for key in ("advantages", "generation_logprobs", "prev_logprobs"):
                if all(v is not None for v in cols[key]):
                    table[key] = [[0.0] * len(p) + v for p, v in zip(cols["prompt_ids"],
                                                                     cols[key])]
        for name, values in cols.get("components", {}).items():
            table[f"reward/{name}"] = values
        tables[step] = (table, metrics)
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(
        {"imported": {"format": source.format, "source": str(source.folder)}}))
    store = RolloutStore(run_dir / "rollouts")
    with open(run_dir / "metrics.jsonl", "w") as f:
        for step, (table, metrics) in tables.items():
            store.write(step, table)
            f.write(json.dumps(metrics) + "\n")
    store.seal()
    return run_dir
