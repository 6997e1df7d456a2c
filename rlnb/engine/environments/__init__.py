"""Where rewards come from: the environment interface, the built-in tasks, multi-turn rollouts.

- ``base``: the environment and task interfaces, ``Rewards`` and their checks;
  ``task_settings``: a task's settings and their defaults, written once;
- ``tasks``: the task registry and the ``data`` section; ``run_task``: the task a run trains on;
- ``generated``, ``reverse``, ``addition_think``, ``calculator``: the built-in generated tasks;
  ``math_task`` (with ``dapo_verify``): question/answer data sets; ``reasoning_gym_task``,
  ``verifiers_task``: the field's tasks (``extras``: their optional packages);
- ``user_data``: a user's data set as rows; ``reward_funcs``: TRL-style reward functions;
  ``reward_task``: rows scored by them; ``reward_table``: the reward workbench's numbers;
- ``prompts``: a row as the text the policy generates from; ``multiturn``: multi-turn rollouts."""
