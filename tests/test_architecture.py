"""The layering docs/architecture.md describes, read from the source with ast (nothing is imported): no import
cycle between modules, the packages generation and export not importing each other both ways, tasks not
importing scoring, and functions short enough to read on one screen (80 lines in nmt_toolkit/, 60 in cli/,
where a program should only parse options and call the library). Imports inside functions count: they run
too, and a cycle hidden in a function is still a cycle."""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCES = (("nmt_toolkit", "nmt_toolkit"), ("cli", "nmt_toolkit.cli"))  # folder, package (setup.py's package_dir)
MAX_LINES = {"nmt_toolkit": 80, "cli": 60}


def _modules() -> dict[str, pathlib.Path]:
    mods = {}
    for folder, package in SOURCES:
        for path in (ROOT / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            mods[".".join([package, *parts])] = path
    return mods


def _imported(node: ast.AST, mods: dict) -> list[str]:
    """The project modules an import statement names: ``from a.b import c`` is ``a.b.c`` when that is a
    module, else ``a.b``."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in mods]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in mods]
        if subs:
            return subs
        return [node.module] if node.module in mods else []
    return []


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            graph[name].update(m for m in _imported(node, mods) if m != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(_package(a), _package(b)) for a, deps in graph.items() for b in deps if _package(a) != _package(b)}


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules():
    assert cycles(import_graph()) == []


def test_no_import_cycle_between_packages():
    """Each package sits on one floor: the checkpoint format below everything that reads checkpoints, the
    importers below loading.py, the exporters above it, the training run above decoding."""
    edges = package_edges(import_graph())
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    assert cycles(graph) == []


def test_the_training_run_is_imported_only_by_the_programs_and_itself():
    """training/ is the top of the library: what other packages need of a run (the checkpoint file, the model
    folder) lives below it."""
    importers = sorted({a for a, b in package_edges(import_graph()) if b == "training"})
    assert importers == ["cli"]


def test_generation_and_export_do_not_import_each_other_both_ways():
    """generation may use export (CTranslate2 decodes a checkpoint exported on the fly); an exporter needs
    only models, which loading.py builds, so export never imports generation."""
    assert ("export", "generation") not in package_edges(import_graph())


def test_tasks_do_not_import_scoring():
    assert ("tasks", "scoring") not in package_edges(import_graph())


def long_functions(folder: str) -> list[str]:
    out = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES[folder]:
                    out.append(f"{path.relative_to(ROOT)}::{node.name} ({lines} lines)")
    return out


@pytest.mark.parametrize("folder", sorted(MAX_LINES))
def test_no_function_is_longer_than_a_screen(folder):
    assert long_functions(folder) == []


def test_no_program_or_benchmark_imports_a_private_name_of_a_program():
    """What two programs share lives in a public module (cli/common.py, cli/decoding.py) or the library."""
    found = []
    for folder in ("cli", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nmt_toolkit.cli."):
                    found += [f"{path.relative_to(ROOT)}: {node.module}.{a.name}" for a in node.names
                              if a.name.startswith("_")]
    assert found == []


def test_outputs_are_replaced_and_removed_only_by_the_output_service():
    """Removing a folder, renaming onto an output and changing its mode happen in nmt_toolkit/outputs.py
    alone, where the rules that keep a user's files safe live: nowhere else in the library or the programs."""
    import re

    pattern = re.compile(r"\b(rmtree|os\.replace|os\.rename|os\.chmod|os\.removedirs)\b")
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}" for path in _modules().values()
             if path != ROOT / "nmt_toolkit" / "outputs.py"
             for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []


def _names_a_task(node: ast.AST) -> bool:
    """Whether an expression is a task or reaches into one: ``task``, ``self.task``, ``translator.task.cfg``."""
    while isinstance(node, ast.Attribute):
        if node.attr == "task":
            return True
        node = node.value
    return isinstance(node, ast.Name) and node.id == "task"


def task_probes(source: str) -> list[str]:
    """``hasattr(task, …)`` and ``getattr(task, …, default)`` in ``source``: asking whether a task has a feature
    instead of calling the hook every task declares."""
    return [f"{node.lineno}: {ast.unparse(node)}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args
            and (node.func.id == "hasattr" or (node.func.id == "getattr" and len(node.args) == 3))
            and _names_a_task(node.args[0])]


def test_the_probe_finder_finds_a_probe():
    source = ("a = hasattr(self.task, 'langs')\nb = getattr(task.cfg, 'decoder_langtok', False)\n"
              "c = getattr(task.cfg, 'source_lang')\nd = hasattr(dataset, 'split')\ne = hasattr(task_cfg, 'data')\n")
    assert task_probes(source) == ["1: hasattr(self.task, 'langs')", "2: getattr(task.cfg, 'decoder_langtok', False)"]


def test_no_program_or_library_module_outside_tasks_probes_a_task_for_a_feature():
    """What a multilingual task adds (language tokens, tagging, direction splits, its record) is declared on
    TranslationTask with neutral answers (docs/plugins.md), so every caller asks every task the same way."""
    tasks = ROOT / "nmt_toolkit" / "tasks"
    found = [f"{path.relative_to(ROOT)}:{probe}" for path in sorted(_modules().values()) if tasks not in path.parents
             for probe in task_probes(path.read_text())]
    assert found == []
