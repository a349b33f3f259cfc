"""The package layout: no import cycles between zoflash's modules (function-level imports and
imports only for type checking included: a cycle of types is a knot all the same)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "host" / "zoflash"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(tree: ast.AST, current: str, is_package: bool, modules: dict) -> set[str]:
    """The zoflash modules a module imports when it runs (anywhere in its body)."""
    found: set[str] = set()

    def target(name: str) -> None:
        while name and name not in modules:  # `from pkg import name`: the module, else the package
            name = name.rpartition(".")[0]
        if name:
            found.add(name)

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                target(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the current package
                pkg = current if is_package else current.rpartition(".")[0]
                for _ in range(node.level - 1):
                    pkg = pkg.rpartition(".")[0]
                base = f"{pkg}.{base}" if base else pkg
            for alias in node.names:
                target(f"{base}.{alias.name}")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    found.discard(current)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {
        name: _imports(ast.parse(path.read_text()), name, path.name == "__init__.py", modules)
        for name, path in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_the_scan_sees_function_level_imports():
    graph = import_graph()
    assert "zoflash.spec.errors" not in graph  # (a module that does not exist is never a node)
    assert "zoflash.compiler.tflite_split" in graph["zoflash.targets.neuralart"]  # imported inside a function


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles between zoflash modules:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_layer_contract_holds():
    """import-linter's contracts (.importlinter): the layers follow the pipeline, the reference is an
    independent oracle, the errors import nothing."""
    import shutil
    import subprocess
    import sys

    import pytest

    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter is not installed (pip install -e '.[dev]')")
    root = PACKAGE.parent.parent
    proc = subprocess.run(
        [exe, "--config", str(root / ".importlinter"), "--no-cache"], capture_output=True, text=True, cwd=root
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout
