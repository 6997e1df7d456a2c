"""Preference pairs from what users have: a dataset's rows, or a task's scored samples.

    rows = load_pair_rows("pairs.jsonl")          # or a list of dicts, or a datasets.Dataset
    pairs = tokenize_pairs(rows, tokenizer, max_length=64)
    batch = collate_pairs(pairs[:16], kept, pad_id, step=0, source="dataset")

A dataset holds TRL's columns ``prompt``, ``chosen``, ``rejected`` (https://huggingface.co/docs/
trl/dataset_formats), each either text or a list of ``{"role", "content"}`` messages; a task's
samples become pairs through ``rlnb.algorithms.preference_pairs`` (a higher-reward response
chosen over a lower-reward one of the same prompt).

Implementation choices:
1) Text pairs are tokenised as the warm start's supervised rows are: the prompt (with the BOS
   token, if the tokenizer has one) then the response and EOS, so a dataset's correct answer is
   the very token sequence the policy samples when it answers right and stops.
2) Messages are rendered with the tokenizer's chat template: the response is what the template
   adds to the prompt's rendering (with the generation prompt); its end-of-turn token ends it, no
   EOS is added. A tokenizer without a chat template is refused, naming the row.
3) Every row is checked when the pairs are loaded, not when a step reaches it: a missing column,
   a wrong type, identical chosen and rejected responses (nothing to prefer) or a pair longer than
   ``policy.max_total_sequence_length`` is a ``ValueError`` naming the row.
4) A pair is held as token id lists (``TokenPair``), plain data: a sampled pool is saved as is in
   a checkpoint and a step's rows are padded only when collated.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from rlnb.algorithms.preference_pairs import preference_pairs
from rlnb.engine.data.batches import RolloutBatch
from rlnb.engine.data.preference_batch import PreferenceBatch
from rlnb.engine.models.backend import left_pad

COLUMNS = ("prompt", "chosen", "rejected")


@dataclass(frozen=True)
class TokenPair:
    """One pair as token ids: ``prompt_ids`` (BOS included) and each response's ids (its end
    token included), the texts, the task's rewards when a task scored them (NaN otherwise) and
    the row it came from."""

    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]
    prompt: str
    chosen: str
    rejected: str
    reward_chosen: float = math.nan
    reward_rejected: float = math.nan
    row: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------------
# a dataset's rows


def load_pair_rows(source, where: str = "pairs") -> list[dict[str, Any]]:
    """The rows of ``source``: a list of dicts, a ``datasets.Dataset`` (or anything iterable of
    dicts with ``column_names``), a pandas DataFrame, or a local ``.jsonl``/``.json``/
    ``.parquet`` file (or a hub data set's name, read with ``datasets``)."""
    if isinstance(source, (str, Path)):
        from rlnb.engine.environments.math_task import load_rows

        path = Path(source).expanduser()
        if path.suffix.lower() in (".json", ".jsonl", ".parquet") and not path.is_file():
            what = "a directory, not a file," if path.is_dir() else "no file"
            raise ValueError(f"{where}: {what} at {str(source)!r}")
        try:
            return [dict(r) for r in load_rows(str(source))]
        except FileNotFoundError as err:
            raise ValueError(f"{where}: {err}") from None
    if hasattr(source, "to_dict") and hasattr(source, "columns"):  # a pandas DataFrame
        return source.to_dict("records")
    if isinstance(source, Sequence) or hasattr(source, "column_names"):
        rows = list(source)
        bad = next((i for i, r in enumerate(rows) if not isinstance(r, Mapping)), None)
        if bad is not None:
            raise ValueError(f"{where}: row {bad} is a {type(rows[bad]).__name__}, not a dict "
                             f"with the columns {', '.join(COLUMNS)}")
        return [dict(r) for r in rows]
    raise ValueError(f"{where}: give a list of dicts, a datasets.Dataset, a DataFrame or a "
                     f".jsonl/.json/.parquet file, got {type(source).__name__}")


def digest(rows: list[dict[str, Any]]) -> str:
    """16 hex digits identifying the pairs' contents (a resumed run checks it: the same data)."""
    blob = json.dumps([[r.get(c) for c in COLUMNS] for r in rows], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def tokenize_pairs(rows: list[dict[str, Any]], tokenizer, *, max_length: int,
                   where: str = "pairs") -> list[TokenPair]:
    """Check every row (choice 3) and tokenise it (choices 1 and 2)."""
    if not rows:
        raise ValueError(f"{where}: no rows (a preference dataset needs at least one pair)")
    pairs = []
    for i, row in enumerate(rows):
        # a file's rows share one schema: a column one row lacks is null there (datasets)
        missing = [c for c in COLUMNS if row.get(c) is None]
        if missing:
            has = [str(k) for k, v in row.items() if v is not None]
            raise ValueError(f"{where}: row {i} has no {missing[0]!r} column (it has "
                             f"{', '.join(has) or 'none'}; a pair needs {', '.join(COLUMNS)})")
        prompt, chosen, rejected = _texts(row, i, tokenizer, where)
        if chosen == rejected:
            raise ValueError(f"{where}: row {i} has identical chosen and rejected responses "
                             f"({chosen[:60]!r}): there is nothing to prefer")
        ids = _encode(tokenizer, prompt, bos=True)
        c_ids, r_ids = _encode(tokenizer, chosen), _encode(tokenizer, rejected)
        # an empty response is checked before the end-of-sequence token is appended to text
        empty = next((c for c, t in (("chosen", c_ids), ("rejected", r_ids)) if not t), None)
        if empty is not None:
            raise ValueError(f"{where}: row {i} has an empty {empty!r} response (a pair "
                             "compares two answers: give each some text)")
        end = [] if isinstance(row["chosen"], list) else [tokenizer.eos_token_id]
        c_ids, r_ids = c_ids + end, r_ids + end
        longest = len(ids) + max(len(c_ids), len(r_ids))
        if longest > max_length:
            raise ValueError(f"{where}: row {i} is {longest} tokens (prompt and its longer "
                             f"response), longer than policy.max_total_sequence_length="
                             f"{max_length}")
        pairs.append(TokenPair(ids, c_ids, r_ids, prompt, chosen, rejected, row=dict(row)))
    return pairs


def _texts(row, i, tokenizer, where) -> tuple[str, str, str]:
    """The prompt (as the policy sees it) and the two responses, as text."""
    kinds = {c: "text" if isinstance(row[c], str) else "messages" if _is_messages(row[c])
             else None for c in COLUMNS}
    bad = next((c for c in COLUMNS if kinds[c] is None), None)
    if bad is not None:
        raise ValueError(f"{where}: row {i}, {bad!r} is a {type(row[bad]).__name__}; give text "
                         "or a list of {'role', 'content'} messages")
    if len(set(kinds.values())) > 1:
        raise ValueError(f"{where}: row {i} mixes text and messages "
                         f"({', '.join(f'{c}: {k}' for c, k in kinds.items())}); use one format")
    if kinds["prompt"] == "text":
        return row["prompt"], row["chosen"], row["rejected"]
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(f"{where}: row {i} holds messages, which need a tokenizer with a chat "
                         f"template ({type(tokenizer).__name__} has none): give text instead")
    prompt = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True,
                                           tokenize=False)
    responses = []
    for c in ("chosen", "rejected"):
        full = tokenizer.apply_chat_template(row["prompt"] + row[c], tokenize=False)
        if not full.startswith(prompt):
            raise ValueError(f"{where}: row {i}: the chat template renders prompt + {c} without "
                             "the prompt's own rendering as its start; cannot find the response")
        responses.append(full[len(prompt):])
    return prompt, responses[0], responses[1]


def _is_messages(x) -> bool:
    return isinstance(x, list) and bool(x) and all(
        isinstance(m, Mapping) and "role" in m and "content" in m for m in x)


def _encode(tokenizer, text: str, bos: bool = False) -> list[int]:
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if bos and tokenizer.bos_token_id is not None:  # as tokenize_prompts does
        ids = [tokenizer.bos_token_id, *ids]
    return ids


# --------------------------------------------------------------------------------------------
# a task's samples


def sampled_pairs(samples: RolloutBatch, pairs_per_prompt: int
                  ) -> tuple[list[TokenPair], torch.Tensor]:
    """Pairs of ``samples`` (P prompts x G scored responses, a ``RolloutBatch``): ``k`` slots per
    prompt (``preference_pairs``, drawn with torch's random state) as ``TokenPair`` s, and
    ``kept [P·k]`` (False: no pair for the slot, or the two responses are the same tokens)."""
    P, G = int(samples.group.max()) + 1, samples.group_size
    rewards = samples.rewards.view(P, G)  # [P, G]: rows of a group are consecutive
    chosen, rejected, valid = preference_pairs(rewards, pairs_per_prompt)  # [P, k] each
    L = samples.prompt_ids.shape[1]
    pairs, kept = [], []
    for p in range(P):
        for c, r, ok in zip(chosen[p].tolist(), rejected[p].tolist(), valid[p].tolist()):
            i, j = p * G + c, p * G + r
            pair = _pair_of(samples, i, j, L)
            pairs.append(pair)
            kept.append(ok and pair.chosen_ids != pair.rejected_ids)
    return pairs, torch.tensor(kept, dtype=torch.bool)


def _pair_of(samples: RolloutBatch, i: int, j: int, L: int) -> TokenPair:
    """Rows i (chosen) and j (rejected) of ``samples`` as a TokenPair."""
    def response(b):
        return samples.input_ids[b, L:][samples.attention_mask[b, L:] > 0].tolist()

    prompt_ids = samples.input_ids[i, :L][samples.attention_mask[i, :L] > 0].tolist()
    return TokenPair(prompt_ids, response(i), response(j), samples.prompts[i],
                     samples.responses[i], samples.responses[j],
                     float(samples.rewards[i]), float(samples.rewards[j]),
                     dict(samples.rows[i]))


# --------------------------------------------------------------------------------------------
# a step's rows


def collate_pairs(pairs: list[TokenPair], kept: torch.Tensor, pad_id: int, *, step: int,
                  source: str, samples: RolloutBatch | None = None) -> PreferenceBatch:
    """Pairs -> a ``PreferenceBatch``: rows interleaved chosen, rejected; prompts left-padded,
    responses right-padded (the layout of a generated row); ``kept [P]`` is the sample mask of
    each pair's two rows."""
    if not pairs:
        raise ValueError("collate_pairs: no pairs")
    prompts = [p.prompt_ids for p in pairs for _ in range(2)]
    responses = [ids for p in pairs for ids in (p.chosen_ids, p.rejected_ids)]
    prompt_ids, prompt_mask = left_pad(prompts, pad_id)  # [B, L]
    width = max(map(len, responses))
    response_ids = torch.full((len(responses), width), pad_id, dtype=torch.long)
    response_mask = torch.zeros((len(responses), width), dtype=torch.long)
    for b, ids in enumerate(responses):
        response_ids[b, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        response_mask[b, : len(ids)] = 1
    rewards = torch.tensor([x for p in pairs for x in (p.reward_chosen, p.reward_rejected)],
                           dtype=torch.float32)
    correct = torch.tensor([bool(x > 0) for x in rewards.tolist()])  # NaN > 0 is False
    return PreferenceBatch(
        step=step, source=source, rows=[p.row for p in pairs],
        prompts=[p.prompt for p in pairs for _ in range(2)],
        responses=[t for p in pairs for t in (p.chosen, p.rejected)],
        pair=torch.arange(len(pairs)).repeat_interleave(2),
        chosen=torch.tensor([True, False]).repeat(len(pairs)),
        input_ids=torch.cat([prompt_ids, response_ids], 1),
        attention_mask=torch.cat([prompt_mask, response_mask], 1),
        token_mask=torch.cat([torch.zeros_like(prompt_mask), response_mask], 1).float(),
        sample_mask=kept.float().repeat_interleave(2),
        rewards=rewards, correct=correct,
        response_lengths=response_mask.sum(1), samples=samples,
    )
