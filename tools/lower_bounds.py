"""Print pyproject.toml's lower bounds as pins (`name>=X` -> `name==X`), for the lower version tier.

    python tools/lower_bounds.py > lower.txt
    pip install -c constraints.txt -c lower.txt -e ".[notebook,dev]"

The core dependencies and the notebook and dev extras (the ones the fast subset imports); torch
is left to constraints.txt, whose pin is the only torch the build machines hold.
"""

import re
import sys
from pathlib import Path

import tomllib

EXTRAS = ("notebook", "dev")
SKIP = {"torch"}


def lower_bounds(pyproject: Path) -> dict[str, str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    specs = list(project["dependencies"])
    for extra in EXTRAS:
        specs += project["optional-dependencies"][extra]
    pins = {}
    for spec in specs:
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)", spec.strip())
        if m is None:
            sys.exit(f"{pyproject}: cannot read a lower bound from {spec!r} (write name>=X)")
        name = m.group(1).lower()
        if name not in SKIP:
            pins[name] = m.group(3)
    return pins


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[1]
    for name, version in sorted(lower_bounds(root / "pyproject.toml").items()):
        print(f"{name}=={version}")
