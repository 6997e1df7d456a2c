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
prints, per loop, how many load (and apart: the text models' configs, and the vision-language
recipes under recipes/vlm, whose models rlnb cannot train), the sections ignored most often, and
each refusal with its reason, counted over the files. A file that rolls out through NeMo-Gym
(``env.should_use_nemo_gym``) also gets ``env.should_use_nemo_gym=false``: NeMo-RL's own switch
to train on one's own data.
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


def data_of(path: Path) -> dict:
    from rlnb.run.config.nemo.reader import read_nemo_yaml

    data = read_nemo_yaml(path).get("data")
    return data if isinstance(data, dict) else {}


def uses_nemo_gym(path: Path) -> bool:
    """Whether the file rolls out through NeMo-Gym (``env.should_use_nemo_gym``)."""
    from rlnb.run.config.nemo.reader import read_nemo_yaml

    env = read_nemo_yaml(path).get("env")
    return isinstance(env, dict) and bool(env.get("should_use_nemo_gym"))


def measure(path: Path, loop: str) -> tuple[bool, dict, dict, int]:
    """(loaded, ignored {key: note}, refused {key: reason}, lines of the ignored listing)."""
    import rlnb
    from rlnb.run.config.nemo.report import group_lines
    from rlnb.run.config.nemo.translate import translate_file

    overrides = list(OVERRIDES.get(loop, []))
    if loop != "dpo" and isinstance(data_of(path).get("train"), list):  # several data sets:
        overrides = [o for o in overrides if not o.startswith("data.train.")]  # one's own, one
        overrides.append("data.train=[{" + ", ".join(
            o.removeprefix("data.train.").replace("=", ": ") for o in OVERRIDES[loop]
            if o.startswith("data.train.")) + "}]")
    if uses_nemo_gym(path):  # as in NeMo-RL: one's own data runs on the native path
        overrides.append("env.should_use_nemo_gym=false")
    ignored, refused, roots = translate_file(path, overrides)
    if refused:
        return False, ignored, refused, 0
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            rlnb.load_config(path, overrides, ignore_unsupported=True)
    except (ValueError, TypeError) as err:
        return False, ignored, {"(config check)": " ".join(str(err).split())}, 0
    return True, ignored, {}, len(group_lines(ignored, roots))


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
        ok, ignored, refused, _ = measure(path, loop_of(path))
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
    listing: list[int] = []  # lines of each loaded file's ignored listing
    reasons: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    for loop in ("grpo", "ppo", "dpo"):
        for path in by_loop.get(loop, []):
            ok, ignored, refused, lines = measure(path, loop)
            loaded[loop] += ok
            kind = "vision" if "vlm" in path.relative_to(configs).parts else "text"
            loaded[kind, "files"] += 1
            loaded[kind, "load"] += ok
            if ok:
                listing.append(lines)
            for key, why in refused.items():
                reasons[(key, why[:140])].append(path.relative_to(configs).as_posix())
    print_report(by_loop, loaded, listing, reasons, markdown=args.markdown)
    return 0


def print_report(by_loop, loaded, listing, reasons, *, markdown):
    rows = [(loop, len(by_loop.get(loop, [])), loaded[loop]) for loop in ("grpo", "ppo", "dpo")]
    rows.append(("all three", sum(r[1] for r in rows), sum(r[2] for r in rows)))
    rows.append(("text models", loaded["text", "files"], loaded["text", "load"]))
    rows.append(("recipes/vlm", loaded["vision", "files"], loaded["vision", "load"]))
    others = {k: len(v) for k, v in sorted(by_loop.items()) if k not in ("grpo", "ppo", "dpo")}
    refusals = sorted(reasons.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    if markdown:
        print("| loop | files | load | share |\n|---|---|---|---|")
        for loop, n, ok in rows:
            print(f"| {loop} | {n} | {ok} | {100 * ok / max(n, 1):.1f}% |")
        print(f"\nOther files: {', '.join(f'{k} {v}' for k, v in others.items())} (a loop "
              "rlnb refuses in one line, or no loop section: the evals' and a recipe's parts).")
        if listing:
            print(f"A loaded file's list of ignored keys takes {min(listing)}-{max(listing)} "
                  "lines, grouped by section.")
        print("\n| files | refused key | why | e.g. |\n|---|---|---|---|")
        for (key, why), where in refusals:
            why = why.replace("|", "\\|")
            print(f"| {len(where)} | `{key}` | {why} | `{where[0]}` |")
        return
    print(f"{'loop':12s} {'files':>6} {'load':>6}")
    for loop, n, ok in rows:
        print(f"{loop:12s} {n:6d} {ok:6d}  {100 * ok / max(n, 1):5.1f}%")
    print(f"\nother files: {others}")
    if listing:
        print(f"ignored keys listed in {min(listing)}-{max(listing)} lines per loaded file")
    print(f"\nrefusals ({len(reasons)} distinct):")
    for (key, why), where in refusals:
        print(f"  {len(where):4d}  {key}: {why}  (e.g. {where[0]})")


if __name__ == "__main__":
    raise SystemExit(main())
