"""docs/metrics.md read as data: which metric keys have a row (shared by the tests of every
emitter)."""

import re

from paths import ROOT

DOC = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
# Keys with a row of their own: the backticked first cell of every table row.
DOCUMENTED = set(re.findall(r"^\| `([^`]+)` \|", DOC, flags=re.MULTILINE))


# rows for a family of keys: `train/reward/<name>` stands for one key per reward component
FAMILIES = [re.compile(re.escape(d).replace(re.escape("<name>"), r"[^/]+") + "$")
            for d in DOCUMENTED if "<name>" in d]


def is_documented(key: str) -> bool:
    """A row for ``key`` itself or for the key the trainer logs it as (``train/reward``), or a
    row for its family (``train/reward/<name>``)."""
    return (key in DOCUMENTED or any(doc.endswith("/" + key) for doc in DOCUMENTED)
            or any(f.match(key) for f in FAMILIES))
