"""`controller/policies/` holds pure decisions only (issue 35 §1): no module there does I/O,
reads a clock, holds a lock or starts a process. The bounded fit lives in `process/bounded.py`
and the Kueue cache in `kube/kueue_cache.py`; this keeps the next one from moving in."""

from __future__ import annotations

import ast
import pathlib
import pkgutil
import subprocess
import sys

from sps_operator.controller import policies

FOLDER = pathlib.Path(policies.__path__[0])
MODULES = sorted(f"{policies.__name__}.{m.name}" for m in pkgutil.iter_modules(policies.__path__))

# What a policy may import directly: pure standard modules, and the pure floors of the
# package (the API's models and words, the table formats and fits, the SGLang reading).
PURE_STDLIB = {
    "__future__", "collections", "collections.abc", "dataclasses", "datetime", "decimal", "enum",
    "fnmatch", "functools", "ipaddress", "itertools", "json", "math", "posixpath", "re",
    "typing", "urllib.parse",
}  # fmt: skip
PURE_PACKAGE = (
    "sps_operator.api",
    "sps_operator.tables",
    "sps_operator.constants",
    "sps_operator.dspark_arith",
    "sps_operator.controller.policies",
    "sps_operator.controller.sglang",
)
# Calls that read a clock, sleep, or touch a file or the terminal.
IMPURE_CALLS = {"open", "print", "input", "now", "utcnow", "today", "sleep", "monotonic"}

# Loaded with a policy (in a fresh interpreter), these would mean it talks to the API,
# the network, another process or the kopf machinery, directly or through a module it uses.
FORBIDDEN_LOADED = (
    "kopf", "kubernetes", "aiohttp", "requests", "urllib3", "prometheus_client",
    "multiprocessing", "subprocess", "concurrent", "asyncio",
    "sps_operator.controller.kube", "sps_operator.controller.process",
    "sps_operator.controller.passes", "sps_operator.controller.capacity",
    "sps_operator.controller.profiling", "sps_operator.controller.rollout",
    "sps_operator.controller.reconcile", "sps_operator.controller.handlers",
    "sps_operator.controller.indexes", "sps_operator.controller.main",
)  # fmt: skip

LOADED_SCRIPT = """
import importlib, json, sys
found = {}
for name in sys.argv[2:]:
    for loaded in [m for m in sys.modules if m.startswith("sps_operator")]:
        del sys.modules[loaded]
    before = set(sys.modules)
    importlib.import_module(name)
    found[name] = sorted(set(sys.modules) - before)
print(json.dumps(found))
"""


def direct_imports(path: pathlib.Path) -> set[str]:
    imported: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            # A relative import stays inside policies/ (the package is flat).
            imported.add((node.module or "") if not node.level else policies.__name__)
    return imported


def impure_calls(path: pathlib.Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if name in IMPURE_CALLS:
            found.append(f"{path.name}:{node.lineno} calls {ast.unparse(func)}()")
    return found


def test_every_policy_imports_only_pure_modules() -> None:
    assert len(MODULES) > 10, MODULES  # the listing found the package
    wrong = sorted(
        f"{path.name} imports {name}"
        for path in sorted(FOLDER.glob("*.py"))
        for name in direct_imports(path)
        if name not in PURE_STDLIB and not name.startswith(PURE_PACKAGE)
    )
    assert not wrong, "policies/ holds pure decisions only (move I/O to kube/ or process/): " + (
        "; ".join(wrong)
    )


def test_no_policy_reads_a_clock_sleeps_or_touches_a_file() -> None:
    wrong = [call for path in sorted(FOLDER.glob("*.py")) for call in impure_calls(path)]
    assert not wrong, wrong


def test_the_checks_see_what_they_forbid(tmp_path: pathlib.Path) -> None:
    impure = tmp_path / "impure.py"
    impure.write_text(
        "import threading\nfrom datetime import datetime\n"
        "def f():\n    return datetime.now(), open('x')\n"
    )
    assert "threading" in direct_imports(impure)
    assert len(impure_calls(impure)) == 2


def test_importing_a_policy_loads_no_client_process_or_kopf() -> None:
    """Each policy imported first in a fresh interpreter: what it pulls in, however
    indirectly, contains no API or HTTP client, no process machinery and no floor above."""
    import json

    out = subprocess.run(
        [sys.executable, "-c", LOADED_SCRIPT, "-", *MODULES],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    loaded = json.loads(out)
    assert set(loaded) == set(MODULES)
    assert "sps_operator.api.spec" in loaded[f"{policies.__name__}.acceptance"]  # it sees loads
    wrong = {
        module: found
        for module, names in loaded.items()
        if (found := sorted(n for n in names if n.startswith(FORBIDDEN_LOADED)))
    }
    assert not wrong, wrong
