"""LoRA adapters on the policy (``peft``): only the adapters train, and the base is the reference.

    W x  ->  W x + (α / r) · B A x        A [r, in], B [out, r], B = 0 at the start     (LoRA)

LoRA: https://arxiv.org/abs/2106.09685; QLoRA (a 4-bit base): https://arxiv.org/abs/2305.14314.
See docs/lora.md for the recipe, the memory it saves and how it meets the warm start.

Implementation choices:
1) Adapters are injected into the Hugging Face model in place (``peft.inject_adapter_in_model``),
   so ``policy.model`` stays the ``PreTrainedModel`` every other part drives (the sampler reads
   its ``forward`` signature, the critic takes its ``base_model``, vLLM its config). The base
   weights are frozen; the adapters are the only parameters with gradients and optimizer state.
2) ``B`` starts at zero, so the wrapped model computes exactly the base model's function. The
   adapters' random ``A`` is drawn on its own random state seeded by the loop's seed, so adding
   adapters leaves the run's sampling stream where it was: peft's Kaiming-uniform draw, or with
   ``lora_A_init: xavier`` a Xavier-normal one (NeMo-RL's default), layer by layer in module
   order.
3) The reference policy is the same module with its adapters switched off
   (``adapters_disabled``): no second copy of the weights, and it stays the warm-started base.
4) The warm start trains the base weights with the adapters switched off (``base_training``),
   the very computation of a run without adapters, so both share one cached warm start
   (``policy.lora`` is not part of its key). The adapters then train from that base.
5) A checkpoint holds the adapters only (``adapter_model.safetensors`` + ``adapter_config.json``,
   peft's layout: ``PeftModel.from_pretrained(base, folder)`` reads it), with a fingerprint of
   the base weights they were trained on; resuming rebuilds the base from the config (the warm
   start, cached) and refuses adapters whose base differs.
6) Merged weights ``W + (α / r) B A`` are computed into a new state dict under the base model's
   own names (``merged_state_dict``), leaving the training module untouched: what vLLM's refit
   loads and what ``save_merged`` writes for ``from_pretrained``.
7) QLoRA (``quantize: 4bit``) loads a hub or local model's linear layers in 4-bit NF4 through
   ``bitsandbytes`` when the installed build runs on the device, and is refused otherwise;
   merged weights unpack them.
"""

from __future__ import annotations

import contextlib
import copy
import fnmatch
import hashlib
import json
import sys
from difflib import get_close_matches
from pathlib import Path
from typing import Literal

import torch
from pydantic import Field, field_validator

from rlnb.config import Config, cross_field_rule

ADAPTER = "default"  # peft's name for the one adapter set
ADAPTER_FILE = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
BASE_FINGERPRINT = "rlnb_base_sha256"  # the metadata key of an adapter file (choice 5)
A_SEED_OFFSET = 4099  # the adapters' A draws on seed + this (choice 2)


class LoraConfig(Config):
    """``policy.lora``: LoRA adapters (NeMo-RL's ``policy.dtensor_cfg.lora_cfg`` key names)."""

    enabled: bool = Field(False, description="Train LoRA adapters instead of every weight.")
    dim: int = Field(8, ge=1, description="r: the adapters' rank (NeMo-RL's name).")
    alpha: float = Field(32.0, gt=0, description="Scale α: the update is (α / dim) · B A.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the adapters' input.")
    lora_A_init: Literal["kaiming", "xavier"] = Field(
        "kaiming", description="A's random start: kaiming (uniform, a=sqrt 5: peft's and "
        "NeMo-RL's non-xavier choice) or xavier (normal: NeMo-RL's default); B starts at 0.")
    target_modules: list[str] = Field(
        default_factory=list, description="Module names to adapt (e.g. [q_proj, v_proj], or "
        "wildcards over full names: '*.mlp.*'); needs match_all_linear: false.")
    exclude_modules: list[str] = Field(
        default_factory=list, description="Module names (or wildcards) never adapted.")
    match_all_linear: bool = Field(
        True, description="Adapt every linear layer except the output layer (NeMo-RL's default).")
    quantize: Literal["4bit"] | None = Field(
        None, description="QLoRA: load the base model's linear layers in 4-bit NF4 "
        "(bitsandbytes; a hub or local model, with sft.enabled: false).")

    @field_validator("target_modules", "exclude_modules")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        if any(not n or not n.strip() for n in names):
            raise ValueError("module names must be non-empty strings")
        return names

    @cross_field_rule
    def _one_way_to_target(self) -> LoraConfig:
        if self.target_modules and self.match_all_linear:
            raise ValueError(
                f"target_modules={self.target_modules} with match_all_linear=true: every linear "
                "layer would be adapted and the list ignored; set match_all_linear: false")
        if not self.target_modules and not self.match_all_linear and self.enabled:
            raise ValueError("no module to adapt: set target_modules, or match_all_linear: true")
        if self.quantize is not None and not self.enabled:
            raise ValueError(f"quantize={self.quantize!r} quantizes the base under LoRA "
                             "adapters: it needs enabled: true")
        return self

    @property
    def scale(self) -> float:
        """α / r, the factor on ``B A``."""
        return self.alpha / self.dim

    def qlora(self, dtype: torch.dtype) -> dict:
        """``from_pretrained`` keyword arguments for the base model: with ``quantize``, its
        linear layers in 4-bit NF4 computing in ``dtype`` (refused where bitsandbytes cannot
        run, choice 7); none otherwise."""
        if self.quantize is None:
            return {}
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        check_quantization(device)
        return quantization_kwargs(dtype)


# --------------------------------------------------------------------------- building
def tuner_layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """``(name, layer)`` of every peft adapter layer in ``model`` (none when peft was never
    imported: then no adapter can exist)."""
    if "peft" not in sys.modules:
        return []
    from peft.tuners.lora import LoraLayer

    return [(n, m) for n, m in model.named_modules() if isinstance(m, LoraLayer)]


def has_adapters(model: torch.nn.Module) -> bool:
    """Whether ``model`` carries LoRA adapters."""
    return bool(tuner_layers(model))


def _leaf_names(model: torch.nn.Module) -> dict[str, str]:
    """The last part of every submodule's name -> its class name (the names targets match)."""
    out: dict[str, str] = {}
    for name, module in model.named_modules():
        if name:
            out.setdefault(name.rsplit(".", 1)[-1], type(module).__name__)
    return out


def _first(model: torch.nn.Module, leaf: str) -> str:
    """The full name of the first submodule whose name ends in ``leaf``."""
    return next(n for n, _ in model.named_modules() if n.rsplit(".", 1)[-1] == leaf)


def is_pattern(name: str) -> bool:
    """A ``*`` / ``?`` wildcard over full module names (Automodel's, as NeMo-RL's YAMLs write
    ``'*out_proj*'``) rather than a module's own name."""
    return any(c in name for c in "*?[")


def expand(model: torch.nn.Module, names: list[str]) -> list[str]:
    """``names`` with each wildcard replaced by the full names of the modules it matches."""
    full = [n for n, _ in model.named_modules() if n]
    out: list[str] = []
    for name in names:
        out.extend(fnmatch.filter(full, name) if is_pattern(name) else [name])
    return out


def check_targets(model: torch.nn.Module, cfg: LoraConfig) -> None:
    """Every name in ``target_modules`` / ``exclude_modules`` must name a module of ``model``
    (a wildcard in ``target_modules`` must match one; in ``exclude_modules`` it may match
    none): a ValueError lists the close names and the model's linear layers otherwise."""
    leaves = _leaf_names(model)
    linear = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules()
                     if isinstance(m, torch.nn.Linear)})
    for key in ("target_modules", "exclude_modules"):
        for name in getattr(cfg, key):
            if is_pattern(name):
                if key == "target_modules" and not expand(model, [name]):
                    raise ValueError(f"policy.lora.{key}: the pattern {name!r} matches no module "
                                     f"of {type(model).__name__} (its linear layers: "
                                     f"{', '.join(linear) or 'none'})")
                continue
            if name not in leaves:
                close = get_close_matches(name, list(leaves), n=3)
                hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
                raise ValueError(
                    f"policy.lora.{key}: {type(model).__name__} has no module {name!r}{hint}; "
                    f"its linear layers: {', '.join(linear) or 'none'}")
    for name in expand(model, cfg.target_modules):  # peft adapts embeddings; rlnb's merge not
        full = name if "." in name else _first(model, name)  # (a pattern gave full names)
        if isinstance(model.get_submodule(full), torch.nn.Embedding):
            raise ValueError(f"policy.lora.target_modules: rlnb adapts linear layers; {name!r} "
                             f"is an embedding (its linear layers: {', '.join(linear)})")


def peft_config(cfg: LoraConfig, model: torch.nn.Module):
    """The ``peft.LoraConfig`` for ``policy.lora`` on ``model`` (GPT-2-style ``Conv1D`` layers
    store their weight transposed: peft's ``fan_in_fan_out``)."""
    from peft import LoraConfig as PeftLoraConfig

    transposed = any(type(m).__name__ == "Conv1D" for m in model.modules())
    return PeftLoraConfig(
        r=cfg.dim, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, bias="none",
        target_modules="all-linear" if cfg.match_all_linear else expand(model,
                                                                          cfg.target_modules),
        exclude_modules=expand(model, cfg.exclude_modules) or None, fan_in_fan_out=transposed,
        task_type="CAUSAL_LM")


def add_adapters(model: torch.nn.Module, cfg: LoraConfig, *, seed: int = 0) -> torch.nn.Module:
    """Inject LoRA adapters into ``model`` in place (choice 1) and freeze everything else, when
    ``cfg.enabled``; returns ``model``. A target the model lacks, or a module peft cannot adapt,
    is a ValueError naming ``policy.lora``."""
    if not cfg.enabled:
        return model
    try:
        from peft import inject_adapter_in_model
    except ImportError as err:  # a dependency of rlnb: only a broken install lacks it
        raise ValueError(f"policy.lora.enabled=true needs the peft package ({err}); "
                         "reinstall rlnb") from None
    check_targets(model, cfg)
    with torch.random.fork_rng(devices=[]):  # choice 2
        torch.manual_seed(seed + A_SEED_OFFSET)
        try:
            inject_adapter_in_model(peft_config(cfg, model), model, adapter_name=ADAPTER)
        except (ValueError, TypeError, RuntimeError, NotImplementedError) as err:
            first = (str(err).strip().splitlines() or [""])[0]
            raise ValueError(f"policy.lora: peft cannot add LoRA adapters to "
                             f"{type(model).__name__} ({type(err).__name__}: {first})") from None
        if cfg.lora_A_init == "xavier":
            for _, layer in tuner_layers(model):
                if ADAPTER in layer.lora_A:
                    torch.nn.init.xavier_normal_(layer.lora_A[ADAPTER].weight)
    layers = tuner_layers(model)
    if not layers:
        raise ValueError(f"policy.lora: no module of {type(model).__name__} was adapted "
                         "(match_all_linear found no linear layer besides the output layer)")
    for name, layer in layers:  # (check_targets refuses what it can before peft is called)
        if ADAPTER not in layer.lora_A:
            raise ValueError(f"policy.lora: rlnb adapts linear layers; {name} is a "
                             f"{type(layer.get_base_layer()).__name__}")
    adapters = {id(t) for t in adapter_state(model).values()}
    for p in model.parameters():
        p.requires_grad_(id(p) in adapters)
    return model


def trainable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The adapters' parameters (the only ones the optimizer holds), in module order."""
    return [p for p in model.parameters() if p.requires_grad]


@contextlib.contextmanager
def adapters_disabled(model: torch.nn.Module):
    """Within the block ``model`` computes its base model's function (the reference policy,
    choice 3); the adapters' trainability is restored after."""
    layers = [m for _, m in tuner_layers(model)]
    grads = [p.requires_grad for p in model.parameters()]
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield model
    finally:
        for layer in layers:
            layer.enable_adapters(True)
        for p, g in zip(model.parameters(), grads):
            p.requires_grad_(g)


@contextlib.contextmanager
def base_training(model: torch.nn.Module):
    """Adapters (if any) off and every base weight trainable (the warm start, choice 4); yields
    the base parameters in module order, the order a model without adapters lists them in.
    Afterwards each parameter trains as before, and the base holds no gradient."""
    adapters = {id(t) for t in adapter_state(model).values()}
    base = [p for p in model.parameters() if id(p) not in adapters]
    trains = [p.requires_grad for p in base]
    with adapters_disabled(model):
        for p in base:
            p.requires_grad_(True)
        try:
            yield base
        finally:
            for p, flag in zip(base, trains):
                # trap: the last step's gradients would stay, and the RL optimizer (which zeroes
                # only the adapters) would clip the adapters' gradients by their norm
                p.grad = None
                p.requires_grad_(flag)


# --------------------------------------------------------------------------- names and weights
def _plain_name(name: str) -> str:
    """A wrapped module's parameter name as the model without adapters names it."""
    return name.replace(".base_layer.", ".")


def adapter_state(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """The adapters' tensors under peft's file names (``base_model.model.<module>.lora_A.weight``,
    the adapter's name left out), sharing storage with the parameters."""
    out = {}
    for module_name, layer in tuner_layers(model):
        for kind in ("lora_A", "lora_B"):
            out[f"base_model.model.{module_name}.{kind}.weight"] = \
                getattr(layer, kind)[ADAPTER].weight
    return out


def base_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The base weights under the plain model's names (no adapter tensors); tied names share
    storage as in ``state_dict``."""
    adapters = {id(t) for t in adapter_state(model).values()}
    state = model.state_dict(keep_vars=True)
    return {_plain_name(k): v.detach() for k, v in state.items() if id(v) not in adapters}


def is_4bit(module: torch.nn.Module) -> bool:
    """Whether ``module``'s weight is packed 4-bit (bitsandbytes keeps its quantization state
    on the weight)."""
    return getattr(getattr(module, "weight", None), "quant_state", None) is not None


@torch.no_grad()
def merged_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``W + (α / r) B A`` for every adapted layer and the other weights as they are, under the
    plain model's names (choice 6); the model is not changed. The sum is taken in float32 and
    stored in the weight's dtype. A 4-bit base (QLoRA) is unpacked: each 4-bit layer gives its
    weight dequantized (in the dtype it was loaded in) and none of its quantization state."""
    state = base_state_dict(model)
    for name, module in model.named_modules():
        if is_4bit(module):
            import bitsandbytes.functional as bnb_functional

            plain = name.removesuffix(".base_layer").replace(".base_layer.", ".")
            for key in [k for k in state if k.startswith(plain + ".weight.")]:
                del state[key]  # absmax, quant_map, ...: the packed weight's state
            state[plain + ".weight"] = bnb_functional.dequantize_4bit(
                module.weight.data, module.weight.quant_state)
    for module_name, layer in tuner_layers(model):
        weight = state[f"{module_name}.weight"]
        delta = layer.get_delta_weight(ADAPTER)  # (α / r) B A, transposed for Conv1D layers
        state[f"{module_name}.weight"] = (weight.float() + delta.float()).to(weight.dtype)
    return state


@torch.no_grad()
def merged_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of ``module`` whose adapted layers are plain layers holding the merged weights
    (no adapters left; a copy of a module without adapters otherwise). PPO's critic starts from
    the policy's body this way."""
    out = copy.deepcopy(module)
    for name, layer in tuner_layers(out):
        base = layer.get_base_layer()
        if is_4bit(base):
            raise ValueError("policy.lora.quantize=4bit: a 4-bit layer cannot be copied into a "
                             "trainable module")
        merged = base.weight.float() + layer.get_delta_weight(ADAPTER).float()
        base.weight.copy_(merged.to(base.weight.dtype))
        parent, _, leaf = name.rpartition(".")
        setattr(out.get_submodule(parent) if parent else out, leaf, base)
    if hasattr(out, "peft_config"):
        del out.peft_config
    return out


def base_fingerprint(model: torch.nn.Module) -> str:
    """sha256 (16 hex digits) over the base weights' names and bytes (choice 5)."""
    h = hashlib.sha256()
    seen = set()
    for name, t in sorted(base_state_dict(model).items()):
        key = (t.device, t.data_ptr())
        if key in seen:  # a tied weight: hashed once, under its first name
            continue
        seen.add(key)
        h.update(name.encode() + b"\0" + str(t.dtype).encode() + b"\0")
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------- files
def lora_settings(model: torch.nn.Module) -> dict:
    """The adapters' peft config as a JSON-ready dict (what ``adapter_config.json`` holds)."""
    config = model.peft_config[ADAPTER].to_dict()
    config["base_model_name_or_path"] = getattr(model, "name_or_path", None) or None
    return json.loads(json.dumps(config, default=lambda v: sorted(v) if isinstance(v, set)
                                 else str(v)))


def save_adapters(model: torch.nn.Module, folder: str | Path) -> None:
    """``adapter_model.safetensors`` (with the base's fingerprint) and ``adapter_config.json``
    into ``folder`` (choice 5)."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in adapter_state(model).items()}
    save_file(tensors, folder / ADAPTER_FILE,
              metadata={"format": "pt", BASE_FINGERPRINT: base_fingerprint(model)})
    (folder / ADAPTER_CONFIG).write_text(json.dumps(lora_settings(model), indent=2) + "\n")


def saved_base_fingerprint(folder: str | Path) -> str | None:
    """The base fingerprint an adapter file was saved with (None: not recorded)."""
    from safetensors import safe_open

    with safe_open(str(Path(folder) / ADAPTER_FILE), framework="pt") as handle:
        return (handle.metadata() or {}).get(BASE_FINGERPRINT)


def save_merged(model, path: str | Path, tokenizer=None) -> Path:
    """A plain model folder for ``from_pretrained``: the merged weights (choice 6), the base
    model's config and the tokenizer. ``model`` is a policy (its tokenizer comes along) or a
    model (then pass ``tokenizer``); one without adapters is saved as it is.

        save_merged(trainer.policy, "merged/")   # AutoModelForCausalLM.from_pretrained("merged/")
    """
    if hasattr(model, "tokenizer") and hasattr(model, "model"):  # a Policy
        model, tokenizer = model.model, tokenizer or model.tokenizer
    path = Path(path)
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        if getattr(model, "hf_quantizer", None) is None:
            model.save_pretrained(path, state_dict=merged_state_dict(model))
        else:  # transformers saves a quantized model's own packed state: write the plain one
            _save_unquantized(model, path)
    finally:
        if was:
            hf_logging.enable_progress_bar()
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return path


def _save_unquantized(model: torch.nn.Module, path: Path) -> None:
    """A 4-bit (QLoRA) model's merged weights with its config less the quantization settings."""
    from safetensors.torch import save_file

    state, seen = {}, set()
    for name, t in merged_state_dict(model).items():  # tied names: one tensor, the first name
        if (t.device, t.data_ptr()) not in seen:
            seen.add((t.device, t.data_ptr()))
            state[name] = t.detach().cpu().contiguous()
    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = str(next(iter(state.values())).dtype).removeprefix("torch.")
    config.architectures = [type(model).__name__]
    path.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(path)
    model.generation_config.save_pretrained(path)
    save_file(state, path / "model.safetensors", metadata={"format": "pt"})


# --------------------------------------------------------------------------- QLoRA
def check_quantization(device: torch.device) -> None:
    """QLoRA needs a ``bitsandbytes`` whose 4-bit kernels run on ``device`` (choice 7): a
    ValueError says which of the two is missing. It quantizes and unpacks one small matrix."""
    try:
        import bitsandbytes.functional as bnb_functional
    except Exception as err:  # ImportError, or a build that fails on import without its GPU
        raise ValueError(
            f"policy.lora.quantize=4bit needs bitsandbytes ({type(err).__name__}: {err}); "
            "install it (pip install bitsandbytes), or set policy.lora.quantize: null") from None
    try:
        x = torch.randn(64, 64, device=device, dtype=torch.bfloat16)
        packed, state = bnb_functional.quantize_4bit(x, quant_type="nf4")
        bnb_functional.dequantize_4bit(packed, state)
    except Exception as err:
        first = (str(err).strip().splitlines() or [""])[0]
        raise ValueError(
            f"policy.lora.quantize=4bit: the installed bitsandbytes has no 4-bit kernels for "
            f"the {device.type} device ({type(err).__name__}: {first}); set "
            "policy.lora.quantize: null") from None


def quantization_kwargs(precision: torch.dtype) -> dict:
    """``from_pretrained`` keyword arguments that load the linear layers in 4-bit NF4 with
    ``precision`` compute (QLoRA's recipe: double quantization on)."""
    from transformers import BitsAndBytesConfig

    return {"quantization_config": BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=precision),
        "device_map": {"": torch.cuda.current_device() if torch.cuda.is_available() else "cpu"}}
