"""Generation throughput of the ``hf`` and ``vllm`` backends, and vLLM's refit time.

Both backends sample the same prompts with the same settings (``policy.generation``: temperature,
top-p, top-k, max_new_tokens) through rlnb's own backend classes, so the figures are what the
trainer sees, log-prob extraction included. Reported per backend: median seconds per batch over
the repeats (after one warm-up batch) and generated tokens per second (tokens under the response
mask); for vLLM also the engine start and the median ``refit`` time. The load average
(other processes sharing the cores skew CPU figures) and the device are printed with them.

Models, built locally (no hub):
    tiny   the embedded character-level Llama (hidden 128, 2 layers; about 0.3 M parameters)
    0.5b   a Llama with Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads / 2 KV heads,
           MLP 4864, vocabulary 151936; about 0.5 B parameters) and random weights, with a
           character-level tokenizer padded to that vocabulary (Llama, not Qwen2: a Qwen2
           config makes AutoTokenizer force the Qwen2 tokenizer on the folder)

Target on a GPU (H100, 0.5b): vLLM >= 5x HF tokens/s, refit under 1 s. On CPU there is no
target: at the tiny size HF generate wins (vLLM's value shows on real models and GPUs).

    python benchmarks/bench_generation.py                        # tiny, both backends
    python benchmarks/bench_generation.py --size 0.5b            # on a GPU machine
    python benchmarks/bench_generation.py --backends hf --size tiny

The vllm backend needs vLLM (on CPU: the venv of docs/vllm.md, e.g. .venv-vllm/bin/python, with
HF_HUB_OFFLINE=1); without it only hf runs.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import string
import time

import torch
from harness import load_text, machine_line

from rlnb.engine.models.generation import GenerationConfig, make_generation_backend
from rlnb.engine.models.tiny import SPECIAL_TOKENS, build_char_tokenizer, build_tiny_llama

SIZES = {
    # batch and response length defaults per size: (prompts, new tokens)
    "tiny": (64, 32),
    "0.5b": (64, 128),
}
QWEN25_05B_VOCAB = 151936


def padded_char_tokenizer(vocab_size: int):
    """The tiny model's character tokenizer, padded with filler tokens to ``vocab_size``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = [c for c in string.printable if c not in "\t\r\x0b\x0c"]
    tokens = SPECIAL_TOKENS + chars
    tokens += [f"<extra_{i}>" for i in range(vocab_size - len(tokens))]
    core = Tokenizer(models.WordLevel(vocab={t: i for i, t in enumerate(tokens)},
                                      unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>",
                                   bos_token="<s>", eos_token="</s>", padding_side="left")


def build_model(size: str, device: str):
    """(model, tokenizer) with random weights, on ``device`` (bf16 on GPU for 0.5b)."""
    if size == "tiny":
        tokenizer = build_char_tokenizer()
        model = build_tiny_llama(len(tokenizer))
    else:
        from transformers import LlamaConfig, LlamaForCausalLM

        tokenizer = padded_char_tokenizer(QWEN25_05B_VOCAB)
        config = LlamaConfig(
            vocab_size=QWEN25_05B_VOCAB, hidden_size=896, intermediate_size=4864,
            num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
            max_position_embeddings=4096, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
            tie_word_embeddings=True, pad_token_id=0, bos_token_id=2, eos_token_id=3,
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = LlamaForCausalLM(config)
    dtype = torch.bfloat16 if device == "cuda" and size != "tiny" else torch.float32
    return model.to(device=device, dtype=dtype).eval(), tokenizer


def make_prompts(n: int, seed: int = 0) -> list[str]:
    """``n`` arithmetic prompts like the addition task's, e.g. ``"What is 12+34? "``."""
    rng = random.Random(seed)
    return [f"What is {rng.randint(0, 99)}+{rng.randint(0, 99)}? " for _ in range(n)]


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_generation(backend, prompts, repeats: int, device: str) -> dict:
    backend.generate(prompts)  # warm-up: lazy initialisation, allocator, kernels
    seconds, tokens = [], []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        out = backend.generate(prompts)
        sync(device)
        seconds.append(time.perf_counter() - start)
        tokens.append(int(out.response_mask.sum()))
    median = statistics.median(seconds)
    return {"seconds": median, "tokens": statistics.median(tokens),
            "tokens_per_s": statistics.median(t / s for t, s in zip(tokens, seconds))}


def time_refit(backend, model, repeats: int, device: str) -> float:
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        backend.refit(model)
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name(0)
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        pass
    return f"CPU: {name}, {os.cpu_count()} cores"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--backends", default="hf,vllm", help="comma-separated: hf,vllm")
    parser.add_argument("--prompts", type=int, help="batch size (default per size)")
    parser.add_argument("--new-tokens", type=int, help="max_new_tokens (default per size)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--refits", type=int, default=5)
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    n_prompts, new_tokens = SIZES[args.size]
    n_prompts, new_tokens = args.prompts or n_prompts, args.new_tokens or new_tokens
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if "vllm" in backends:
        try:
            import vllm  # noqa: F401
        except ImportError:
            print("vllm is not installed here: running hf only (see docs/vllm.md)")
            backends.remove("vllm")

    model, tokenizer = build_model(args.size, device)
    prompts = make_prompts(n_prompts)
    settings = GenerationConfig(
        temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
        max_new_tokens=new_tokens,
    )
    # room for the longest prompt (BOS + text) and the response
    max_prompt = max(len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts) + 1
    params = sum(p.numel() for p in model.parameters())
    versions = f"torch {torch.__version__}"
    if "vllm" in backends:
        import transformers
        import vllm

        versions += f", vllm {vllm.__version__}, transformers {transformers.__version__}"
    print(f"device: {device_name(device)} | {versions}")
    print(f"model: {args.size} ({params / 1e6:.1f} M parameters, "
          f"{next(model.parameters()).dtype}) | {n_prompts} prompts x up to {new_tokens} new "
          f"tokens | temperature {args.temperature}, top_p {args.top_p}, top_k {args.top_k} | "
          f"{args.repeats} repeats after 1 warm-up")
    print(f"machine: {machine_line()}")

    results = {}
    for name in backends:
        start = time.perf_counter()
        backend = make_generation_backend(
            model, tokenizer, settings.model_copy(update={"backend": name}), max_prompt
        )
        started = time.perf_counter() - start
        row = time_generation(backend, prompts, args.repeats, device)
        if name == "vllm":
            row["engine_start_s"] = started
            row["refit_s"] = time_refit(backend, model, args.refits, device)
            backend.close()
        results[name] = row
        extra = (f" | engine start {row['engine_start_s']:.1f} s, refit {row['refit_s'] * 1e3:.1f}"
                 f" ms (median of {args.refits})" if name == "vllm" else "")
        print(f"{name:>4}: {row['seconds']:.3f} s per batch, {row['tokens']:.0f} tokens, "
              f"{row['tokens_per_s']:,.0f} tokens/s{extra}")
    if {"hf", "vllm"} <= results.keys():
        ratio = results["vllm"]["tokens_per_s"] / results["hf"]["tokens_per_s"]
        print(f"vllm / hf tokens/s: {ratio:.2f}x (GPU target >= 5x; refit target < 1 s)")
    print(f"load average after: {load_text()}")


if __name__ == "__main__":  # vLLM's engine may spawn processes: keep this guard
    main()
