"""The warm start's on-disk cache: a run with the same model, task, SFT settings and seed, on the
same code and package versions, starts GRPO from the weights an earlier run saved, at once.

    $RLNB_CACHE_DIR/warm_start/<key>/model.safetensors + info.json   (default ~/.cache/rlnb)

Implementation choices:
1) The directory is named by ``rlnb.engine.trainers.warm_start.warm_start_key`` (a hash of every
   setting the result depends on); entries are written atomically (``atomic_dir``), so a crash
   never leaves a half-written entry under the final name.
2) ``info.json`` records what built the entry besides its settings (``build_stamp``: a hash of
   the code that computes the weights, the versions of the packages that compute the numbers).
   An entry built under another stamp is stale: one log line names what differs, and the warm
   start runs again and replaces it. An entry without a stamp was written before rlnb recorded
   one and is stale too. Naming the directory by the settings alone (not the stamp) is what lets
   the line say why, and keeps one entry per setting instead of one per code version.
3) An entry loads strictly: every tensor the model has, with its shape. A partial or corrupt
   entry (a truncated file, missing tensors) is reported and rebuilt, never half-loaded.
4) Tied embeddings share storage: each tensor is saved once and fills every name it backs.
5) A LoRA policy's entry is its base weights under the plain model's names
   (``lora.base_state_dict``): the warm start trains the base with the adapters off, so runs with
   and without adapters share entries.
6) A cache that cannot be written (a full disk, a read-only folder) is said in one line and the
   run goes on with the weights it just computed; nothing half-written is left (``atomic_dir``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch

from rlnb.engine.models.lora import base_state_dict
from rlnb.engine.trainers.warm_start import SFTConfig, build_stamp, warm_start, warm_start_key
from rlnb.run.store.atomic import atomic_dir


def cache_dir() -> Path:
    return Path(os.environ.get("RLNB_CACHE_DIR", Path.home() / ".cache" / "rlnb"))


def cached_warm_start(trainer, cfg: SFTConfig, *, progress: bool = False, log=print,
                      write: bool = True) -> dict:
    """The warm start of ``trainer.policy``: loaded from the cache when ``cfg.cache`` and an entry
    built by this code exists, else run (and saved when ``cfg.cache`` and ``write``). Returns its
    info dict with ``built_by`` (the stamp), ``cached`` (bool) and ``path``."""
    path = cache_dir() / "warm_start" / warm_start_key(trainer, cfg)
    stamp = build_stamp(trainer)
    if cfg.cache and (path / "model.safetensors").exists():
        try:
            info = _read_info(path)
            stale = stale_reason(info.get("built_by"), stamp)
            if stale is None:
                _load(path, trainer.policy)
                log(f"warm start: loaded from cache {path} ({info['steps']} SFT steps)")
                return {**info, "cached": True, "path": str(path)}
            # choice 2: left in place until the new entry replaces it (atomic_dir)
            log(f"warm start: the cached entry at {path} {stale}; rebuilding it")
        except (ValueError, OSError, KeyError) as err:
            log(f"warm start: the cache entry {path} is unusable ({err}); rebuilding it")
            shutil.rmtree(path, ignore_errors=True)
    info = {**warm_start(trainer, cfg, progress=progress, log=log), "built_by": stamp}
    if cfg.cache and write:
        try:
            _save(path, trainer.policy, info)
        except Exception as err:  # choice 6: a cache that cannot be written costs time, not the
            # run (safetensors reports a full disk as its own SafetensorError, not an OSError)
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            log(f"warm start: not cached at {path} ({reason}); the run goes on, and the next "
                "one with these settings runs the warm start again")
            return {**info, "cached": False, "path": None}
    return {**info, "cached": False, "path": str(path) if cfg.cache else None}


def stale_reason(saved, current: dict) -> str | None:
    """None when an entry's recorded stamp ``saved`` is ``current``, else the rest of a sentence
    saying what differs, e.g. ``was built by other code (rlnb code hash X, transformers 5.23.0)
    than this (rlnb code hash Y, transformers 5.24.0)``."""
    if saved == current:
        return None
    if not isinstance(saved, dict) or not isinstance(saved.get("packages"), dict):
        return "was written by an older rlnb that did not record the code that built it"
    then, now = [], []
    if saved.get("code") != current["code"]:
        then.append(f"rlnb code hash {saved.get('code')}")
        now.append(f"rlnb code hash {current['code']}")
    old_packages, new_packages = saved["packages"], current["packages"]
    for name in sorted(set(old_packages) | set(new_packages)):
        if old_packages.get(name) != new_packages.get(name):
            then.append(f"{name} {old_packages.get(name, 'none')}")
            now.append(f"{name} {new_packages.get(name, 'none')}")
    return f"was built by other code ({', '.join(then)}) than this ({', '.join(now)})"


def _read_info(path: Path) -> dict:
    try:
        info = json.loads((path / "info.json").read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"corrupt info.json: {err}") from None
    if not isinstance(info, dict):
        raise ValueError("corrupt info.json: not an object")
    return info


def _load(path: Path, policy) -> None:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        saved = load_file(path / "model.safetensors")
    except SafetensorError as err:
        raise ValueError(f"corrupt: {err}") from None
    target = base_state_dict(policy.model)
    by_storage: dict[int, str] = {}
    for name, t in target.items():  # tied names: any saved one of a storage fills them all
        if name in saved:
            by_storage[t.data_ptr()] = name
    missing = [n for n, t in target.items() if by_storage.get(t.data_ptr()) is None]
    if missing or set(saved) - set(target):
        raise ValueError(f"{len(missing)} of {len(target)} tensors missing "
                         f"(e.g. {missing[:2]}), {len(set(saved) - set(target))} unknown")
    state = {n: saved[by_storage[t.data_ptr()]] for n, t in target.items()}
    bad = [n for n, t in target.items() if state[n].shape != t.shape]
    if bad:
        raise ValueError(f"shape mismatch in {bad[:2]}")
    with torch.no_grad():  # in place: the optimizer's references stay valid
        for name, t in target.items():
            t.copy_(state[name])
    policy.sync_reference()


def _save(path: Path, policy, info: dict) -> None:
    from safetensors.torch import save_file

    with atomic_dir(path) as tmp:
        seen, unique = set(), {}
        for k, v in base_state_dict(policy.model).items():  # choice 4
            if v.data_ptr() not in seen:
                seen.add(v.data_ptr())
                unique[k] = v.detach().cpu().contiguous()
        save_file(unique, tmp / "model.safetensors")
        (tmp / "info.json").write_text(json.dumps(info))
