"""Metric loggers: the run dir's ``metrics.jsonl`` always, TensorBoard / W&B / stdout on request.

A trainer calls ``for lg in loggers: lg.log(metrics, step)`` once per step and ``close()`` at the
end; it never imports a tracker itself.

Implementation choices:
1) ``metrics.jsonl`` in the run dir is the record every other view (notebook plots, sweep
   reports) reads, so ``make_loggers`` always puts a ``RunDirLogger`` first; the trainer must
   not also call ``RunDir.log_metrics`` for the same step.
2) TensorBoard and W&B are optional packages, imported only when enabled; a missing one raises
   ``ImportError`` saying which ``pip install`` fixes it, at construction, not mid-run.
3) Loggers skip strings and non-scalars. Trackers also skip NaN/inf (they would break
   TensorBoard's scalar charts); ``metrics.jsonl`` keeps them as ``null`` so a NaN loss shows.
   ``RunDir.log_metrics`` itself is strict and raises on a non-number.
4) W&B reads its mode (online/offline/disabled) and credentials from the environment
   (``WANDB_MODE``, ``WANDB_API_KEY``), as it always does; rlnb adds no switch of its own.
5) Files go under ``log_dir`` when set, else under the run dir: ``tensorboard/`` and ``wandb/``
   (NeMo-RL's layout).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field

from rlnb.config import Config, parse_config
from rlnb.run.store.rundir import RunDir


class LoggerConfig(Config):
    """``logger:`` section (NeMo-RL's key names)."""

    log_dir: str | None = Field(
        None, description="Folder for tracker files; None = the run dir.")
    tensorboard_enabled: bool = Field(
        False, description="Also log scalars to TensorBoard (needs `pip install tensorboard`).")
    wandb_enabled: bool = Field(
        False, description="Also log to Weights & Biases (needs `pip install wandb`; mode from "
                           "WANDB_MODE).")
    wandb: dict[str, Any] = Field(
        default_factory=lambda: {"project": "rlnb", "name": None},
        description="Keyword arguments of wandb.init (project, name, entity, tags, ...); "
                    "name None = the run dir's name.")
    log_rollouts: bool = Field(
        True, description="Write the steps' rollouts (token-level, one row per sequence) to "
                          "rollouts/, one Parquet file per 50 written steps.")
    rollouts_every: int = Field(
        1, ge=1, description="Keep the rollouts of step 1 and of every k-th step (step % k == 0); "
                             "1 = every step. Only with log_rollouts.")
    print_metrics: bool = Field(
        False, description="Print each step's metrics to stdout (for headless runs).")

    def keeps_rollouts(self, step: int) -> bool:
        """Whether ``step``'s rollouts are written: step 1 (the policy the run starts from) and
        every ``rollouts_every``-th step, when ``log_rollouts``."""
        return self.log_rollouts and (step == 1 or step % self.rollouts_every == 0)


def _number(value: Any) -> float | None:
    """``value`` as a float if it is a numeric scalar (tensor, numpy or Python), else None."""
    if hasattr(value, "ndim") and hasattr(value, "item"):  # tensor or numpy value
        if value.ndim != 0:
            return None
        value = value.item()
    if isinstance(value, (int, float)):  # bool is an int: kept as 0/1
        return float(value)
    return None


def scalar_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite numeric scalars of ``metrics`` as floats; everything else is dropped."""
    numbers = {k: _number(v) for k, v in metrics.items()}
    return {k: v for k, v in numbers.items() if v is not None and math.isfinite(v)}


class Logger:
    """Base: ``log(metrics, step)`` once per step, ``close()`` once at the end."""

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class RunDirLogger(Logger):
    """Appends to the run dir's ``metrics.jsonl`` (NaN/inf kept as null, non-numbers skipped)."""

    def __init__(self, run_dir: RunDir):
        self.run_dir = run_dir

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        # non-numeric values are skipped as by every logger; NaN/inf are kept (as null)
        numbers = {k: _number(v) for k, v in metrics.items()}
        self.run_dir.log_metrics(step, {k: v for k, v in numbers.items() if v is not None})


class PrintLogger(Logger):
    """One line per step on stdout."""

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        values = scalar_metrics(metrics)
        print(f"step {step}: " + "  ".join(f"{k}={v:.4g}" for k, v in values.items()), flush=True)


class TensorBoardLogger(Logger):
    """Scalars to ``log_dir`` via ``torch.utils.tensorboard.SummaryWriter``."""

    def __init__(self, log_dir: str | Path):
        try:
            import tensorboard  # noqa: F401  (torch's writer needs it; its own error is vaguer)
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:
            raise ImportError("logger.tensorboard_enabled=True needs the tensorboard package: "
                              "pip install tensorboard") from err
        self.log_dir = Path(log_dir)
        self.writer = SummaryWriter(log_dir=str(self.log_dir))

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        for key, value in scalar_metrics(metrics).items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()  # live curves in a TensorBoard tab while the notebook trains

    def close(self) -> None:
        self.writer.close()


class WandbLogger(Logger):
    """Scalars to Weights & Biases; ``wandb.init`` kwargs from ``LoggerConfig.wandb``."""

    def __init__(self, log_dir: str | Path, config: dict[str, Any] | None = None,
                 **init_kwargs: Any):
        try:
            import wandb
        except ImportError as err:
            raise ImportError("logger.wandb_enabled=True needs the wandb package: "
                              "pip install wandb") from err
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(dir=str(log_dir), config=config, **init_kwargs)

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        self.run.log(scalar_metrics(metrics), step=step)

    def close(self) -> None:
        self.run.finish()


def make_loggers(cfg: LoggerConfig | Mapping[str, Any] | None, run_dir: RunDir) -> list[Logger]:
    """The loggers ``cfg`` asks for, ``RunDirLogger`` first. Close them with ``close()``."""
    cfg = parse_config(LoggerConfig, cfg, where="logger")
    base = Path(cfg.log_dir) if cfg.log_dir else run_dir.path
    loggers: list[Logger] = [RunDirLogger(run_dir)]
    try:
        if cfg.print_metrics:
            loggers.append(PrintLogger())
        if cfg.tensorboard_enabled:
            loggers.append(TensorBoardLogger(base / "tensorboard"))
        if cfg.wandb_enabled:
            kwargs = dict(cfg.wandb)
            kwargs["name"] = kwargs.get("name") or run_dir.path.name
            loggers.append(WandbLogger(base / "wandb", config=run_dir.config, **kwargs))
    except BaseException:
        for lg in loggers:  # do not leak an open writer when a later one fails
            lg.close()
        raise
    return loggers
