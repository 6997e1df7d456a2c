"""Stage timings: ``elapsed = timer(); ...; metrics["timing/train/x"] = elapsed()``."""

from __future__ import annotations

import time
from collections.abc import Callable


def timer() -> Callable[[], float]:
    """A function returning the seconds since ``timer()`` was called (``time.perf_counter``)."""
    start = time.perf_counter()
    return lambda: time.perf_counter() - start
