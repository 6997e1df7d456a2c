"""Agent tasks under ``accelerate``; launched by tests/run/test_distributed.py (not collected).

    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no \
        --dynamo_backend no tests/support/dist_agent_script.py OUT

Two GRPO steps of an ``AgentTask`` whose episodes take one or two model turns and some rewrite
their first reply (broken: counted, never trained), so the ranks make different numbers of
generation calls and count different episodes; then, when verifiers is installed, one step of a
verifiers tool environment. Every rank writes ``rank{r}.json``: its rows' kinds per step, the
step metrics, and a digest of its weights after each trainer.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch
import torch.distributed as torch_dist
from accelerate import Accelerator

from rlnb.engine.agents.agent_task import AgentTask
from rlnb.engine.trainers.grpo import GRPOTrainer
from rlnb.run.config.master_config import load_config

SMALL = ["grpo.val_period=0", "sft.enabled=false", "policy.tiny.chat_template=true",
         "grpo.num_prompts_per_step=4", "grpo.num_generations_per_prompt=3",
         "policy.max_total_sequence_length=64", "policy.generation.max_new_tokens=8",
         "grpo.max_rollout_turns=2", "policy.train_global_batch_size=12",
         "policy.train_micro_batch_size=6", "data.num_val=4"]
KINDS = ("edit", "keep", "one", "one", "keep", "one", "edit", "one")


async def agent(client, row):
    """One call ("one"), or two with the reply passed back ("keep") or rewritten ("edit")."""
    messages = [{"role": "user", "content": "go" + row["answer"]}]
    reply = await client.chat.completions.create(messages=messages)
    message = reply.choices[0].message
    if row["kind"] != "one":
        kept = message if row["kind"] == "keep" else {"role": "assistant", "content": "EDITED"}
        messages += [kept, {"role": "user", "content": "more"}]
        await client.chat.completions.create(messages=messages)
    return float(len(message.content or "") % 2)


def digest(model) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters()):
        h.update(name.encode() + p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def tool_environment():
    """A verifiers taskset with one tool (``calc``), as tests/engine/test_verifiers_agents.py."""
    import verifiers.v1 as vf

    class Calc(vf.Toolset):
        TOOL_PREFIX = None

        @vf.tool
        async def calc(self, x: str) -> str:
            """Multiply 'a*b'."""
            a, b = x.split("*")
            return str(int(a) * int(b))

    class Product(vf.TaskData):
        answer: str = ""

    class ProductTask(vf.Task[Product]):
        @classmethod
        def toolsets(cls, config):
            return [Calc(vf.ToolsetConfig())]

        @vf.reward
        async def correct(self, task: Product, trace) -> float:
            return float(trace.last_reply == task.answer)

    class Products(vf.Taskset[ProductTask]):
        def load(self):
            for a in range(10, 20):
                yield ProductTask(Product(prompt=f"{a}*11", answer=str(a * 11)))

    return Products(vf.TasksetConfig())


def main(out: Path) -> None:
    accelerator = Accelerator(cpu=not torch.cuda.is_available())  # as `rlnb train`
    rows = [{"prompt": [{"role": "user", "content": "x"}], "answer": str(i), "kind": k}
            for i, k in enumerate(KINDS)]
    trainer = GRPOTrainer(load_config(None, SMALL, preset="fast"), accelerator=accelerator,
                          task=AgentTask(agent, train=rows, name="kinds"))
    rank = trainer.dist.rank
    info = {"rank": rank, "world_size": trainer.dist.world_size, "kinds": [], "metrics": []}
    for m in trainer.train(2):
        info["kinds"].append([r["kind"] for r in m.rollout.rows])
        info["metrics"].append({k: v for k, v in m.items() if isinstance(v, float)})
    info["digest"] = digest(trainer.policy.model)
    try:
        environment = tool_environment()
    except ImportError:  # the envs extra is not installed
        environment = None
    if environment is not None:
        trainer = GRPOTrainer(load_config(None, [*SMALL, "grpo.max_rollout_turns=3"],
                                          preset="fast"),
                              accelerator=accelerator, environment=environment)
        info["tool_metrics"] = {k: v for k, v in trainer.step().items() if isinstance(v, float)}
        info["tool_digest"] = digest(trainer.policy.model)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}.json").write_text(json.dumps(info, indent=1))
    accelerator.wait_for_everyone()
    accelerator.end_training()
    if torch_dist.is_initialized():  # leave together (see rlnb TrainingRun.close)
        torch_dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
