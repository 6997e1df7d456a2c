"""A reproducibility check anyone can run: reload a checkpoint, replay the next steps, compare.

    rlnb verify runs/x --from-step 2 --steps 2        # exit 0 "bit-exact", 1 on a difference
    report = verify_run("runs/x"); report.to_frame()  # the same from a notebook

What is compared, step by step, against what the run logged: every metric of ``metrics.jsonl``
(timings excepted: wall-clock), the rollouts' token ids, rewards and advantages (when the run
logged rollouts), and at the end the weights (the policy's, and the loop's other trained modules:
PPO's critic), against the checkpoint of the last replayed step when the run saved one.

Implementation choices:
1) The replay builds the trainer from the run's own ``config.yaml`` (the loop it names), warms
   it up as the run did (the warm start is cached), and loads checkpoint K with its RNG states,
   exactly like ``rlnb train --resume``. Nothing is written to the run directory.
2) Metrics are compared bit for bit on the keys the log holds; validation keys the replay adds
   that the log lacks (the original run validated at its own last step only) are ignored.
   Validation samples on its own random state, so it never changes what training draws.
3) The first difference (step, key, logged value, replayed value) is reported; a replay that
   matches everywhere is "bit-exact".
4) A run trained on several processes is refused: each rank sampled from its own RNG states,
   and one process cannot replay them (resuming on as many ranks repeats its steps).
5) An async GRPO run is not bit-reproducible: its collector thread samples while the trainer
   trains, so which weights generated a group, the tokens, rewards, advantages, metrics and
   weights depend on the two threads' timing. What does not is the data order: the replay
   (with the checkpoint's replay buffer) must train every step on the prompts the run logged.
   That is what ``verify_run`` compares for an async run, and its report says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch


@dataclass
class VerifyReport:
    """The outcome of ``verify_run``: per-step rows and the first difference, if any."""

    run_dir: Path
    from_step: int
    steps: list[int]
    rows: list[dict[str, Any]] = field(default_factory=list)
    first_difference: str | None = None
    weights_checked: bool = False

    compared: str = "metrics, rollouts"  # what the replay is checked on (choice 5: async)

    @property
    def exact(self) -> bool:
        return self.first_difference is None

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(self.rows)

    def summary(self) -> str:
        span = f"steps {self.steps[0]}..{self.steps[-1]}" if self.steps else "no steps"
        weights = " and the final weights" if self.weights_checked else ""
        if self.exact and self.compared == ASYNC_COMPARED:
            return (f"same data order: {span} replayed from checkpoint {self.from_step} trained "
                    f"on the logged prompts (an async run: {ASYNC_NOT_COMPARED})")
        if self.exact:
            return (f"bit-exact: {span} replayed from checkpoint {self.from_step} match the "
                    f"logged metrics, rollouts{weights}")
        return f"DIFFERS: {self.first_difference}"

    def __repr__(self) -> str:
        return self.summary()


ASYNC_COMPARED = "the prompts of every step"
ASYNC_NOT_COMPARED = ("tokens, rewards, advantages, metrics and weights depend on the collector "
                      "thread's timing and are not compared")


# the rollout columns compared, where the loop logs them (DPO: no advantages, its log-probs)
ROLLOUT_COLUMNS = ("input_ids", "reward", "advantages", "reference_logprobs", "logprobs")


def _number(x) -> float | None:
    """A logged value as a float, NaN as None (a dataset's pairs have no task reward)."""
    x = float(x)
    return None if math.isnan(x) else x


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def verify_run(run_dir: str | Path, from_step: int | None = None, steps: int | None = None, *,
               log=print, **user_data) -> VerifyReport:
    """Replay ``steps`` steps from the checkpoint at ``from_step`` (default: the earliest
    checkpoint; all logged steps after it) and compare them with what the run logged.
    ``user_data``: the ``reward_funcs``, ``train_dataset``, ... the run was handed in Python."""
    from rlnb.run.config.master_config import load_config
    from rlnb.run.store.checkpoint import (
        checkpoint_problem,
        checkpoint_weights,
        list_checkpoints,
        load_checkpoint,
        load_checkpoint_files,
        saved_rng_ranks,
        step_dir,
    )
    from rlnb.run.store.rollout_store import RolloutStore
    from rlnb.run.store.rundir import RunDir, read_metrics_file
    from rlnb.run.training.probes import attach_probes
    from rlnb.run.training.session import rollout_table
    from rlnb.run.training.warm_trainer import trainer_with_warm_start

    run_dir = Path(run_dir)
    if run_dir.is_file():
        raise ValueError(f"{run_dir} is a file, not a run directory")
    if not (run_dir / RunDir.CONFIG).is_file():
        raise ValueError(f"{run_dir} is not a run directory (no config.yaml)")
    config = load_config(run_dir / RunDir.CONFIG)
    root = config.checkpointing.resolve_dir(run_dir)
    ckpts = dict(list_checkpoints(root))
    if not ckpts:
        raise ValueError(f"{run_dir} has no checkpoint to replay from (in {root})")
    k = min(ckpts) if from_step is None else from_step
    if k not in ckpts:
        raise ValueError(f"--from-step {k}: no checkpoint at that step; checkpoints: "
                         f"{sorted(ckpts)}")
    problem = checkpoint_problem(ckpts[k])
    if problem:
        raise ValueError(f"checkpoint {ckpts[k].name} is corrupt ({problem})")
    ranks = saved_rng_ranks(ckpts[k])
    if ranks > 1:  # one process cannot replay what each of several ranks sampled
        raise ValueError(f"{run_dir} was trained on {ranks} processes and rlnb verify replays "
                         f"in one; resume it on {ranks} ranks (rlnb train --resume under "
                         "accelerate launch) to repeat its steps")
    logged = {r["step"]: r for r in read_metrics_file(run_dir / RunDir.METRICS)
              if "train/loss" in r or "train/reward" in r}
    available = sorted(s for s in logged if s > k)
    n = len(available) if steps is None else steps
    if n < 1 or available[:n] != list(range(k + 1, k + 1 + n)):
        raise ValueError(f"--steps {n}: the run logged steps {available[:n] or 'none'} after "
                         f"checkpoint {k}; nothing to compare beyond them")
    trainer, _ = trainer_with_warm_start(config, **user_data)
    attach_probes(trainer)  # what the run measured (its funnel): compared as the rest is
    state = load_checkpoint(ckpts[k], model=trainer.policy.model,
                            optimizer=trainer.policy.optimizer,
                            scheduler=trainer.policy.scheduler, extra=trainer.checkpoint_parts())
    trainer.load_state(state)
    names = list(trainer.checkpoint_files())  # the async loop's replay buffer
    if names:
        trainer.load_checkpoint_files(load_checkpoint_files(ckpts[k], names))
    report = VerifyReport(run_dir, k, list(range(k + 1, k + 1 + n)))
    rollouts = RolloutStore(run_dir / RunDir.ROLLOUTS)  # read only: chunked or per-step files
    with_rollouts = set(rollouts.steps())
    if hasattr(trainer, "collector"):  # choice 5
        report.compared = ASYNC_COMPARED
        log(f"an async GRPO run: comparing {ASYNC_COMPARED}; {ASYNC_NOT_COMPARED}")
        return _verify_data_order(trainer, report, rollouts, with_rollouts, n, log)
    for metrics in trainer.train(n):
        if not metrics.trained:
            continue
        s = metrics.step
        row = {"step": s, "metrics": "same", "rollouts": "not logged"}
        for key, value in logged[s].items():
            # timings and memory peaks measure the machine (and a replay's state: no
            # gradients before its first update), not the computation
            if key == "step" or key.startswith(("timing/", "memory/")):
                continue
            got = metrics.get(key)
            if got is not None and isinstance(got, float) and not math.isfinite(got):
                got = None  # metrics.jsonl stores NaN/inf as null
            if not _same(value, got):
                row["metrics"] = f"{key}: logged {value!r}, replayed {got!r}"
                report.first_difference = report.first_difference or f"step {s}, {row['metrics']}"
                break
        if s in with_rollouts and metrics.rollout is not None:
            saved = rollouts.read(s)
            table = rollout_table(metrics.rollout, metrics.advantages)
            row["rollouts"] = "same"
            for col in (c for c in ROLLOUT_COLUMNS if c in table):
                a = [list(map(_number, x)) if hasattr(x, "__len__") else _number(x)
                     for x in saved[col]]
                b = [list(map(_number, x)) if isinstance(x, list) else _number(x)
                     for x in table[col]]
                if a != b:
                    row["rollouts"] = f"{col} differs"
                    report.first_difference = (report.first_difference
                                               or f"step {s}, rollouts: {col} differs")
                    break
        report.rows.append(row)
        log(f"step {s}: metrics {row['metrics']}; rollouts {row['rollouts']}")
    last = k + n
    if last in ckpts and report.exact:
        from safetensors.torch import load_file

        modules = {"model": trainer.policy.model,  # and the loop's other parts (PPO: value)
                   **{name: part[0] for name, part in trainer.checkpoint_parts().items()}}
        report.weights_checked = True
        for folder, module in modules.items():
            saved = {}
            for f in sorted((step_dir(root, last) / folder).glob("*.safetensors")):
                saved.update(load_file(f))
            mine = checkpoint_weights(module)  # a LoRA policy's: its adapters
            wrong = [name for name, t in saved.items() if not torch.equal(t, mine[name].cpu())]
            if wrong:
                what = "weights" if folder == "model" else f"{folder} weights"
                report.first_difference = (f"step {last}, {what}: {len(wrong)} tensors differ "
                                           f"(e.g. {wrong[0]})")
                break
    return report


def _verify_data_order(trainer, report: VerifyReport, rollouts, with_rollouts: set[int], n: int,
                       log) -> VerifyReport:
    """An async run's replay: each step's prompts against the logged rollouts' (choice 5)."""
    for metrics in trainer.train(n):
        if not metrics.trained:
            continue
        s, row = metrics.step, {"step": metrics.step, "prompts": "not logged"}
        if s in with_rollouts:
            logged = list(rollouts.read(s, columns=["prompt"])["prompt"])
            row["prompts"] = "same" if logged == metrics.rollout.prompts else "differ"
            if row["prompts"] == "differ":
                report.first_difference = report.first_difference or f"step {s}, prompts differ"
        report.rows.append(row)
        log(f"step {s}: prompts {row['prompts']}")
    return report
