"""What a trainer saves and restores between processes: NeMo-RL's save state (``GRPOSaveState``'s
fields) plus the data position, and the hooks through which a loop adds its own parts to a
checkpoint (PPO's critic, the async loop's replay buffer).

``Trainer`` inherits ``SaveState``; ``rlnb.run.store.checkpoint`` writes what these return and
``TrainingRun``'s resume hands it back. Nothing here runs during a step.
"""

from __future__ import annotations

from typing import Any


class SaveState:
    """The save-state half of ``Trainer`` (a mixin: it reads the counters ``Trainer`` keeps:
    ``step_count``, ``consumed_prompts``, ``total_valid_tokens``, ``last_validation``)."""

    def state(self) -> dict[str, Any]:
        """The save state (NeMo-RL's ``GRPOSaveState`` fields) plus the data position (with the
        task's own state where it keeps one: a curriculum's levels decide the rows drawn)."""
        position: dict[str, Any] = {"consumed_prompts": self.consumed_prompts}
        task_state = getattr(self.task, "state_dict", None)
        if task_state is not None:
            position["task"] = task_state()
        return {
            "current_step": self.step_count,
            "total_steps": self.step_count,
            "consumed_samples": self.consumed_prompts * self.loop_config.num_generations_per_prompt,
            "current_epoch": 0,
            "total_valid_tokens": self.total_valid_tokens,
            "val_reward": self.last_validation.get("validation/accuracy"),
            "data_position": position,
        }

    def checkpoint_parts(self) -> dict[str, tuple[Any, Any, Any]]:
        """Trained modules besides the policy, as ``name -> (module, optimizer, scheduler)``,
        for checkpoints (PPO: its critic). None here."""
        return {}

    def checkpoint_files(self) -> dict[str, Any]:
        """Other state of the loop saved with a checkpoint, as ``name -> plain data`` (the
        async loop's replay buffer). None here."""
        return {}

    def load_checkpoint_files(self, files: dict[str, Any]) -> None:
        """Restore what ``checkpoint_files`` saved (called after ``load_state``)."""

    def load_state(self, state: dict[str, Any]) -> None:
        self.step_count = state["current_step"]
        self.total_valid_tokens = state["total_valid_tokens"]
        self.consumed_prompts = state["data_position"]["consumed_prompts"]
        if "task" in state["data_position"] and hasattr(self.task, "load_state_dict"):
            self.task.load_state_dict(state["data_position"]["task"])
        if state.get("val_reward") is not None:
            self.last_validation = {"validation/accuracy": state["val_reward"]}
