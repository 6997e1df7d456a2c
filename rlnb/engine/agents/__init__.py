"""Agents: multi-turn and tool-using episodes through the chat template, served by an
in-process OpenAI-compatible client, recorded token for token into training samples.

``templates.py`` renders and checks chat templates (prefix-preserving or not); ``tool_calls.py``
reads tool calls in a template's convention; ``sampler.py`` batches completions on the policy's
generator; ``episode.py`` records one episode and stitches it into a sample; ``client.py`` is the
OpenAI-shaped client, ``replies.py`` its replies (openai's ``ChatCompletion`` shape) and
``parameters.py`` what it does with each of openai's ``create`` parameters; ``rollouts.py``
runs a batch of episodes of a user's agent code; ``agent_task.py`` makes a user's agent code
(or a reset/step environment, ``openenv_agent``) a task; ``verifiers_agent.py`` runs a
verifiers environment's episodes as such a task (the chat loop in ``verifiers_loop.py``, an
env's own run in ``verifiers_env.py``); ``inspector.py`` shows turn N against turn N+1.
"""
