"""The lab's text regions, rendered from the record (``bench_lab.py write`` / ``check``).

A region is a run of lines in docs/teaching.md or an exercise source between

    <!-- lab-numbers: NAME -->          (in an exercise source: "# <!-- lab-numbers: NAME -->")
    <!-- /lab-numbers -->

whose body ``render(NAME, lab)`` (``lab_regions.py``) writes from ``benchmarks/lab_numbers.json``.
``check_text`` renders every region again and reports each that differs from the file, each
region the renderer does not know, and each percentage written outside any region: a figure the
lab quotes lives in a region, so it comes from the record.

A conclusion drawn over several runs is worded from the runs (``lab_regions.held``: "on all
six runs", "on four of six"), so a new record cannot leave a claim standing that its numbers
no longer support; a statement the template makes unconditionally is asserted against the
record (``lab_regions.Unsupported`` names it) and the rendering stops there.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from harness import ROOT

BEGIN = re.compile(r"^(?P<prefix>(?:# )?)<!-- lab-numbers: (?P<name>[\w-]+) -->\s*$")
END = re.compile(r"^(?:# )?<!-- /lab-numbers -->\s*$")
PERCENT = re.compile(r"\d(?:[\d.]*\d)?\s?%")


def text_files(root: Path) -> list[Path]:
    return [root / "docs" / "teaching.md",
            *sorted((root / "notebooks" / "exercises").glob("[0-9][0-9]_*.py"))]


def regions(lines: list[str], path: Path) -> list[tuple[str, int, int, str]]:
    """(name, first body line, end marker line, line prefix) of each region, in order."""
    found, open_at = [], None
    for i, line in enumerate(lines):
        begin = BEGIN.match(line)
        if begin:
            if open_at is not None:
                raise ValueError(f"{path}:{i + 1}: a region inside region {open_at[0]!r}")
            open_at = (begin.group("name"), i + 1, begin.group("prefix"))
        elif END.match(line):
            if open_at is None:
                raise ValueError(f"{path}:{i + 1}: an end marker without a region")
            found.append((open_at[0], open_at[1], i, open_at[2]))
            open_at = None
    if open_at is not None:
        raise ValueError(f"{path}: region {open_at[0]!r} has no end marker")
    return found


WIDTH = 96
ITEM = re.compile(r"^(- |\d+\. )")
KEEP = re.compile(r"\$[^$]+\$|`[^`]+`")


def reflow(text: str, width: int) -> list[str]:
    """Markdown paragraphs and list items re-wrapped to ``width``; tables, code blocks and HTML
    lines as they are."""
    import textwrap

    out, block, fenced = [], [], False

    def flush():
        items: list[list[str]] = []
        for line in block:
            if ITEM.match(line) or not items:
                items.append([line])
            else:
                items[-1].append(line.strip())
        for item in items:
            marker = ITEM.match(item[0])
            indent = " " * len(marker.group(1)) if marker else ""
            # a formula ($...$) or code (`...`) stays on one line
            text = KEEP.sub(lambda m: m.group(0).replace(" ", "\0"), " ".join(item))
            out.extend(x.replace("\0", " ") for x in textwrap.wrap(
                text, width, subsequent_indent=indent, break_long_words=False,
                break_on_hyphens=False))
        block.clear()

    for line in text.splitlines():
        if line.startswith("```"):
            flush()
            fenced = not fenced
            out.append(line)
        elif fenced or line.startswith(("|", "<")) or not line.strip():
            flush()
            out.append(line)
        else:
            block.append(line)
    flush()
    return out


def body(text: str, prefix: str) -> list[str]:
    """Rendered markdown as the file's lines (behind ``# `` in an exercise source)."""
    lines = reflow(text, WIDTH - len(prefix))
    if not prefix:
        return lines
    return [f"# {x}" if x else "#" for x in lines]


def rendered(path: Path, record: dict) -> tuple[str, list[str]]:
    """The file with every region rendered from ``record``; the problems found."""
    from lab_regions import Lab, render

    lines = path.read_text(encoding="utf-8").splitlines()
    lab, problems, out, last = Lab(record), [], [], 0
    for name, first, end, prefix in regions(lines, path):
        out += lines[last:first]
        try:
            out += body(render(name, lab), prefix)
        except KeyError as err:
            problems.append(f"{path}:{first}: region {name!r}: nothing in the record for {err}")
            out += lines[first:end]
        except ValueError as err:  # lab_regions.Unsupported: a sentence the record breaks
            problems.append(f"{path}:{first}: region {name!r}: {err}")
            out += lines[first:end]
        last = end
    out += lines[last:]
    return "\n".join(out) + "\n", problems


def outside(path: Path) -> list[str]:
    """Percentages written outside every region (the lab's figures belong in one)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    inside = {i for _, first, end, _ in regions(lines, path) for i in range(first, end)}
    return [f"{path}:{i + 1}: a percentage outside the lab-numbers regions: {line.strip()[:90]}"
            for i, line in enumerate(lines) if i not in inside and PERCENT.search(line)]


def write_text(record: dict, root: Path = ROOT) -> int:
    status = 0
    for path in text_files(root):
        new, problems = rendered(path, record)
        for p in problems:
            print(p)
            status = 1
        if new != path.read_text(encoding="utf-8"):
            path.write_text(new, encoding="utf-8")
            print(f"bench_lab: wrote {path.relative_to(root)}")
    return status


def check_text(record: dict, root: Path = ROOT) -> int:
    """0 when every region is what the record renders and no percentage stands outside one;
    else 1, with each difference."""
    problems = []
    for path in text_files(root):
        new, found = rendered(path, record)
        problems += found + outside(path)
        old = path.read_text(encoding="utf-8")
        if new != old:
            diff = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0,
                                        fromfile=str(path), tofile="rendered from the record")
            problems.append("\n".join(list(diff)[:40]))
    for p in problems:
        print(p)
    if problems:
        print("bench_lab check: the text and benchmarks/lab_numbers.json disagree; after a "
              "measure, `python benchmarks/bench_lab.py write` puts the record into the text")
        return 1
    print("bench_lab check: every region as the record renders it")
    return 0
