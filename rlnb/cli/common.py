"""What the commands of the ``rlnb`` command line share: how a command reports a user's mistake
(one line, exit 2, nothing written), and the notebook commands' (``rlnb run``, ``rlnb sweep``,
``rlnb launch``) arguments and runner.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

USER_ERRORS = (ValueError, FileNotFoundError, ImportError)


def error_message(err: BaseException) -> str:
    """A user's mistake as the one line a command prints (a missing module: which one)."""
    if isinstance(err, ImportError) and not isinstance(err, ModuleNotFoundError):
        return str(err)
    if isinstance(err, ModuleNotFoundError):
        return f"{err.name} is not installed ({err})"
    return str(err)


def show(path) -> str:
    """``path`` relative to the working directory when it lies below it."""
    if path is None:
        return "-"
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def notebook_arguments(p: argparse.ArgumentParser, values: str, help: str) -> None:
    """A notebook command's NOTEBOOK, ``-p KEY VALUES`` and ``--kernel``."""
    p.add_argument("notebook", help="the .ipynb to execute")
    p.add_argument("-p", "--param", nargs=2, action="append", default=[],
                   metavar=("KEY", values),
                   help=f"{help}; values are read as YAML, a KEY with a dot is a config override")
    p.add_argument("--kernel", default=None, metavar="NAME",
                   help="a Jupyter kernelspec (default: ipykernel on this Python, whichever "
                        "kernelspec is called python3)")


def notebook_command(name: str, call) -> int:
    """Run ``call()``; bad arguments exit 2 with one line, before anything is written."""
    try:
        return call()
    except ImportError as err:
        print(f"rlnb {name}: {err.name or err} is missing; notebooks need the notebook extra: "
              "pip install -e '.[notebook]'", file=sys.stderr)
        return 2
    except USER_ERRORS as err:
        print(f"rlnb {name}: {error_message(err)}", file=sys.stderr)
        return 2
