"""YAML configs, installed as ``rlnb.configs`` so ``rlnb train`` finds the default anywhere.

``tiny.yaml`` is the embedded default (what ``rlnb train`` runs with no config file);
``accelerate/`` holds launcher configs for several GPUs.
"""
