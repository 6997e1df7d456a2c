"""Run NeMo-RL's own algorithm unit tests against rlnb.nemo, on CPU.

    python tools/nemo_unit_tests.py ~/src/RL          # every tests/unit/algorithms/test_*.py
    python tools/nemo_unit_tests.py ~/src/RL --files test_utils.py test_loss_functions.py
    python tools/nemo_unit_tests.py ~/src/RL --keep   # keep the folder (pytest.log, junit.xml)

In a temporary folder it writes a tiny ``nemo_rl`` shim (``nemo_rl_shim.py``, imported by a
``conftest.py``) that binds each module under ``rlnb/nemo/`` to NeMo-RL's name in ``sys.modules``
(``rlnb.nemo.X`` -> ``nemo_rl.algorithms.X``, ``rlnb.nemo.batched_data_dict`` ->
``nemo_rl.distributed.batched_data_dict``). A NeMo-RL module rlnb has no counterpart for stays
missing: a test file importing one fails at collection and is counted as an error. NeMo-RL's
``tests/unit/algorithms`` tree is copied there (its helpers such as ``utils.py`` included, but not
``tests/unit/conftest.py``, which needs Ray), pytest runs the chosen files in one subprocess with
the GPU hidden (``CUDA_VISIBLE_DEVICES=``), and the junit XML is summarised per file: collected /
passed / failed / errors / skipped, one line per failing test (its id and the first line of its
error), and, for each file that did not import, every module-level import that fails under the
shim. Nothing is downloaded; nothing in the NeMo-RL checkout or in rlnb is changed.
"""

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV_PY = REPO / ".venv" / "bin" / "python"
TESTS = Path("tests/unit/algorithms")
COLUMNS = ("collected", "passed", "failed", "errors", "skipped")

SHIM = '''"""nemo_rl.* -> rlnb.nemo.* aliases (written by tools/nemo_unit_tests.py)."""
import importlib, pkgutil, sys, types
import rlnb.nemo

RENAMED = {"batched_data_dict": "nemo_rl.distributed.batched_data_dict"}
RLNB_ONLY = {"batch_stages"}  # rlnb's own module, no NeMo-RL name
ALIASES, FAILED = {}, {}

def _package(name):  # an empty package: its missing submodules raise ModuleNotFoundError
    if name not in sys.modules:
        sys.modules[name] = mod = types.ModuleType(name)
        mod.__path__ = []
        if "." in name:
            setattr(_package(name.rpartition(".")[0]), name.rpartition(".")[2], mod)
    return sys.modules[name]

for info in pkgutil.walk_packages(rlnb.nemo.__path__, "rlnb.nemo.", onerror=lambda name: None):
    short = info.name[len("rlnb.nemo."):]
    if short.split(".")[0] in RLNB_ONLY:
        continue
    alias = RENAMED.get(short, "nemo_rl.algorithms." + short)
    try:
        sys.modules[alias] = mod = importlib.import_module(info.name)
    except Exception as e:  # reported in pytest's header; the alias stays missing
        FAILED[alias] = f"{type(e).__name__}: {e}"
        continue
    setattr(_package(alias.rpartition(".")[0]), alias.rpartition(".")[2], mod)
    ALIASES[alias] = info.name
'''
CONFTEST = '''import nemo_rl_shim

def pytest_report_header(config):
    lines = [f"nemo_rl shim: {len(nemo_rl_shim.ALIASES)} modules bound to rlnb.nemo"]
    return lines + [f"  not bound: {a} ({e})" for a, e in nemo_rl_shim.FAILED.items()]
'''
CHECK = '''import json, sys
sys.path.insert(0, "."); import nemo_rl_shim
out = {}
for key, stmts in json.load(sys.stdin).items():
    out[key] = []
    for stmt in stmts:
        try:
            exec(stmt, {})
        except BaseException as e:
            out[key].append(f"{stmt} -> {type(e).__name__}: {(str(e) + chr(10)).splitlines()[0]}")
print(json.dumps(out))
'''


def module_imports(path):
    """The module-level imports of a test file, one statement per imported name."""
    nodes = ast.parse(path.read_text()).body
    return [f"import {a.name}" for n in nodes if isinstance(n, ast.Import) for a in n.names] + [
        f"from {n.module} import {a.name}" for n in nodes
        if isinstance(n, ast.ImportFrom) and n.module not in (None, "__future__") for a in n.names]


def first_line(elem):
    msg = (elem.get("message") or "").strip()
    if msg and msg != "collection failure":
        return msg.splitlines()[0][:200]
    errs = [line[1:].strip() for line in (elem.text or "").splitlines() if line.startswith("E ")]
    return (errs[-1] if errs else msg)[:200]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("nemo_rl", type=Path, help="a NeMo-RL checkout (holding tests/unit/algorithms)")
    ap.add_argument("--files", nargs="+", help="test files, relative to tests/unit/algorithms")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds for the pytest run")
    args = ap.parse_args()
    src = args.nemo_rl.expanduser() / TESTS
    if not src.is_dir():
        sys.exit(f"{src} not found: pass the root of a NeMo-RL checkout with its tests/")
    files = args.files or sorted(p.name for p in src.glob("test_*.py"))
    python = str(VENV_PY if VENV_PY.exists() else sys.executable)

    tmp = Path(tempfile.mkdtemp(prefix="nemo_unit_"))
    shutil.copytree(src, tmp / TESTS, ignore=shutil.ignore_patterns("__pycache__"))
    for init in ("tests/__init__.py", "tests/unit/__init__.py"):
        (tmp / init).touch()
    (tmp / "nemo_rl_shim.py").write_text(SHIM)
    (tmp / "conftest.py").write_text(CONFTEST)
    (tmp / "pytest.ini").write_text("[pytest]\njunit_family = xunit1\n")
    paths = [str(TESTS / f) for f in files]
    if any(not (tmp / p).is_file() for p in paths):
        sys.exit(f"not in {src}: {', '.join(p for p in paths if not (tmp / p).is_file())}")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONDONTWRITEBYTECODE="1")
    cmd = [python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rf", "--tb=line",
           "--continue-on-collection-errors", "--junitxml=junit.xml", *paths]
    with open(tmp / "pytest.log", "w") as log:
        subprocess.run(cmd, cwd=tmp, env=env, stdout=log, stderr=log, timeout=args.timeout)
    if not (tmp / "junit.xml").exists():
        sys.exit(f"pytest wrote no junit.xml; see {tmp / 'pytest.log'}")

    by_path = dict(zip(paths, files))  # junit xunit1 names each testcase's file
    stats = {f: dict.fromkeys(COLUMNS, 0) for f in files}
    failures, unimported = [], []
    for case in ET.parse(tmp / "junit.xml").iter("testcase"):
        f, cls = by_path.get(case.get("file")), case.get("classname", "")
        if f is None:
            continue
        s, mod = stats[f], paths[files.index(f)][:-3].replace("/", ".")
        bad = next((c for c in case if c.tag in ("failure", "error")), None)
        if bad is not None and bad.get("message") == "collection failure":
            s["errors"] += 1
            unimported.append(f)
            failures.append((f"{f} (collection)", first_line(bad)))
            continue
        s["collected"] += 1
        kind = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), None)
        s[{"failure": "failed", "error": "errors", "skipped": "skipped", None: "passed"}[kind]] += 1
        if bad is not None:
            test_id = "::".join([f, *filter(None, cls[len(mod) + 1:].split(".")), case.get("name")])
            failures.append((test_id, f"{bad.tag}: {first_line(bad)}"))

    total = {k: sum(s[k] for s in stats.values()) for k in COLUMNS}
    width = max(map(len, files)) + 2
    for name, row in [("file", dict(zip(COLUMNS, COLUMNS))), *stats.items(), ("total", total)]:
        print(f"{name:<{width}}" + "".join(f"{row[k]:>10}" for k in COLUMNS))
    if failures:
        print("\nfailing tests (and files that did not import):")
        for test_id, line in failures:
            print(f"  {test_id}: {line}")
    if unimported:
        todo = {f: module_imports(tmp / TESTS / f) for f in unimported}
        res = subprocess.run([python, "-c", CHECK], cwd=tmp, env=env, input=json.dumps(todo),
                             capture_output=True, text=True, timeout=600)
        print("\nimports that fail under the shim (files that did not import):")
        for f, bad in (json.loads(res.stdout) if res.returncode == 0 else {}).items():
            print(f"  {f}:", *(f"    {b}" for b in bad), sep="\n")
        if res.returncode:
            print(f"  (the import check failed: {res.stderr.strip().splitlines()[-1:]})")
    if args.keep:
        print(f"\nkept {tmp} (pytest.log, junit.xml)")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if total["failed"] or total["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
