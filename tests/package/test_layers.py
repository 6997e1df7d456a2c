"""Layers import one way: rlnb.algorithms <- rlnb.engine <- rlnb.run <- widgets, nemo, teach, CLI."""

import ast
from pathlib import Path

from paths import ROOT

# module prefix -> layer; a module may import its own layer and the ones below it only
LAYERS = [
    ("rlnb.config", 0),  # the config base class: below everything
    ("rlnb.algorithms", 1),
    ("rlnb.engine", 2),
    ("rlnb.run", 3),
    ("rlnb.widgets", 4),
    ("rlnb.nemo", 4),
    ("rlnb.cli", 4),
    ("rlnb.cli_notebooks", 4),
    ("rlnb.demo", 4),
    ("rlnb.teach", 4),  # exercises: checks against the algorithms, live runs through rlnb.run
]
JUPYTER = ("ipywidgets", "plotly", "IPython", "ipykernel", "jupyterlab", "papermill", "nbformat",
           "nbclient", "nbconvert")


def layer(module: str) -> int | None:
    for prefix, n in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            return n
    return None


def module_files():
    """(module name, path) of every module of the package, widgets/ as rlnb.widgets."""
    for path in sorted((ROOT / "rlnb").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        yield ".".join(p for p in parts if p != "__init__"), path
    for path in sorted((ROOT / "widgets").rglob("*.py")):
        parts = ("rlnb", *path.relative_to(ROOT).with_suffix("").parts)
        yield ".".join(p for p in parts if p != "__init__"), path


def imports(path: Path) -> list[tuple[int, str]]:
    """Every module an import statement names (top level and inside functions)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def test_no_layer_imports_a_higher_one():
    wrong = []
    for module, path in module_files():
        own = layer(module)
        if own is None:  # rlnb/__init__.py: lazy names only, no imports of higher layers
            continue
        for line, name in imports(path):
            target = layer(name)
            if target is not None and target > own:
                wrong.append(f"{path.relative_to(ROOT)}:{line} ({module}, layer {own}) imports "
                             f"{name} (layer {target})")
    assert not wrong, "\n".join(wrong)


def test_the_core_library_never_imports_jupyter():
    wrong = []
    for module, path in module_files():
        if module.startswith("rlnb.widgets"):
            continue
        for line, name in imports(path):
            if name.split(".")[0] in JUPYTER:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    # the notebook runner drives papermill: its own layer, imported only by `rlnb run`/`sweep`;
    # progress.py touches IPython.display only once tqdm has picked its notebook bar (its
    # docstring, choice 2), so that a saved notebook shows where each bar ended
    allowed = ("rlnb/run/notebooks.py", "rlnb/run/sweep.py", "rlnb/run/sweep_summary.py",
               "rlnb/run/launch.py", "rlnb/engine/progress.py")
    assert [w for w in wrong if not w.startswith(allowed)] == []


def test_the_layer_check_catches_an_upward_import(tmp_path):
    """The check itself: an engine module that imports the run layer is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from rlnb.run.master_config import load_config\n")
    assert [(n, layer(n)) for _, n in imports(bad)] == [("rlnb.run.master_config", 3)]
    assert layer("rlnb.engine.trainers.grpo") == 2 < 3


# --------------------------------------------------------------------------- import cycles
def import_graph(files=None) -> dict[str, set[str]]:
    """module -> the package modules it imports (top level and inside functions). ``from a.b
    import c`` is an edge to ``a.b.c`` when that is a module, else to ``a.b``."""
    files = dict(module_files() if files is None else files)
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files
                         else node.module for a in node.names]
            graph[module].update(n for n in names if n in files and n != module)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycle_inside_the_package():
    """No module of rlnb/ or widgets/ reaches itself through imports, even through an import
    inside a function (which only hides a cycle until that function runs)."""
    cycles = import_cycles(import_graph())
    assert cycles == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_catches_a_cycle_closed_inside_a_function(tmp_path):
    a, b, c = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    a.write_text("import rlnb.b\n")
    b.write_text("def f():\n    from rlnb.c import g\n")
    c.write_text("from rlnb import a\n")
    graph = import_graph({"rlnb.a": a, "rlnb.b": b, "rlnb.c": c})
    assert graph == {"rlnb.a": {"rlnb.b"}, "rlnb.b": {"rlnb.c"}, "rlnb.c": {"rlnb.a"}}
    assert import_cycles(graph) == [["rlnb.a", "rlnb.b", "rlnb.c"]]
    c.write_text("")
    assert import_cycles(import_graph({"rlnb.a": a, "rlnb.b": b, "rlnb.c": c})) == []
