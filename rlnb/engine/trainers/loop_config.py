"""What every loop's config section shares, and the rules that tie it to the other sections.

    class GRPOConfig(LoopConfig): adv_estimator, advantage clipping, async_grpo
    class PPOConfig(LoopConfig):  adv_estimator, ppo_epochs, critic warm-up

Implementation choices:
1) ``LoopConfig`` holds the keys every loop reads (sizes, the rollout filters and reward
   transforms, validation, the seed), with NeMo-RL's names; a loop adds its own. A loop whose
   NeMo-RL default differs redeclares the field (PPO keeps no reference policy by default).
2) Rules that read several sections (the loop, ``policy``, ``loss_fn``, ``env``, the turns the
   ``data`` task needs: ``Task.turns_needed``) are
   ``check_loop_rules``: the config layer runs it when a config loads, and a trainer runs it
   again on the config it is given (a field may have been assigned since), so a rule is written
   once. What needs the live world (ranks, devices) stays in the trainer.
3) ``reuse_generation_logprobs: auto`` is decided here, when the config loads: reuse only where
   the generation backend samples with the policy's own module, in float32, in a synchronous
   loop; the decision is written into the resolved config (docs/algorithms.md#log-probabilities).
4) ``OVERRIDE_ALIASES``: NeMo-RL's top-level names for a setting rlnb keeps in one place
   (``grpo.normalize_rewards`` is ``grpo.adv_estimator.normalize_rewards``).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator

from rlnb.algorithms.estimators import estimator_class
from rlnb.algorithms.rewards import RewardScalingConfig, RewardShapingConfig
from rlnb.config import Config, cross_field_rule
from rlnb.engine.environments.run_task import loop_section_of
from rlnb.engine.environments.tasks import TASKS, check_rollout_turns
from rlnb.engine.models.generation import GENERATION_BACKENDS

FOLDED_KEYS = ("normalize_rewards", "use_leave_one_out_baseline")
# a dotted override of the top-level name sets the one place the setting lives (choice 4)
OVERRIDE_ALIASES = {f"grpo.{k}": f"grpo.adv_estimator.{k}" for k in FOLDED_KEYS}


def registered_estimator(loop: str):
    """A field validator for ``<section>.adv_estimator.name``: a name registered for ``loop``
    (``rlnb.algorithms.estimators``); an unknown one, or another loop's, lists the valid ones."""

    def check(cls, name: str) -> str:
        estimator_class(name, loop)
        return name

    return field_validator("name")(classmethod(check))


class LoopConfig(Config):
    """The keys every loop's section has (``grpo``, ``ppo``): NeMo-RL's names, sizes for the
    CPU default."""

    num_prompts_per_step: int = Field(16, ge=1, strict=True, description="P: prompts per step.")
    num_generations_per_prompt: int = Field(
        16, ge=1, strict=True,
        description="G: responses per prompt (>= 2 for a group baseline: with G = 1 every "
        "GRPO/GDPO advantage is 0).")
    max_num_steps: int = Field(200, ge=0, strict=True, description="Training steps.")
    overlong_filtering: bool = Field(False, description="Drop truncated responses from the loss.")
    use_dynamic_sampling: bool = Field(False, description="DAPO: keep only rows with signal.")
    dynamic_sampling_max_gen_batches: int = Field(10, ge=1, description="Give up after this.")
    batch_multiplier: float = Field(1.0, ge=1, description="Prompts per generation batch factor.")
    reward_scaling: RewardScalingConfig = Field(default_factory=RewardScalingConfig)
    reward_shaping: RewardShapingConfig = Field(default_factory=RewardShapingConfig)
    seq_logprob_error_threshold: float | None = Field(
        None, gt=0, description="Mask rows whose mean exp|log π_gen - log π_old| exceeds it.")
    skip_reference_policy_logprobs_calculation: bool = Field(False, description="No ref model.")
    reuse_generation_logprobs: bool | Literal["auto"] = Field(
        "auto",
        description="rlnb extra: take prev_logprobs from generation (same weights, full-vocab "
        "log-softmax) instead of a second forward. 'auto' decides when the config loads: true "
        "where the backend samples with the policy's own module (hf) in float32 in the "
        "synchronous loop, else false; true with vllm or async is refused.",
    )
    val_period: int = Field(10, ge=0, description="Validate every k steps (0: never).")
    val_at_start: bool = Field(True, description="Validate before the first step.")
    val_at_end: bool = Field(True, description="Validate after the last step.")
    val_num_generations_per_prompt: int = Field(1, ge=1, description="k for pass@k.")
    max_val_samples: int | None = Field(
        200, ge=1, description="Held-out prompts per validation (null: every held-out row, "
        "NeMo-Gym's setting).")
    max_rollout_turns: int = Field(1, ge=1, description="Assistant turns per conversation.")
    seed: int = Field(0, description="Seeds model init, data order and sampling.")

    loop: ClassVar[str] = "grpo"  # which estimators the section's adv_estimator takes
    section: ClassVar[str] = "grpo"  # the section's key, for messages

    @property
    def asynchronous(self) -> bool:
        """Whether generation runs ahead of training (async GRPO)."""
        return False

    @property
    def leave_one_out(self) -> bool:
        """Whether per-prompt statistics leave each row out (dynamic sampling's std filter)."""
        return False

    @cross_field_rule
    def _shared_rules(self):
        key = self.section
        if self.batch_multiplier != 1 and not self.use_dynamic_sampling:
            raise ValueError(f"{key}.batch_multiplier != 1 needs {key}.use_dynamic_sampling")
        est = self.adv_estimator
        cls = estimator_class(est.name, self.loop)  # a registered name (its field checked it)
        if not cls.trainable:
            why = getattr(cls, "not_trainable_because", "") or "it needs inputs no trainer gives"
            raise ValueError(
                f"{key}.adv_estimator.name={est.name!r} cannot be trained by rlnb's loops: {why}"
                f"; {cls.__name__} can be called on tensors directly")
        if self.num_generations_per_prompt == 1 and cls.uses_groups(est):
            raise ValueError(
                f"{key}.num_generations_per_prompt=1 with {key}.adv_estimator.name={est.name!r}:"
                " a group of one is its own baseline, so every advantage would be 0 (use G >= 2)")
        return self


def needs_reference(config) -> bool:
    """Whether the run keeps a frozen reference policy: a KL penalty (in the loss or in the
    reward) that ``skip_reference_policy_logprobs_calculation`` does not switch off."""
    loop = loop_section_of(config)
    if not isinstance(loop, LoopConfig):  # a section with rules of its own (DPO's: always)
        return loop.needs_reference(config)
    return (config.loss_fn.reference_policy_kl_penalty > 0
            and not loop.skip_reference_policy_logprobs_calculation)


def resolve_logprob_reuse(loop: LoopConfig, policy) -> bool:
    """Decide ``reuse_generation_logprobs`` (choice 3), write the decision into ``loop`` and
    return it; an explicit true where the generator's weights are not the policy's is refused,
    naming the key (before any engine starts)."""
    key = f"{loop.section}.reuse_generation_logprobs"
    backend = policy.generation.backend
    shares = GENERATION_BACKENDS[backend].shares_policy_weights
    if loop.reuse_generation_logprobs == "auto":
        loop.reuse_generation_logprobs = (shares and not loop.asynchronous
                                          and policy.precision == "float32")
    elif loop.reuse_generation_logprobs and loop.asynchronous:
        raise ValueError(
            f"{key}=true with {loop.section}.async_grpo.enabled=true: the collector samples with "
            "older weights than the policy being trained (set it to auto or false)")
    elif loop.reuse_generation_logprobs and not shares:
        raise ValueError(
            f"{key}=true needs a generation backend that samples with the policy's own weights; "
            f"policy.generation.backend={backend!r} does not (its log-probs differ slightly from "
            "the policy's): set it to auto or false")
    return loop.reuse_generation_logprobs


def logprob_source(loop: LoopConfig) -> str:
    """One line naming where ``prev_logprobs`` come from, for a run's first lines."""
    if not isinstance(loop, LoopConfig):  # a section with rules of its own (DPO's)
        return loop.logprob_source()
    if loop.reuse_generation_logprobs is True:
        return ("prev_logprobs: the generator's own (it samples with the policy's weights; "
                "reuse_generation_logprobs=true)")
    return ("prev_logprobs: recomputed by the policy after generation "
            "(reuse_generation_logprobs=false)")


def rows_per_step(loop) -> int:
    """The most rows a step trains on: P x G, or DPO's pairs (two rows each)."""
    if isinstance(loop, LoopConfig):
        return loop.num_prompts_per_step * loop.num_generations_per_prompt
    per_prompt = 1 if loop.pairs.source == "dataset" else loop.pairs.pairs_per_prompt
    return 2 * loop.num_prompts_per_step * per_prompt


def check_warmup_cadence(config, loop) -> None:
    """``warmup_counts: training_steps`` acts only when a step holds several global batches
    (several optimizer steps); with one it would change nothing, so it is refused."""
    rows = rows_per_step(loop)
    for owner in ("policy", "value"):
        section = getattr(config, owner, None)
        if section is None or section.optimizer.warmup_counts != "training_steps":
            continue
        if section.train_global_batch_size >= rows:
            raise ValueError(
                f"{owner}.optimizer.warmup_counts=training_steps changes nothing here: "
                f"{owner}.train_global_batch_size={section.train_global_batch_size} holds all "
                f"{rows} rows of a step, so each step is one optimizer step (remove it)")


def check_loop_rules(config) -> None:
    """The rules between the loop section and the other sections (choice 2); a ``ValueError``
    naming the keys. Also decides ``reuse_generation_logprobs`` (choice 3)."""
    loop, loss = loop_section_of(config), config.loss_fn
    check_warmup_cadence(config, loop)
    if not isinstance(loop, LoopConfig):  # DPO's section states its own rules (dpo_config.py)
        loop.check_rules(config)
        return
    key = loop.section
    beta = loss.reference_policy_kl_penalty
    if loop.skip_reference_policy_logprobs_calculation and beta > 0:
        raise ValueError(
            f"{key}.skip_reference_policy_logprobs_calculation=true keeps no reference policy, "
            f"but loss_fn.reference_policy_kl_penalty={beta} needs one (set one of them)")
    est = loop.adv_estimator
    if loss.use_kl_in_reward and not estimator_class(est.name, loop.loop).kl_in_reward:
        raise ValueError(
            f"loss_fn.use_kl_in_reward=true needs an estimator that puts the KL into the reward "
            f"(reinforce_plus_plus; gae under PPO), not {key}.adv_estimator.name={est.name!r}")
    if loop.asynchronous:  # the async loop reweights stale trajectories (async_grpo.py)
        # lockstep (a study of staleness) may run the uncorrected control
        if not loss.use_importance_sampling_correction and not loop.async_grpo.lockstep:
            raise ValueError(
                f"{key}.async_grpo.enabled=true needs loss_fn.use_importance_sampling_correction="
                "true: trajectories come from older weights and the loss must reweight them "
                f"(NeMo-RL requires it too; {key}.async_grpo.lockstep=true admits it off, to "
                "measure what the correction does)")
        held = loop.async_grpo.max_buffered_rollouts
        if held is not None and held < loop.num_prompts_per_step:
            raise ValueError(
                f"{key}.async_grpo.max_buffered_rollouts={held} < {key}.num_prompts_per_step="
                f"{loop.num_prompts_per_step}: the buffer could never hold a step's groups")
        left_out = {  # NeMo-RL's async loop does none of these
            "use_dynamic_sampling": loop.use_dynamic_sampling,
            "reward_scaling.enabled": loop.reward_scaling.enabled,
            "reward_shaping.enabled": loop.reward_shaping.enabled,
        }
        for name, on in left_out.items():
            if on:
                raise ValueError(f"{key}.{name}=true with {key}.async_grpo.enabled=true: the "
                                 "async loop does not support it (set it to false)")
    if config.env.name != "task" and loop.max_rollout_turns == 1:
        raise ValueError(
            f"env.name={config.env.name!r} is a multi-turn environment, but "
            f"{key}.max_rollout_turns is 1 (it would never be asked a second turn)")
    data = getattr(config, "data", None)
    if getattr(data, "name", None) in TASKS:  # the turns the task declares it needs
        check_rollout_turns(TASKS[data.name], data, loop.max_rollout_turns,
                            f"{key}.max_rollout_turns")
    lora = config.policy.lora
    if lora.quantize is not None:  # a 4-bit base cannot be trained, nor copied into a critic
        if config.policy.model_name in ("tiny", "random"):
            raise ValueError(
                "policy.lora.quantize=4bit loads a hub or local model's linear layers in 4 bits; "
                f"the {config.policy.model_name} model is built in memory (save it with "
                "save_pretrained and set policy.model_name to its folder)")
        if getattr(config, "sft", None) is not None and config.sft.enabled:
            raise ValueError(
                "policy.lora.quantize=4bit with sft.enabled=true: the warm start trains every "
                "weight, and a 4-bit base cannot be trained (set sft.enabled: false)")
        # the loop trains a critic: its sections (loops.py) include the value model's (PPO)
        if getattr(config, "value", None) is not None:
            raise ValueError(f"policy.lora.quantize=4bit with algorithm: "
                             f"{getattr(config, 'algorithm', 'grpo')}: the critic is a "
                             "trainable copy of the policy's body, which a 4-bit base cannot "
                             "give (set policy.lora.quantize: null)")
    resolve_logprob_reuse(loop, config.policy)
