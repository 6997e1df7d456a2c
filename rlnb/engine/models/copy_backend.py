"""The HF backend on a private copy of the policy's weights: the async loop's collector samples
with it while the policy trains, and a refit copies the policy's new weights in."""

from __future__ import annotations

import copy

import torch

from rlnb.engine.models.hf_backend import HFGenerationBackend


class HFCopyGenerationBackend(HFGenerationBackend):
    """``HFGenerationBackend`` on a private copy of the policy's weights, reloaded by ``refit``:
    the async loop's collector samples with it while the policy trains."""

    shares_policy_weights = False
    can_refit = True

    def __init__(self, model, tokenizer, config, max_prompt_length=None):
        # the tokenizer too: a fast tokenizer used from two threads at once can fail
        super().__init__(copy.deepcopy(model), copy.deepcopy(tokenizer), config,
                         max_prompt_length)
        self.model.requires_grad_(False)

    @torch.no_grad()
    def refit(self, model: torch.nn.Module) -> None:
        """Copy ``model``'s parameters and buffers into the private copy."""
        for dst, src in zip(self.model.state_dict().values(), model.state_dict().values(),
                            strict=True):
            dst.copy_(src)
        self.weight_version += 1
