"""Every module of the package imports on its own, first (an import cycle shows only when
a module of the cycle is the first one imported: a merge of two branches once made
`import sps_operator.controller.borrow` fail while the test suite, importing in another
order, passed)."""

from __future__ import annotations

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
