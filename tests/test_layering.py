"""Layers: imports point down (specroof -> measure -> roofline), never in a cycle, and roofline/ never imports torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("roofline", "measure", "specroof")
#: a package may import only the packages listed for it (its own included)
MAY_IMPORT = {"roofline": {"roofline"}, "measure": {"roofline", "measure"}, "specroof": set(PACKAGES)}

ANALYTIC = [
    ["hardware", "list"],
    ["hardware", "show", "a100-sxm-80gb"],
    ["roofline", "--hardware", "a100-sxm-80gb", "--params", "13e9"],
    ["speedup", "--alpha", "0.8", "--c", "0.05"],
    ["plan", "--hardware", "h100-sxm-80gb", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--alpha", "0.7"],
    ["tree", "--acceptance-vector", "{vec}", "--budget", "8"],
    ["report", "--skip-measure", "--hardware", "a100-sxm-80gb", "--out", "{out}"],
    ["acceptance", "show", "vllm-rate:0.7@5"],
    [
        "serve",
        "--hardware",
        "h100-sxm-80gb",
        "--target",
        "llama-3.1-8b",
        "--drafter",
        "model:llama-3.2-1b",
        "--rate",
        "1",
        "--requests",
        "20",
    ],
]


def test_roofline_and_every_analytic_subcommand_never_import_torch(tmp_path):
    vec = tmp_path / "v.json"
    vec.write_text("[0.6, 0.2]")
    code = [
        "import sys, roofline, specroof.cli as cli",
        "from roofline import plot, planner, speculative, trees, gamma_policies; from specroof import report",
        f"for argv in {ANALYTIC!r}:",
        f"    argv = [a.replace('{{vec}}', {str(vec)!r}).replace('{{out}}', {str(tmp_path / 'r')!r}) for a in argv]",
        "    assert cli.main(argv) == 0, argv",
        "    assert 'torch' not in sys.modules, ('torch imported by', argv)",
        "print('ok')",
    ]
    res = subprocess.run([sys.executable, "-c", "\n".join(code)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stderr[-3000:]


# -- the import graph, read from the source (every import statement: module level, in functions, under
# TYPE_CHECKING), so an import moved into a function to dodge a cycle is still an edge ----------------------


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The module an imported dotted name lands in: the longest known prefix."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        candidate = ".".join(parts[:i])
        if candidate in known:
            return candidate
    return None


def import_graph(known: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """module -> the modules of our three packages it imports, anywhere in its source."""
    known = known if known is not None else _modules()
    graph: dict[str, set[str]] = {}
    for mod, path in known.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                # ``from pkg import name``: the submodule pkg.name if there is one, else pkg itself
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            for t in targets:
                hit = _resolve(t, known)
                if hit is not None and hit != mod:
                    edges.add(hit)
        graph[mod] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path (first module repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return [*stack[stack.index(n) :], n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_there_is_no_import_cycle_in_roofline_measure_or_specroof():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_imports_point_down_the_layers():
    wrong = sorted(
        f"{m} imports {n}"
        for m, edges in import_graph().items()
        for n in edges
        if n.split(".")[0] not in MAY_IMPORT[m.split(".")[0]]
    )
    assert not wrong, "; ".join(wrong)


def test_the_graph_sees_imports_inside_functions_and_type_checking_blocks(tmp_path):
    # the checks above are only as good as the graph: a cycle closed by a function-level import, a
    # TYPE_CHECKING import or a relative import must be found, and a clean pair must not be
    pkg = tmp_path / "roofline"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from roofline.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from roofline import a\n    return a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import X\n")
    (pkg / "d.py").write_text("import roofline.c\nX = 1\n")
    (pkg / "e.py").write_text("import numpy\nfrom roofline.a import f\n")
    graph = import_graph({_module_name(p, tmp_path): p for p in sorted(pkg.glob("*.py"))})
    assert graph["roofline.b"] == {"roofline.a"} and graph["roofline.c"] == {"roofline.d"}
    assert graph["roofline.e"] == {"roofline.a"}  # numpy is outside the packages
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and len(cycle) == 3
    assert find_cycle({k: v for k, v in graph.items() if k not in ("roofline.b", "roofline.c")}) is None


#: roofline/'s layer folders, bottom first (docs/architecture.md): a module imports its own folder and those below;
#: the modules at roofline/'s top (the package's names, plot, explore) sit above every folder
ROOFLINE_LAYERS = ("core", "passes", "costing", "speculation", "deploy", "serving", "evidence")


def _roofline_layer(module: str) -> int:
    parts = module.split(".")
    return ROOFLINE_LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in ROOFLINE_LAYERS else len(ROOFLINE_LAYERS)


def test_roofline_folders_import_down_only():
    graph = import_graph()
    wrong = sorted(
        f"{m} imports {n}"
        for m, edges in graph.items()
        if m.startswith("roofline.")
        for n in edges
        if n.startswith("roofline.") and _roofline_layer(n) > _roofline_layer(m)
    )
    assert not wrong, "; ".join(wrong)


def test_the_layering_check_catches_an_upward_import():
    # a core module importing the planner is an upward edge; the check must see it
    assert _roofline_layer("roofline.deploy.planner") > _roofline_layer("roofline.core.errors")
    assert _roofline_layer("roofline.plot") == len(ROOFLINE_LAYERS)


def test_roofline_top_is_its_layers_each_with_a_docstring():
    top = sorted(p.name for p in (ROOT / "roofline").iterdir() if not p.name.startswith((".", "__pycache__")))
    assert len(top) <= 12, top
    for layer in ROOFLINE_LAYERS:
        init = ROOT / "roofline" / layer / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text()))
        # its first line says the layer (serving's goes on to describe the simulator)
        assert doc and doc.splitlines()[0].strip().endswith("."), (
            f"roofline/{layer}/ needs a docstring saying its layer"
        )


def test_every_public_name_and_old_module_name_is_kept():
    import roofline as rf

    for name in rf.__all__ if hasattr(rf, "__all__") else []:
        assert getattr(rf, name) is not None, name
    assert rf.trees.Tree is rf.Tree if hasattr(rf, "Tree") else rf.trees.Tree
    from roofline import planner  # a flat name of before the layer folders

    assert planner.__name__ == "roofline.deploy.planner"


def test_the_flat_import_paths_of_before_the_folders_give_the_same_modules():
    # user code and notebooks written against the flat package: `from roofline.trees import ...` and a submodule of a
    # moved package, in a fresh interpreter so that nothing is imported yet
    code = (
        "import roofline.drafters.round as a, roofline.speculation.drafters.round as b\n"
        "from roofline.trees import optimal_tree\n"
        "from roofline.passtime import crossover_tokens\n"
        "import roofline.speculation.trees as t, roofline.costing.passtime as p\n"
        "assert a is b and optimal_tree is t.optimal_tree and crossover_tokens is p.crossover_tokens\n"
        "assert t.__spec__.name == 'roofline.speculation.trees' and b.__spec__.name.startswith('roofline.speculation')\n"
        "print('ok')"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]
