"""Where things are, for tests in any folder: the repository root and the fixture files."""

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
TESTS = SUPPORT.parent
ROOT = TESTS.parent
DATA = SUPPORT / "data"
# made-up curves, fails or holds on demand (no model: fast)
FAKE_NB = SUPPORT / "notebooks" / "fake_metrics.ipynb"
# two GRPO steps of the tiny model, a weight digest per rank
TRAIN_NB = SUPPORT / "notebooks" / "train_tiny.ipynb"
