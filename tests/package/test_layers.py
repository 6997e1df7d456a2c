"""Layers import one way (rlnb.algorithms <- rlnb.engine <- rlnb.run <- widgets, nemo, teach, CLI),
with no cycle, the folders of the engine and the run layer in a straight stack, and no module
importing another's private names."""

import ast
from pathlib import Path

from paths import ROOT

# module prefix -> layer; a module may import its own layer and the ones below it only
LAYERS = [
    ("rlnb.config", 0),  # the config base class: below everything
    ("rlnb.registry", 0),  # the rule every registry of named parts follows
    ("rlnb.threads", 0),  # how torch's threads wait, set by `import rlnb` before torch loads
    ("rlnb.user_files", 0),  # a user's files read strictly: paths checked, YAML keys once each
    ("rlnb.algorithms", 1),
    ("rlnb.engine", 2),
    ("rlnb.run", 3),
    ("rlnb.widgets", 4),
    ("rlnb.nemo", 4),
    ("rlnb.cli", 4),  # the package and its command modules (rlnb.cli.*)
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
    allowed = ("rlnb/run/notebooks/execute.py", "rlnb/run/experiments/sweep.py",
               "rlnb/run/experiments/sweep_summary.py", "rlnb/run/pools/launch.py",
               "rlnb/engine/runtime/progress.py")
    assert [w for w in wrong if not w.startswith(allowed)] == []


def test_the_layer_check_catches_an_upward_import(tmp_path):
    """The check itself: an engine module that imports the run layer is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from rlnb.run.config.master_config import load_config\n")
    assert [(n, layer(n)) for _, n in imports(bad)] == [("rlnb.run.config.master_config", 3)]
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


# --------------------------------------------------------------------------- folders
STACKED = ("rlnb.engine", "rlnb.run")  # layers whose folders import in a straight stack


def folder_graph(graph: dict[str, set[str]], layer: str) -> dict[str, set[str]]:
    """``graph`` collapsed to the children of ``layer`` (``rlnb.run.pools.launch`` ->
    ``rlnb.run.pools``); the layer's own ``__init__`` and imports outside it are left out."""
    depth = layer.count(".") + 2

    def folder(module: str) -> str | None:
        return ".".join(module.split(".")[:depth]) if module.startswith(layer + ".") else None

    folders: dict[str, set[str]] = {}
    for module, deps in graph.items():
        own = folder(module)
        if own is not None:
            folders.setdefault(own, set()).update({folder(d) for d in deps} - {None, own})
    return folders


def test_the_folders_of_the_engine_and_the_run_layer_form_a_straight_stack():
    """Within ``rlnb.engine`` and ``rlnb.run``, no two folders import each other, even through
    other folders: each job's folder sits on the ones it needs (CONTRIBUTING.md, Where files
    go)."""
    graph = import_graph()
    for layer in STACKED:
        cycles = import_cycles(folder_graph(graph, layer))
        assert cycles == [], f"{layer}: folders in a cycle:\n" + "\n".join(
            " <-> ".join(c) for c in cycles)


def test_the_folder_check_catches_two_folders_importing_each_other(tmp_path):
    files = {}
    for name, text in (("rlnb.run.a", ""), ("rlnb.run.a.x", "from rlnb.run.b.y import f\n"),
                       ("rlnb.run.b", ""), ("rlnb.run.b.y", "def f():\n    import rlnb.run.a.z\n"),
                       ("rlnb.run.a.z", "")):
        files[name] = tmp_path / f"{name}.py"
        files[name].write_text(text)
    folders = folder_graph(import_graph(files), "rlnb.run")
    assert folders == {"rlnb.run.a": {"rlnb.run.b"}, "rlnb.run.b": {"rlnb.run.a"}}
    assert import_cycles(folders) == [["rlnb.run.a", "rlnb.run.b"]]


# --------------------------------------------------------------------------- private names
def is_private(name: str) -> bool:
    """``_x`` is a module's own; a dunder (``__version__``) is not private."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(module: str, path: Path) -> list[tuple[int, str]]:
    """``(line, "a.b._x")`` for every private name of another package module that ``path``
    (the module ``module``) takes: ``from a.b import _x``, or ``m._x`` after ``import a.b as
    m`` / ``from a import b as m`` / ``import a.b`` (then ``a.b._x``)."""
    tree = ast.parse(path.read_text())
    ours = ("rlnb", "widgets")
    found: list[tuple[int, str]] = []
    aliases: dict[str, str] = {}  # local name -> the module (or package attribute) it names
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in ours or node.module == module:
                continue
            for a in node.names:
                if is_private(a.name):
                    found.append((node.lineno, f"{node.module}.{a.name}"))
                else:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in ours:
                    if a.asname:
                        aliases[a.asname] = a.name
                    else:
                        aliases[a.name.split(".")[0]] = a.name.split(".")[0]
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and is_private(node.attr)):
            continue
        chain, value = [], node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if isinstance(value, ast.Name) and value.id in aliases:
            target = ".".join([aliases[value.id], *reversed(chain)])
            if target != module:
                found.append((node.lineno, f"{target}.{node.attr}"))
    return found


def test_no_module_imports_another_modules_private_name():
    """A name that starts with ``_`` stays in its module: a sibling that needs it makes it
    the folder's API, a public name (CONTRIBUTING.md, Where files go)."""
    wrong = [f"{path.relative_to(ROOT)}:{line} uses {name}"
             for module, path in module_files() for line, name in private_imports(module, path)]
    assert wrong == [], "\n".join(wrong)


def test_the_private_name_check_catches_both_forms(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from rlnb.run.notebooks.execute import _helper, run_notebook\n"
                   "import rlnb.run.pools.executors as ex\n"
                   "from rlnb.engine import data\n"
                   "import rlnb.algorithms.advantages\n"
                   "from rlnb import __version__\n"
                   "def f():\n"
                   "    return ex._tail(), data.batches._x, rlnb.algorithms.advantages._y, "
                   "ex.Point, _own\n")
    assert sorted(private_imports("rlnb.engine.bad", bad)) == [
        (1, "rlnb.run.notebooks.execute._helper"), (7, "rlnb.algorithms.advantages._y"),
        (7, "rlnb.engine.data.batches._x"), (7, "rlnb.run.pools.executors._tail")]
    # a module's own private names, reached through its own full name, are its own
    own = tmp_path / "own.py"
    own.write_text("import rlnb.engine.own\nrlnb.engine.own._x\nfrom rlnb.engine.own import _y\n")
    assert private_imports("rlnb.engine.own", own) == []
