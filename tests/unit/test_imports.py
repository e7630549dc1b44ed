"""Every module of the package imports on its own, first (an import cycle shows only when
a module of the cycle is the first one imported: a merge of two branches once made
`import sps_operator.controller.policies.borrow` fail while the test suite, importing in another
order, passed)."""

from __future__ import annotations

import ast
import pathlib
import pkgutil
import subprocess
import sys

import sps_operator

SCRIPT = """
import importlib, sys
failed = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "sps_operator" or m.startswith("sps_operator.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {exc!r}")
print("\\n".join(failed))
"""


def test_every_module_imports_first_on_its_own() -> None:
    names = [
        m.name
        for m in pkgutil.walk_packages(sps_operator.__path__, "sps_operator.")
        if not m.name.endswith("__main__")
    ]
    assert len(names) > 50, names
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, *names], capture_output=True, text=True, check=True
    ).stdout
    assert not out.strip(), out


def _imported_modules(path: pathlib.Path, name: str, modules: set[str]) -> set[str]:
    """The package's modules that `name` imports anywhere, functions included (a lazy
    import closes a cycle as well), leaving out `if TYPE_CHECKING:` blocks (never run)."""
    tree = ast.parse(path.read_text())
    type_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in modules else base)
    return (found & modules) - {name}


def test_no_module_imports_one_that_imports_it_back() -> None:
    """A cycle is a knot a newcomer must untie before moving either module (api/crd.py's
    CLI once imported api/docs.py, which imports api/crd.py)."""
    root = pathlib.Path(sps_operator.__path__[0])
    paths = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {name: _imported_modules(path, name, set(paths)) for name, path in paths.items()}
    assert "sps_operator.api.crd" in graph["sps_operator.api.docs"]  # the walk sees imports
    cycles = []
    for start in graph:
        # Breadth-first from what `start` imports: reaching `start` again is a cycle.
        came_from = {name: start for name in graph[start]}
        queue = list(graph[start])
        while queue and start not in came_from:
            name = queue.pop(0)
            for nxt in graph[name] - came_from.keys():
                came_from[nxt] = name
                queue.append(nxt)
        if start in came_from:
            trail = [start]
            while len(trail) == 1 or trail[-1] != start:
                trail.append(came_from[trail[-1]])
            cycles.append(" <- ".join(trail))
    assert not cycles, cycles
