"""The one list of reasons (api/reasons.py) is the only place they are spelled: every
CamelCase word the controller and the plugin write is a reason, an event reason, a condition
type, or a word of another vocabulary declared here; no module retypes a listed reason; and
every listed reason is set somewhere. (What the passes actually write is checked at run time
by the autouse fixture in tests/unit/conftest.py.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from sps_operator.api import reason_registry as registry
from sps_operator.api import reasons as R

PACKAGE = Path(R.__file__).resolve().parents[1]
CONTROLLER = PACKAGE / "controller"
PLUGIN = PACKAGE / "plugin"
DOCS = PACKAGE.parents[1] / "docs"
CAMEL = re.compile(r"^[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)*$")

# CamelCase strings of the controller that are not the operator's reasons: Kubernetes
# kinds, values and condition types of other objects, selector operators, event types.
KUBERNETES_WORDS = {
    "Always", "Never", "Apply", "Background", "ClusterIP", "ExternalName", "RuntimeDefault",
    "ConfigMap", "Deployment", "Event", "Job", "Lease", "PodDisruptionBudget", "Role",
    "RoleBinding", "Service", "ServiceAccount", "HorizontalPodAutoscaler", "Workload",
    "Complete", "Failed", "FailureTarget", "SuccessCriteriaMet", "JobFailed", "Succeeded",
    "PodScheduled", "Progressing", "ProgressDeadlineExceeded", "True", "False",
    "Exists", "DoesNotExist", "In", "NotIn", "Gt", "Lt",
    "Normal", "Warning",
    "Recreate", "ReplicaFailure", "Secret", "SpsProfile", "Pod", "List", "LocalQueue",
    "FallbackToLogsOnError", "Evicted", "QuotaReserved", "Admitted", "DeactivationTarget",
    "Accept", "BearerToken",  # an HTTP header and the client's auth setting (kube/rest.py)
    "InputError",  # `sps-operator fingerprint`'s own error label, never in status
    # the kubelet's container states that keep a pod from ever becoming ready
    "CrashLoopBackOff", "ErrImagePull", "ImagePullBackOff", "InvalidImageName",
    "CreateContainerConfigError", "CreateContainerError", "RunContainerError",
    "AnnotateOnly",  # a rollout mode, in a message
    "GatesPassed",  # a passed gate's verdict, never written to status
    # a Job's API defaults and quantity suffixes (policies/job_adoption.py)
    "NonIndexed", "TerminatingOrFailed", "ClusterFirst", "File", "IfNotPresent",
    "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
    "StatefulSet", "LeaderWorkerSet", "OnDelete", "UpdateInProgress",  # workload kinds, fields
    # PersistentVolumeClaim access modes, and a pod phase
    "ReadWriteOnce", "ReadWriteOncePod", "ReadOnlyMany", "ReadWriteMany", "Running",
    # an Indexed Job (a multi-node clone), a headless Service's clusterIP, a pod condition
    "Indexed", "None", "DisruptionTarget",
    # the plugin's: spec values, target states, a condition status, the CRD's plural, and
    # matplotlib's backend and colours
    "BorrowReplica", "Wait", "Additive", "Diagonal", "Live", "Rolling", "Refused", "Pending",
    "Unknown", "SpsProfiles", "Agg", "C0", "C1",
}  # fmt: skip

# Words of another vocabulary that happen to equal a listed reason or condition type.
OTHER_VOCABULARIES = {
    ("api/status.py", "Stale"), ("api/status.py", "NoTable"),  # TargetState
    ("api/status.py", "Waiting"),
    ("api/crd.py", "Ready"),  # a printer column's name
    ("controller/policies/placement.py", "Ready"),  # the Pod condition
}  # fmt: skip


def string_constants(path: Path) -> list[str]:
    """The string constants of a module, its docstrings excepted."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def camel_words(*folders: Path) -> dict[str, set[str]]:
    """Every CamelCase string constant of the folders' modules -> their files."""
    found: dict[str, set[str]] = {}
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):  # the controller's floors too
            for value in string_constants(path):
                if CAMEL.match(value):
                    found.setdefault(value, set()).add(str(path.relative_to(folder.parent)))
    return found


KNOWN = set(registry.REASONS) | set(R.EVENT_REASONS) | set(R.CONDITION_TYPES)
# The name of each listed word in api/reasons.py (its constant).
CONSTANT_OF = {
    value: name
    for name, value in vars(R).items()
    if name.isupper() and isinstance(value, str) and value in KNOWN
}


def test_every_word_the_controller_and_plugin_write_is_in_the_list() -> None:
    words = camel_words(CONTROLLER, PLUGIN)
    assert len(words) > 50, "the scan found almost nothing: it no longer reads the modules"
    unknown = {w: sorted(files) for w, files in words.items() if w not in KNOWN | KUBERNETES_WORDS}
    assert not unknown, (
        f"add these to sps_operator/api/reasons.py (and an entry in api/reasons_*.py), or to "
        f"KUBERNETES_WORDS here if they are not the operator's reasons: {unknown}"
    )


def test_no_module_retypes_a_listed_word() -> None:
    """A reason is spelled once, in api/reasons.py; modules use its constant."""
    retyped = sorted(
        (str(path.relative_to(PACKAGE)), value)
        for path in PACKAGE.rglob("*.py")
        if path != Path(R.__file__).resolve()
        for value in string_constants(path)
        if value in KNOWN
    )
    assert len(CONSTANT_OF) == len(KNOWN), "every listed word has a constant"
    extra = sorted(set(retyped) - OTHER_VOCABULARIES)
    assert not extra, f"use the constants of sps_operator/api/reasons.py: {extra}"


def test_every_listed_reason_is_set_by_the_controller() -> None:
    used: set[str] = set()
    for path in CONTROLLER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name):
                used.add(node.id)
            elif isinstance(node, ast.Attribute):
                used.add(node.attr)
    listed = set(registry.REASONS) | set(R.EVENT_REASONS)
    unused = sorted(r for r in listed if CONSTANT_OF[r] not in used)
    assert not unused, f"listed in api/reasons.py but set nowhere: {unused}"


def test_no_word_is_both_a_reason_and_a_kubernetes_word() -> None:
    assert not KNOWN & KUBERNETES_WORDS
    # An event reason that is also a condition reason is listed once, as a reason.
    assert not set(registry.REASONS) & set(R.EVENT_REASONS)


def test_every_reason_says_what_it_means() -> None:
    for name, reason in registry.REASONS.items():
        assert CAMEL.match(name), name
        assert reason.meaning and len(reason.meaning) <= 100, name
    for type_, meaning in R.CONDITION_TYPES.items():
        assert meaning, type_


def doc_section(doc: str, heading: str) -> str:
    text = (DOCS / doc).read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


def test_the_operator_docs_name_every_reason() -> None:
    conditions = doc_section("operator.md", "Conditions")
    events = doc_section("operator.md", "Events (constant reasons)")
    missing = [r for r in registry.REASONS if f"`{r}`" not in conditions]
    missing += [r for r in R.EVENT_REASONS if f"`{r}`" not in events]
    missing += [c for c in R.CONDITION_TYPES if c not in (R.RECONCILING, R.STALLED)
                and f"| `{c}` |" not in conditions]  # fmt: skip
    assert not missing, f"docs/operator.md (Conditions, Events) does not name: {missing}"
