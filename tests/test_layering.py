"""The package's shape: no import circle, and no method named in the core.

Import-linter's contracts (setup.cfg) keep the sub-packages pointing one way; these tests add
what it cannot say: no module imports itself back through others (imports inside functions and
under ``TYPE_CHECKING`` included), and the runtimes, the loader and the results never single
out a method by its name (a method declares what it needs through ``Algorithm``'s interface).
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import networkx as nx
import pytest

import p2pfed
from p2pfed.algorithms import ALGORITHMS

PACKAGE = Path(p2pfed.__file__).parent
CORE = ("scenario", "engine", "device", "peer", "results", "sweeps")


def import_graph(package: str = "p2pfed") -> nx.DiGraph:
    """Module -> module it imports, for every import statement of the package wherever it stands."""
    graph = grimp.build_graph(package, cache_dir=None)
    edges = nx.DiGraph()
    for module in graph.modules:
        edges.add_node(module)
        edges.add_edges_from((module, imported) for imported in graph.find_modules_directly_imported_by(module))
    return edges


def import_circles(edges: nx.DiGraph) -> list[list[str]]:
    """One circle (a -> b -> ... -> a) per group of modules that import each other."""
    circles = []
    for group in nx.strongly_connected_components(edges):
        if len(group) > 1:
            cycle = nx.find_cycle(edges.subgraph(group))
            circles.append([a for a, _ in cycle] + [cycle[0][0]])
    return sorted(circles)


def test_no_module_imports_itself_back():
    circles = import_circles(import_graph())
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_the_circle_check_sees_imports_inside_functions(tmp_path, monkeypatch):
    package = tmp_path / "circular"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from circular import b\n")
    (package / "b.py").write_text("def late():\n    from circular import a\n    return a\n")
    (package / "c.py").write_text("from circular import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_circles(import_graph("circular")) in (
        [["circular.a", "circular.b", "circular.a"]], [["circular.b", "circular.a", "circular.b"]])


def method_names_in(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every shipped method's name written as a string in ``path``'s code, but
    for docstrings and defaults (a field's, a parameter's, ``.get``'s): the default method may be
    named as such."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant):
            skipped.add(id(body[0].value))
        if isinstance(node, ast.ClassDef):
            skipped.update(id(s.value) for s in node.body if isinstance(s, ast.AnnAssign) and s.value is not None)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            skipped.update(id(d) for d in node.args.defaults + node.args.kw_defaults if d is not None)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and len(node.args) == 2:
            skipped.add(id(node.args[1]))
    return sorted((node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and node.value in ALGORITHMS and id(node) not in skipped)


@pytest.mark.parametrize("package", CORE)
def test_the_core_names_no_method(package):
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}: {name!r}"
             for path in sorted((PACKAGE / package).rglob("*.py")) for line, name in method_names_in(path)]
    assert not found, "a method named in the core (let the method declare it instead):\n" + "\n".join(found)


def test_the_method_name_check_sees_a_comparison_but_not_a_default(tmp_path):
    code = tmp_path / "core.py"
    code.write_text('"""Runs fedsub."""\n'
                    'class Spec:\n    name: str = "fedsub"\n'
                    'def budget(spec, raw, name="fedsub"):\n'
                    '    """Sizes fedsub."""\n'
                    '    default = raw.get("name", "fedsub")\n'
                    '    return spec.name == "fedsub" or name in ("safl", default)\n')
    assert method_names_in(code) == [(7, "fedsub"), (7, "safl")]


MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 60


def test_no_class_or_function_grows_past_what_a_reader_holds():
    """Classes of at most 300 lines and functions of at most 60 (docstrings included), so each
    part of the package can be read whole."""
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            limit = (MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else
                     MAX_FUNCTION_LINES if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None)
            if limit is not None and node.end_lineno is not None and node.end_lineno - node.lineno + 1 > limit:
                too_long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}: "
                                f"{node.end_lineno - node.lineno + 1} lines (at most {limit})")
    assert not too_long, "\n".join(too_long)
