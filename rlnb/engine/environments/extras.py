"""Packages of the optional ``envs`` extra (reasoning-gym, verifiers): imported only by the task
that needs them, with one line saying which extra to install when they are missing.

    rg = require("reasoning_gym", "data.name: reasoning_gym")
"""

from __future__ import annotations

import importlib
from types import ModuleType

# the import name -> the name pip installs it under
PACKAGES = {"reasoning_gym": "reasoning-gym", "verifiers": "verifiers"}


class MissingExtra(ImportError, ValueError):
    """An optional package a setting needs is not installed. A ``ValueError`` too, so a config
    validator reports it at the key that asked for it."""


def require(module: str, what: str) -> ModuleType:
    """``import module``, or ``MissingExtra`` naming ``what`` needed it and the extra to install."""
    top = module.split(".")[0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name != top:  # the package is there; something it imports is not
            raise
        package = PACKAGES.get(top, top)
        raise MissingExtra(f"{what} needs {package}, which is not installed: pip install -e "
                           f"'.[envs]' (or pip install {package})", name=top) from None
