"""What each lab-numbers region says, written from the record (``lab_text.py`` puts it in place).

``render(name, lab)`` returns a region's markdown. Every figure comes from ``Lab`` (the record of
``bench_lab.py measure``); every conclusion over several runs is counted from them (``held``),
and a sentence the text states without a count is checked first (``claim``: ``Unsupported``
names the sentence and the runs that break it).
"""

from __future__ import annotations

NAMES = {"AVX2": "AVX2", "AVX512": "AVX-512", "DEFAULT": "no vector unit"}
WORDS = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "eleven", "twelve"]


class Unsupported(ValueError):
    """A sentence of a template that the record no longer supports."""


def claim(ok: bool, sentence: str) -> None:
    if not ok:
        raise Unsupported(f"the record no longer supports: {sentence!r}; reword the template "
                          "in benchmarks/lab_regions.py")


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def num(x: float, digits: int = 2) -> str:
    text = f"{x:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text.replace("-", "−")


def span(values, fmt=pct) -> str:
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo} to {hi}"


def held(n: int, total: int) -> str:
    """'on all six runs', 'on four of six runs', 'on none of the six runs'."""
    if n == total:
        return {1: "on the one run", 2: "on both runs"}.get(total, f"on all {WORDS[total]} runs")
    if n == 0:
        return f"on none of the {WORDS[total]} runs"
    return f"on {WORDS[n]} of {WORDS[total]} runs"


class Lab:
    """The record, read run by run: ``runs`` are (CPU class, seed), AVX2 first."""

    def __init__(self, record: dict):
        self.record = record
        classes = record.get("classes", {})
        self.classes = [c for c in ("AVX2", "AVX512") if c in classes] + sorted(
            c for c in classes if c not in ("AVX2", "AVX512"))
        self.runs = [(c, s) for c in self.classes for s in sorted(classes[c]["seeds"])
                     if classes[c]["seeds"][s]]

    def got(self, cls: str, seed: str, part: str) -> dict:
        return self.record["classes"][cls]["seeds"][seed][part]

    def live(self, part: str, setting: str, column: str) -> list[float]:
        """One value per run, in ``runs`` order."""
        return [self.got(c, s, part)["live"][setting][column] for c, s in self.runs]

    def label(self, cls: str, seed: str) -> str:
        return f"{NAMES.get(cls, cls)}, {seed}"

    def machine(self, cls: str) -> dict:
        return self.record["classes"][cls]["machine"]

    @property
    def native(self) -> str:
        """The class measured on its own machine (not emulated): the times are its."""
        return next(c for c in self.classes if not self.machine(c).get("emulated"))


def table(lab: Lab, header: list[str], row) -> str:
    """A markdown table: the header, then ``row(cls, seed)`` (a list of cells) per run."""
    lines = ["| " + " | ".join(["CPU, seed", *header]) + " |",
             "|" + "---|" * (len(header) + 1)]
    lines += ["| " + " | ".join([lab.label(c, s), *row(c, s)]) + " |" for c, s in lab.runs]
    return "\n".join(lines)


def before_after(lab: Lab, part: str, setting: str, c: str, s: str) -> str:
    row = lab.got(c, s, part)["live"][setting]
    return f"{pct(row['accuracy before'])} → {pct(row['accuracy after'])}"


def render(name: str, lab: Lab) -> str:
    from lab_guide import REGIONS

    if name not in REGIONS:
        raise KeyError(f"no renderer for region {name!r}")
    return REGIONS[name](lab).strip("\n")
