"""rlnb.widgets: the Jupyter UI layer (live dashboard, stage stepper, rollout inspectors).

Installed as ``rlnb.widgets`` (the build maps this folder there), so ``import rlnb`` never
imports it and never needs Jupyter packages. The widgets themselves arrive with the notebook
issue; this package already exists so that the import path is fixed and tested.
"""
