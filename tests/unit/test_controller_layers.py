"""The controller's floors (issue 22 item 5, docs/architecture.md): each subpackage imports
only from the floors under it, so a newcomer can read one floor knowing only those below.
The walk reads every import, in functions and `if TYPE_CHECKING:` blocks too (an arrow
that only the type checker follows still says a policy knows the steps above it)."""

from __future__ import annotations

import ast
import importlib
import pathlib

import sps_operator

PACKAGE = pathlib.Path(sps_operator.__path__[0])
CONTROLLER = "sps_operator.controller"

# Bottom to top; a module may import from its own floor and the ones before it.
FLOORS = (
    "sglang", "policies", "kube", "process", "passes", "capacity", "profiling", "rollout",
    "reconcile", "wiring",
)  # fmt: skip
# The two reconcilers of a pass meet only in `status` (and the orchestrator above them),
# and reach the GPU capacity only through the interface the pass hands them.
RECONCILERS = ("profiling", "rollout")
CAPACITY_INSIDES = ("capacity", "policies.borrow", "policies.kueue", "policies.cost")
WIRING = "wiring"  # the modules directly in controller/: kopf, the process, the CLI's
ENTRY_POINT = "sps_operator.controller.main"  # `sps-operator run` (sps_operator/cli.py)


def floor_of(module: str) -> str | None:
    """The floor of a controller module (None outside the controller)."""
    if module != CONTROLLER and not module.startswith(CONTROLLER + "."):
        return None
    parts = module.split(".")[2:]
    return parts[0] if len(parts) > 1 else WIRING


def imports_of(source: str, module: str) -> set[str]:
    """The sps_operator modules (or packages) `module` imports, anywhere in it."""
    package = module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("sps_operator"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            if not base.startswith("sps_operator"):
                continue
            for alias in node.names:
                # `from pkg import module` names the module; `from module import name`
                # names the module itself.
                child = f"{base}.{alias.name}"
                found.add(
                    child
                    if (PACKAGE.parent / (child.replace(".", "/") + ".py")).is_file()
                    or (PACKAGE.parent / child.replace(".", "/")).is_dir()
                    else base
                )
    return found  # fmt: skip


def package_imports() -> dict[str, set[str]]:
    graph = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        graph[name] = imports_of(path.read_text(), name)
    return graph


def upward_arrows(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a controller floor into one above it."""
    wrong = []
    for module, imported in graph.items():
        floor = floor_of(module)
        if floor is None or module.endswith(".__init__"):
            continue
        for target in imported:
            target_floor = floor_of(target)
            if target_floor is None or target == CONTROLLER:
                continue
            if FLOORS.index(target_floor) > FLOORS.index(floor):
                wrong.append(f"{module} ({floor}) imports {target} ({target_floor})")
    return sorted(wrong)


def test_every_controller_module_is_on_a_known_floor() -> None:
    floors = {floor_of(m) for m in package_imports() if floor_of(m) is not None}
    assert floors == set(FLOORS), f"a new subpackage needs a place in FLOORS: {floors}"


def test_no_floor_imports_one_above_it() -> None:
    graph = package_imports()
    # The walk sees arrows, across floors and inside one.
    assert f"{CONTROLLER}.profiling.run" in graph[f"{CONTROLLER}.profiling.reconciler"]
    assert f"{CONTROLLER}.kube.client" in graph[f"{CONTROLLER}.passes.state"]
    assert not upward_arrows(graph), "\n".join(upward_arrows(graph))


def reconciler_arrows(graph: dict[str, set[str]]) -> list[str]:
    """Every import from one reconciler into the other, or into the capacity's insides."""
    wrong = []
    for module, imported in graph.items():
        floor = floor_of(module)
        if floor not in RECONCILERS:
            continue
        for target in imported:
            inside = target.removeprefix(CONTROLLER + ".")
            other = floor_of(target) in RECONCILERS and floor_of(target) != floor
            if other or any(inside == c or inside.startswith(c + ".") for c in CAPACITY_INSIDES):
                wrong.append(f"{module} imports {target}")
    return sorted(wrong)


def test_the_reconcilers_import_neither_each_other_nor_the_capacity_insides() -> None:
    graph = package_imports()
    assert f"{CONTROLLER}.passes.state" in graph[f"{CONTROLLER}.rollout.apply"]
    assert not reconciler_arrows(graph), "\n".join(reconciler_arrows(graph))
    # The check itself: a rollout step calling into capacity, a run publishing by the
    # rollout's module, a profiling step reading Kueue's policy.
    planted = {
        f"{CONTROLLER}.rollout.apply": imports_of(
            "from sps_operator.controller.capacity.runs import follow_rollout_borrow\n"
            "from sps_operator.controller.profiling.publish import load_table\n",
            f"{CONTROLLER}.rollout.apply",
        ),
        f"{CONTROLLER}.profiling.run": imports_of(
            "from sps_operator.controller.policies.kueue import run_limit\n",
            f"{CONTROLLER}.profiling.run",
        ),
    }
    assert reconciler_arrows(planted) == [
        f"{CONTROLLER}.profiling.run imports {CONTROLLER}.policies.kueue",
        f"{CONTROLLER}.rollout.apply imports {CONTROLLER}.capacity.runs",
        f"{CONTROLLER}.rollout.apply imports {CONTROLLER}.profiling.publish",
    ]


def test_policies_and_sglang_import_no_pass_kube_or_process() -> None:
    """Said on its own because it is the rule that keeps policies pure."""
    graph = package_imports()
    impure = sorted(
        f"{module} imports {target}"
        for module, imported in graph.items()
        if floor_of(module) in {"policies", "sglang"}
        for target in imported
        if floor_of(target) in FLOORS[FLOORS.index("kube") :] and target != CONTROLLER
    )
    assert not impure, impure


def test_only_the_entry_point_imports_the_kopf_handlers_and_nothing_imports_main() -> None:
    graph = package_imports()
    handlers = f"{CONTROLLER}.handlers"
    assert {m for m, imported in graph.items() if handlers in imported} == {ENTRY_POINT}
    # The one module that may import `main`: the bed's entry point with the test-only hooks.
    importers = [m for m, imported in graph.items() if ENTRY_POINT in imported]
    assert importers in ([], [f"{CONTROLLER}.testing_main"]), importers
    # The command line reaches `main` by name, lazily (the plugin and profiler must not
    # load kopf): that name is the image's entry point, `sps-operator run`.
    from sps_operator.cli import SUBCOMMANDS

    assert SUBCOMMANDS["run"][0] == ENTRY_POINT
    for module, function, _ in SUBCOMMANDS.values():
        assert callable(getattr(importlib.import_module(module), function)), module


def test_the_walk_finds_an_upward_arrow() -> None:
    """The check itself: a policy that imports a step, a kube module that imports the
    wiring (in a TYPE_CHECKING block), relative and `from package import module` forms."""
    graph = {
        f"{CONTROLLER}.policies.triggers": imports_of(
            "from sps_operator.controller.passes import state\n", f"{CONTROLLER}.policies.triggers"
        ),
        f"{CONTROLLER}.kube.names": imports_of(
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from ..handlers import release_or_retry\n",
            f"{CONTROLLER}.kube.names",
        ),
        f"{CONTROLLER}.profiling.run": imports_of(
            "from sps_operator.controller.policies import acceptance\n",
            f"{CONTROLLER}.profiling.run",
        ),
    }
    assert upward_arrows(graph) == [
        f"{CONTROLLER}.kube.names (kube) imports {CONTROLLER}.handlers (wiring)",
        f"{CONTROLLER}.policies.triggers (policies) imports {CONTROLLER}.passes.state (passes)",
    ]
