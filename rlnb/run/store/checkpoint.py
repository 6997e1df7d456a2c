"""Checkpoints of a training run: save, prune, find the latest, resume exactly.

    checkpoints/step_000010/
      model/               save_pretrained: config.json + *.safetensors (+ tokenizer files);
                           a LoRA policy: adapter_model.safetensors + adapter_config.json only
      optimizer.pt         {"optimizer": optimizer.state_dict(), "scheduler": ... or None}
      trainer_state.json   NeMo-RL's GRPOSaveState fields + "data_position"
      rng_state.pt         python random, numpy, torch CPU (and CUDA) generator states (rank 0)
      rng_state_rank<R>.pt the same for rank R > 0 of a run with several processes
      <part>/, <part>_optimizer.pt   any other trained module of the loop (PPO's critic)

Implementation choices:
1) The step directory is built under a hidden name and renamed into place (``atomic_dir``), so a
   ``step_*`` directory is always complete and ``latest_checkpoint`` never returns a half save.
2) Weights are loaded back in place with ``safetensors`` (not ``from_pretrained``), so the
   optimizer's references stay valid; every name and shape is checked before the first copy,
   and a tied weight is satisfied by any saved tensor sharing its storage.
3) ``trainer_state.json`` keeps NeMo-RL's GRPOSaveState keys plus ``data_position`` (where the
   data stream is) and any other key a trainer adds.
4) Every rank's RNG states are saved and restored, so ``rlnb verify`` and ``--resume`` repeat the
   run's samples; a rank with no file of its own (an older one-process checkpoint) restores
   rank 0's, with a warning.
5) ``.pt`` files load with ``weights_only=True`` (no pickle code execution).
5b) A policy with LoRA adapters saves the adapters alone (``rlnb.engine.models.lora``): its base
   is rebuilt from the config (the warm start) on resume, and adapters trained on another base
   (their file records its fingerprint) are refused.
6) ``keep_top_k`` keeps the k most recent checkpoints (what resuming needs; NeMo-RL ranks by a
   validation metric); the one just saved is never pruned.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import shutil
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import Field
from safetensors.torch import load_file, save_file

from rlnb.config import Config
from rlnb.engine.models.lora import (
    ADAPTER_CONFIG,
    adapter_state,
    base_fingerprint,
    has_adapters,
    save_adapters,
    saved_base_fingerprint,
)
from rlnb.run.store.atomic import atomic_dir

TRAINER_STATE_KEYS = ("consumed_samples", "current_step", "current_epoch", "total_steps",
                      "total_valid_tokens", "val_reward")
_STEP_DIR = re.compile(r"^step_(\d+)$")


class CheckpointingConfig(Config):
    """``checkpointing:`` section (NeMo-RL's key names)."""

    enabled: bool = Field(True, description="Save checkpoints during training.")
    checkpoint_dir: str | None = Field(
        None, description="Where step_* folders go; None = the run dir's checkpoints/.")
    save_period: int = Field(10, ge=1, description="Save every this many steps.")
    keep_top_k: int | None = Field(
        3, ge=1, description="Keep the last k checkpoints by step; None keeps all.")

    def resolve_dir(self, run_dir: str | Path) -> Path:
        """The checkpoint root for a run whose folder is ``run_dir``."""
        return Path(self.checkpoint_dir) if self.checkpoint_dir else Path(run_dir) / "checkpoints"

    def should_save(self, step: int) -> bool:
        """True on steps that are a multiple of ``save_period``."""
        return self.enabled and step % self.save_period == 0


def step_dir(ckpt_root: str | Path, step: int) -> Path:
    return Path(ckpt_root) / f"step_{int(step):06d}"


def list_checkpoints(ckpt_root: str | Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every complete checkpoint under ``ckpt_root``, ascending by step."""
    root = Path(ckpt_root)
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and p.is_dir() and (p / "trainer_state.json").is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def checkpoint_problem(path: str | Path) -> str | None:
    """What is wrong with the checkpoint at ``path`` (a missing or unreadable file, a truncated
    tensor file, a ``trainer_state.json`` without the save-state fields), or None if it reads.
    Every file is opened and parsed; the tensors are checked against the file sizes."""
    from safetensors import safe_open

    path = Path(path)
    try:
        state = json.loads((path / "trainer_state.json").read_text())
        _check_trainer_state(state)
        ints = ("current_step", "total_steps", "consumed_samples", "total_valid_tokens")
        if not all(isinstance(state[k], int) and not isinstance(state[k], bool) for k in ints):
            return f"trainer_state.json: {', '.join(ints)} must be integers"
        if not isinstance(state["data_position"].get("consumed_prompts"), int):
            return "trainer_state.json: data_position.consumed_prompts must be an integer"
    except FileNotFoundError:
        return "trainer_state.json is missing"
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return f"trainer_state.json is not JSON ({err})"
    except ValueError as err:
        return f"trainer_state.json: {err}"
    if not (path / "model").is_dir():
        return "the model/ folder is missing"
    tensor_files = sorted((path / "model").glob("*.safetensors")) + sorted(path.glob(
        "*/model.safetensors"))
    if not list((path / "model").glob("*.safetensors")):
        return "model/ holds no .safetensors file"
    for f in tensor_files:
        try:
            with safe_open(str(f), framework="pt") as handle:
                for key in handle.keys():
                    handle.get_slice(key)  # header offsets against the file's size
        except Exception as err:  # safetensors raises its own and OS errors
            return f"{f.relative_to(path)} is unreadable or truncated ({type(err).__name__}: {err})"
    parts = [f.parent.name for f in sorted(path.glob("*/model.safetensors"))
             if f.parent.name != "model"]  # PPO's value (model/ is the policy's)
    names = ["optimizer.pt", "rng_state.pt", *(f"{part}_optimizer.pt" for part in parts),
             *sorted(p.name for p in path.glob("rng_state_rank*.pt"))]
    for name in dict.fromkeys(names):
        try:
            torch.load(path / name, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            return f"{name} is missing"
        except Exception as err:  # torch raises many types for a damaged file
            return f"{name} is unreadable ({type(err).__name__}: {str(err).splitlines()[0]})"
    return None


def clean_partial_saves(ckpt_root: str | Path) -> list[Path]:
    """Remove what a save killed mid-write left behind (hidden ``.step_*.tmp`` / ``.trash-*``
    folders; the ``step_*`` folders themselves are always whole). Returns the removed paths."""
    root = Path(ckpt_root)
    if not root.is_dir():
        return []
    leftovers = [p for p in root.iterdir() if p.name.startswith(".step_")
                 and (p.name.endswith(".tmp") or ".trash-" in p.name)]
    for p in leftovers:
        shutil.rmtree(p, ignore_errors=True)
    return leftovers


def latest_checkpoint(ckpt_root: str | Path) -> Path | None:
    """The highest-step checkpoint under ``ckpt_root``, or None."""
    found = list_checkpoints(ckpt_root)
    return found[-1][1] if found else None


# --- RNG state


def capture_rng_state() -> dict[str, Any]:
    """States of python ``random``, numpy, torch CPU and (if present) every CUDA generator."""
    _, key, pos, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
    return {
        "python": random.getstate(),
        # plain ints so that torch.load(weights_only=True) accepts it
        "numpy": ("MT19937", [int(k) for k in key], int(pos), int(has_gauss),
                  float(cached_gaussian)),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def rng_state_file(rank: int) -> str:
    """The file holding ``rank``'s RNG states in a checkpoint (rank 0: the one-process name)."""
    return "rng_state.pt" if rank == 0 else f"rng_state_rank{rank}.pt"


def saved_rng_ranks(path: str | Path) -> int:
    """How many ranks' RNG states the checkpoint at ``path`` holds (1 for a one-process run or
    a checkpoint from before per-rank states)."""
    n = 1
    while (Path(path) / rng_state_file(n)).is_file():
        n += 1
    return n


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of ``capture_rng_state``."""
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))  # a JSON/pt round trip gives lists
    name, key, pos, has_gauss, cached_gaussian = state["numpy"]
    np.random.set_state((name, np.asarray(key, dtype=np.uint32), pos, has_gauss, cached_gaussian))
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if cuda is not None:
        if not torch.cuda.is_available():
            warnings.warn("checkpoint holds CUDA RNG states but CUDA is not available; "
                          "they are not restored", stacklevel=2)
        else:
            if len(cuda) != torch.cuda.device_count():
                warnings.warn(f"checkpoint holds {len(cuda)} CUDA RNG states, this machine has "
                              f"{torch.cuda.device_count()} devices; restoring the common ones",
                              stacklevel=2)
            for i, s in enumerate(cuda[: torch.cuda.device_count()]):
                torch.cuda.set_rng_state(s, device=i)


# --- save


def _check_trainer_state(trainer_state: dict[str, Any]) -> dict[str, Any]:
    missing = [k for k in (*TRAINER_STATE_KEYS, "data_position") if k not in trainer_state]
    if missing:
        raise ValueError(f"trainer_state lacks {missing}; it needs {list(TRAINER_STATE_KEYS)} "
                         "and 'data_position' (a JSON dict describing the data loader position)")
    if not isinstance(trainer_state["data_position"], dict):
        raise ValueError("trainer_state['data_position'] must be a dict, got "
                         f"{type(trainer_state['data_position']).__name__}")
    try:
        json.dumps(trainer_state, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ValueError(f"trainer_state must be finite, JSON-serialisable values: {err}") from None
    return trainer_state


@contextlib.contextmanager
def _quiet_progress():
    """transformers' own progress bars off for a while (restored as they were)."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def save_checkpoint(
    ckpt_root: str | Path,
    step: int,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any | None = None,
    tokenizer: Any | None = None,
    trainer_state: dict[str, Any],
    keep_last: int | None = None,
    extra: Mapping[str, tuple[torch.nn.Module, Any, Any]] | None = None,
    rng_states: list[dict[str, Any]] | None = None,
    files: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``ckpt_root/step_XXXXXX/`` atomically, prune to ``keep_last``; returns its path.

    ``model`` is a Hugging Face ``PreTrainedModel`` (unwrapped, not a DDP/accelerate wrapper).
    ``extra`` maps a name to another trained ``(module, optimizer, scheduler)`` of the loop
    (PPO's critic), saved as ``<name>/model.safetensors`` and ``<name>_optimizer.pt``.
    ``rng_states``: every rank's ``capture_rng_state()``, in rank order (several processes);
    None saves this process's. ``files`` maps a name to other state of the loop (plain data:
    tensors, lists, dicts; the async loop's replay buffer), saved as ``<name>.pt``.
    """
    _check_trainer_state(trainer_state)
    if keep_last is not None and keep_last < 1:
        raise ValueError(f"keep_last must be >= 1 or None, got {keep_last}")
    if not hasattr(model, "save_pretrained"):
        raise TypeError(f"model must be a Hugging Face PreTrainedModel (has save_pretrained); got "
                        f"{type(model).__name__} (unwrap accelerate/DDP wrappers first)")
    # first: nothing below may draw before the state is recorded
    rng = [capture_rng_state()] if rng_states is None else list(rng_states)
    if not rng:
        raise ValueError("rng_states must hold one state per rank, got an empty list")
    final = step_dir(ckpt_root, step)
    with atomic_dir(final) as tmp:
        # save_pretrained writes safetensors (the only format in transformers 5, the default
        # in 4.x), so no safe_serialization flag: transformers 5 silently ignores it
        if has_adapters(model):  # choice 5b
            save_adapters(model, tmp / "model")
        else:
            with _quiet_progress():  # a per-checkpoint "Writing model shards" bar is noise
                model.save_pretrained(tmp / "model")
        if not any((tmp / "model").glob("*.safetensors")):
            raise RuntimeError(f"{type(model).__name__}.save_pretrained wrote no .safetensors")
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp / "model")
        torch.save({"optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict() if scheduler is not None else None},
                   tmp / "optimizer.pt")
        for rank, state in enumerate(rng):
            torch.save(state, tmp / rng_state_file(rank))
        for name, (module, opt, sched) in (extra or {}).items():
            (tmp / name).mkdir()
            state = {}
            for k, v in module.state_dict().items():  # tied tensors: each storage once
                if all(v.data_ptr() != w.data_ptr() for w in state.values()):
                    state[k] = v.detach().cpu().contiguous()
            save_file(state, tmp / name / "model.safetensors")
            torch.save({"optimizer": opt.state_dict(),
                        "scheduler": sched.state_dict() if sched is not None else None},
                       tmp / f"{name}_optimizer.pt")
        for name, obj in (files or {}).items():
            torch.save(obj, tmp / f"{name}.pt")
        (tmp / "trainer_state.json").write_text(json.dumps(trainer_state, indent=2) + "\n")
    if keep_last is not None:
        older = [p for _, p in list_checkpoints(ckpt_root) if p != final]
        for p in older[: max(len(older) - (keep_last - 1), 0)]:
            shutil.rmtree(p)
    return final


# --- load


def load_checkpoint_files(path: str | Path, names: list[str]) -> dict[str, Any]:
    """The ``files`` a checkpoint was saved with (``save_checkpoint``), by name."""
    path, out = Path(path), {}
    for name in names:
        f = path / f"{name}.pt"
        if not f.is_file():
            raise ValueError(f"{path} holds no {f.name} (it was saved by another loop)")
        out[name] = torch.load(f, map_location="cpu", weights_only=True)
    return out


def _shape(t: torch.Tensor) -> list[int]:
    return list(t.shape)


def checkpoint_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The tensors a checkpoint holds for ``model``, under the file's names (sharing storage
    with the model): its state dict, or a LoRA policy's adapters (choice 5b)."""
    return dict(adapter_state(model)) if has_adapters(model) else model.state_dict()


def _check_adapter_base(model_dir: Path, model: torch.nn.Module) -> None:
    """A LoRA checkpoint fits a LoRA model whose base is the one its adapters trained on."""
    lora_file = (model_dir / ADAPTER_CONFIG).is_file()
    if lora_file != has_adapters(model):
        held, wants = (("LoRA adapters", "every weight") if lora_file
                       else ("every weight", "LoRA adapters"))
        raise ValueError(f"checkpoint {model_dir} holds {held}, but this run trains {wants} "
                         "(policy.lora.enabled)")
    if lora_file:
        saved, now = saved_base_fingerprint(model_dir), base_fingerprint(model)
        if saved is not None and saved != now:
            raise ValueError(
                f"checkpoint {model_dir}: its LoRA adapters were trained on other base weights "
                f"(fingerprint {saved}) than this run's (fingerprint {now}): the warm start "
                "rebuilt them differently (other code or package versions)")


def _load_weights(model_dir: Path, model: torch.nn.Module) -> None:
    """Copy the safetensors under ``model_dir`` into ``model``'s tensors, in place."""
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no .safetensors files in {model_dir}")
    saved: dict[str, torch.Tensor] = {}
    for f in files:  # sharded saves: model-00001-of-00002.safetensors, ...
        saved.update(load_file(f, device="cpu"))
    _check_adapter_base(model_dir, model)

    target = checkpoint_weights(model)
    # names sharing one storage (tied embeddings) form one group; one saved name fills them all
    groups: dict[tuple, list[str]] = {}
    for name, t in target.items():
        groups.setdefault((t.device, t.data_ptr(), tuple(t.shape)), []).append(name)
    source: dict[str, str] = {}
    missing = []
    for names in groups.values():
        present = [n for n in names if n in saved]
        if present:
            source.update({n: present[0] for n in names})
        else:
            missing += names
    unexpected = sorted(set(saved) - set(target))
    wrong_shape = [n for n, s in source.items() if saved[s].shape != target[n].shape]
    if missing or unexpected or wrong_shape:
        def show(names, fmt):
            return ", ".join(fmt(n) for n in names[:5]) + (" ..." if len(names) > 5 else "")

        problems = []
        if missing:
            problems.append(f"missing from the checkpoint ({len(missing)}): "
                            + show(missing, lambda n: f"{n} {_shape(target[n])}"))
        if unexpected:
            problems.append(f"not in the model ({len(unexpected)}): "
                            + show(unexpected, lambda n: f"{n} {_shape(saved[n])}"))
        if wrong_shape:
            problems.append(f"shape mismatch ({len(wrong_shape)}): " + show(
                wrong_shape,
                lambda n: f"{n} checkpoint {_shape(saved[source[n]])} vs model "
                          f"{_shape(target[n])}"))
        raise ValueError(f"checkpoint {model_dir} does not match {type(model).__name__}:\n  "
                         + "\n  ".join(problems))
    with torch.no_grad():  # state_dict tensors share storage with the parameters
        for name, t in target.items():
            t.copy_(saved[source[name]])


def load_checkpoint(
    path: str | Path,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    extra: Mapping[str, tuple[torch.nn.Module, Any, Any]] | None = None,
    rank: int = 0,
) -> dict[str, Any]:
    """Restore ``model`` (in place), optimizer, scheduler, the ``extra`` modules (see
    ``save_checkpoint``) and RNG states (``rank``'s own, choice 4) from a step directory.

    Returns the trainer state dict (GRPOSaveState keys + ``data_position``).
    """
    path = Path(path)
    if not (path / "trainer_state.json").is_file():
        raise FileNotFoundError(f"{path} is not a checkpoint (no trainer_state.json); "
                                f"latest under it: {latest_checkpoint(path)}")
    _load_weights(path / "model", model)
    if optimizer is not None or scheduler is not None:
        states = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True)
        if optimizer is not None:
            optimizer.load_state_dict(states["optimizer"])  # moves state to the params' device
        if scheduler is not None:
            if states["scheduler"] is None:
                raise ValueError(f"{path} was saved without a scheduler; pass scheduler=None")
            scheduler.load_state_dict(states["scheduler"])
    for name, (module, opt, sched) in (extra or {}).items():
        if not (path / name).is_dir():
            raise ValueError(f"{path} holds no {name!r} (it was saved by another loop)")
        _load_weights(path / name, module)
        states = torch.load(path / f"{name}_optimizer.pt", map_location="cpu", weights_only=True)
        opt.load_state_dict(states["optimizer"])
        if sched is not None and states["scheduler"] is not None:
            sched.load_state_dict(states["scheduler"])
    rng_file = path / rng_state_file(rank)
    if not rng_file.is_file():
        warnings.warn(f"{path} holds no RNG state for rank {rank} ({rng_file.name}; it was saved "
                      f"by {saved_rng_ranks(path)} process(es)): this rank restores rank 0's, so "
                      "its samples will differ from the uninterrupted run's", stacklevel=2)
        rng_file = path / rng_state_file(0)
    restore_rng_state(torch.load(rng_file, map_location="cpu", weights_only=True))
    return json.loads((path / "trainer_state.json").read_text())
