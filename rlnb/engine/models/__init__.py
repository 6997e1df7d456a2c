"""The models: the trainable policy, the embedded tiny model and the generation backends.

- ``policy``: the policy (log-probs, the optimizer step, its update path chosen once);
  ``policy_config``: its config; ``schedule``: the learning rate; ``shared_prefix``: each
  prompt once per batch; ``compiled``, ``compile_config``: ``torch.compile``'s paths;
- ``loading``: a model and tokenizer from ``policy.model_name``; ``tiny``: the embedded model;
  ``random_init``: a real shape with random weights; ``lora``: LoRA adapters; ``value``: the
  critic; ``memory_plan``: the memory a step needs, from the config;
- ``backend``: what a generation backend is; ``generation``: their registry; ``hf_backend``,
  ``sampler``, ``hf_generate``, ``copy_backend``: Hugging Face sampling; ``vllm_backend``,
  ``vllm_engine``: vLLM's; ``context_budget``: NeMo-RL's response budget."""
