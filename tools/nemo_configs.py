"""How many of NeMo-RL's shipped configs rlnb loads, what it ignores most, and why it refuses
the rest: the table of docs/nemo_rl_names.md#nemo-rls-own-configs, measured on a checkout.

    python tools/nemo_configs.py ~/src/RL                 # a NeMo-RL clone (examples/configs)
    python tools/nemo_configs.py ~/src/RL --markdown      # the table for the docs
    python tools/nemo_configs.py ~/src/RL --show grpo_math_1B.yaml

Each YAML under examples/configs (evals and the non-config files left out) is read with NeMo-RL's
``defaults:`` and sorted by the loop it names (``grpo``, ``ppo``, ``dpo``, or another NeMo-RL
loop: ``sft``, ``distillation``, ``rm``, kept as one-line refusals). A GRPO, PPO or DPO config is
then loaded as the docs tell a user to load it: ``rlnb.load_config(path, OVERRIDES[loop],
ignore_unsupported=True)``, the overrides pointing it at a model and data one has. The script
prints, per loop, how many load, the sections ignored most often, and each refusal with its
reason, counted over the files.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# what docs/nemo_rl_names.md tells a NeMo-RL user to override: a model and data they have
DATA = ["data.train.data_path=train.jsonl", "data.train.input_key=question",
        "data.train.output_key=answer", "data.train.dataset_name=ResponseDataset",
        "data.train.processor=math_hf_data_processor", "data.train.env_name=math",
        "data.validation=null"]
OVERRIDES = {
    "grpo": ["policy.model_name=tiny", *DATA],
    "dpo": ["policy.model_name=tiny", "data.train.data_path=pairs.jsonl",
            "data.train.dataset_name=BinaryPreferenceDataset"],
}
OVERRIDES["ppo"] = [*OVERRIDES["grpo"], "value.model_name=tiny"]  # the critic's model too
LOOPS = ("grpo", "ppo", "dpo", "sft", "distillation", "rm")


def loop_of(path: Path) -> str:
    from rlnb.run.config.nemo.reader import read_nemo_yaml

    try:
        data = read_nemo_yaml(path)
    except ValueError:
        return "unreadable"
    for loop in LOOPS:
        if isinstance(data.get(loop), dict):
            return loop
    return "none"


def measure(path: Path, loop: str) -> tuple[bool, dict, dict]:
    """(loaded, ignored {key: note}, refused {key: reason}) of one config."""
    import rlnb
    from rlnb.run.config.nemo.translate import translate_file

    ignored, refused = translate_file(path, OVERRIDES.get(loop, []))
    if refused:
        return False, ignored, refused
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            rlnb.load_config(path, OVERRIDES[loop], ignore_unsupported=True)
    except (ValueError, TypeError) as err:
        return False, ignored, {"(config check)": str(err).splitlines()[0]}
    return True, ignored, {}


def section(key: str) -> str:
    """The group an ignored key is counted under: its first two dotted parts."""
    return ".".join(key.split(".")[:2])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="a NeMo-RL clone (holding examples/configs)")
    parser.add_argument("--markdown", action="store_true", help="print the docs' table")
    parser.add_argument("--show", help="one config's ignored and refused keys")
    args = parser.parse_args(argv)
    configs = args.checkout / "examples" / "configs"
    if not configs.is_dir():
        print(f"nemo_configs: {configs} is not a folder (give a NeMo-RL checkout)",
              file=sys.stderr)
        return 2
    files = sorted(p for p in configs.rglob("*.yaml") if "evals" not in p.parts)
    if args.show:
        (path,) = [p for p in files if p.name == args.show] or [None]
        if path is None:
            print(f"nemo_configs: no {args.show} under {configs}", file=sys.stderr)
            return 2
        ok, ignored, refused = measure(path, loop_of(path))
        for key, note in ignored.items():
            print(f"ignored  {key}: {note}")
        for key, why in refused.items():
            print(f"REFUSED  {key}: {why}")
        print("loads" if ok else "refused")
        return 0
    by_loop: dict[str, list[Path]] = collections.defaultdict(list)
    for path in files:
        by_loop[loop_of(path)].append(path)
    loaded: collections.Counter = collections.Counter()
    ignored_sections: collections.Counter = collections.Counter()
    reasons: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    for loop in ("grpo", "ppo", "dpo"):
        for path in by_loop.get(loop, []):
            ok, ignored, refused = measure(path, loop)
            loaded[loop] += ok
            for group in {section(k) for k in ignored}:
                ignored_sections[group] += 1
            for key, why in refused.items():
                reasons[(key, why[:160])].append(path.relative_to(configs).as_posix())
    total = sum(len(by_loop.get(k, [])) for k in ("grpo", "ppo", "dpo"))
    print_report(by_loop, loaded, ignored_sections, reasons, total, markdown=args.markdown)
    return 0


def print_report(by_loop, loaded, ignored_sections, reasons, total, *, markdown):
    row = "| {} | {} | {} |" if markdown else "{:14s} {:>6} {:>6}"
    print(row.format("loop", "files", "load"))
    if markdown:
        print("|---|---|---|")
    for loop in ("grpo", "ppo", "dpo"):
        print(row.format(loop, len(by_loop.get(loop, [])), loaded[loop]))
    print(row.format("all three", total, sum(loaded.values())))
    others = {k: len(v) for k, v in by_loop.items() if k not in ("grpo", "ppo", "dpo")}
    print(f"\nother files (one-line refusal or not a training config): {others}")
    print("\nignored most often (files listing the section):")
    for group, n in ignored_sections.most_common(12):
        print(f"  {n:4d}  {group}")
    print(f"\nrefusals ({len(reasons)} distinct):")
    for (key, why), where in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(where):4d}  {key}: {why}  (e.g. {where[0]})")


if __name__ == "__main__":
    raise SystemExit(main())
