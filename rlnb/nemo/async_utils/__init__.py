"""NeMo-RL's ``nemo_rl.algorithms.async_utils``: the async GRPO replay buffer with NeMo-RL's
interface (``replay_buffer.ReplayBufferImpl``). NeMo-RL's ``AsyncTrajectoryCollector`` (a Ray
actor driving vLLM servers) is not here: rlnb's collector is
``rlnb.engine.trainers.collector.TrajectoryCollector``, driven by ``AsyncGRPOTrainer``.

- ``replay_buffer``: ``ReplayBufferImpl`` over ``rlnb.algorithms.replay_buffer``."""

from rlnb.nemo.async_utils.replay_buffer import ReplayBuffer, ReplayBufferImpl

__all__ = ["ReplayBuffer", "ReplayBufferImpl"]


def __getattr__(name: str):
    if name == "AsyncTrajectoryCollector":
        raise ImportError("rlnb.nemo has no AsyncTrajectoryCollector: NeMo-RL's collector is a "
                          "Ray actor; rlnb's is rlnb.engine.trainers.collector."
                          "TrajectoryCollector, run by AsyncGRPOTrainer (docs/nemo_rl_names.md)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
