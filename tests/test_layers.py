"""The package keeps its layers: front ends -> service -> domain -> base, and no import cycles.

The contracts live in pyproject.toml (``[tool.importlinter]``); this runs them. The cycle
search reads every import statement, those inside functions included: a cycle hidden in a
function still means neither module can be understood, tested or moved without the other.
"""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "deskscribe"


def _graph() -> grimp.ImportGraph:
    return grimp.build_graph(PACKAGE, cache_dir=None)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
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
    return sorted(found)


def _describe(graph: grimp.ImportGraph, cycles: list[list[str]], owner) -> str:
    """Each cycle with the import lines (file:line) that make it up."""
    lines = []
    for members in cycles:
        lines.append("cycle: " + " <-> ".join(members))
        inside = set(members)
        for importer in sorted(graph.modules):
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                a, b = owner(importer), owner(imported)
                if a == b or a not in inside or b not in inside:
                    continue
                for detail in graph.get_import_details(importer=importer, imported=imported):
                    path = importer.replace(".", "/")
                    lines.append(
                        f"    {path}.py:{detail['line_number']}: {detail['line_contents']}"
                        f"  ({a} -> {b})"
                    )
    return "\n".join(lines)


def test_import_contracts_hold():
    """Every contract in pyproject.toml: layers, library storage only, Qt only in gui/,
    no cycles between siblings."""
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from importlinter.cli import lint_imports_command; "
            "sys.exit(lint_imports_command())",
            "--no-cache",
            "--no-logo",
            str(ROOT / "pyproject.toml"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout, run.stdout


def test_no_module_imports_a_module_that_imports_it_back():
    graph = _graph()
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    cycles = _cycles(edges)
    assert not cycles, "import cycles between modules:\n" + _describe(graph, cycles, lambda m: m)


def test_no_import_cycles_between_the_packages():
    """``deskscribe.models`` importing ``deskscribe.speakers`` while ``speakers`` imports
    ``models`` is a cycle even when no single module imports itself back."""
    graph = _graph()

    def package(module: str) -> str:
        return ".".join(module.split(".")[:2])

    edges: dict[str, set[str]] = defaultdict(set)
    for importer in graph.modules:
        edges[package(importer)]
        for imported in graph.find_modules_directly_imported_by(importer):
            if package(imported) != package(importer):
                edges[package(importer)].add(package(imported))
    cycles = _cycles(edges)
    assert not cycles, "import cycles between packages:\n" + _describe(graph, cycles, package)
