"""The one list of reasons (api/reasons.py) is complete: every CamelCase word the controller
writes is a reason, an event reason, a condition type, or a Kubernetes word declared here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from sps_operator.api import reasons as R

CONTROLLER = Path(R.__file__).resolve().parents[1] / "controller"
CAMEL = re.compile(r"^[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)*$")

# CamelCase strings of the controller that are not the operator's reasons: Kubernetes
# kinds, values and condition types of other objects, selector operators, event types.
KUBERNETES_WORDS = {
    "Always", "Never", "Apply", "Background", "ClusterIP", "ExternalName", "RuntimeDefault",
    "ConfigMap", "Deployment", "Event", "Job", "Lease", "PodDisruptionBudget", "Role",
    "RoleBinding", "Service", "ServiceAccount",
    "Complete", "Failed", "FailureTarget", "SuccessCriteriaMet", "JobFailed", "Succeeded",
    "PodScheduled", "Progressing", "ProgressDeadlineExceeded", "True", "False",
    "Exists", "DoesNotExist", "In", "NotIn", "Gt", "Lt",
    "Normal", "Warning",
    "Recreate", "ReplicaFailure", "Secret", "SpsProfile", "Pod", "List", "LocalQueue",
    "FallbackToLogsOnError", "Evicted", "QuotaReserved", "Admitted", "DeactivationTarget",
    "Accept", "BearerToken",  # an HTTP header and the client's auth setting (kube.py)
    "InputError",  # `sps-operator fingerprint`'s own error label, never in status
    # the kubelet's container states that keep a pod from ever becoming ready
    "CrashLoopBackOff", "ErrImagePull", "ImagePullBackOff", "InvalidImageName",
    "CreateContainerConfigError", "CreateContainerError", "RunContainerError",
    "AnnotateOnly",  # a rollout mode, in a message
    "GatesPassed",  # a passed gate's verdict, never written to status
    # PersistentVolumeClaim access modes, and a pod phase
    "ReadWriteOnce", "ReadWriteOncePod", "ReadOnlyMany", "ReadWriteMany", "Running",
}  # fmt: skip


def controller_words() -> dict[str, set[str]]:
    """Every CamelCase string constant of the controller (docstrings excepted) -> files."""
    found: dict[str, set[str]] = {}
    for path in sorted(CONTROLLER.glob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and CAMEL.match(node.value)
            ):
                found.setdefault(node.value, set()).add(path.name)
    return found


KNOWN = set(R.REASONS) | set(R.EVENT_REASONS) | set(R.CONDITION_TYPES)


def test_every_reason_the_controller_writes_is_in_the_list() -> None:
    words = controller_words()
    assert len(words) > 50, "the scan found almost nothing: it no longer reads the controller"
    unknown = {w: sorted(files) for w, files in words.items() if w not in KNOWN | KUBERNETES_WORDS}
    assert not unknown, (
        f"add these to sps_operator/api/reasons.py (with what they mean), or to "
        f"KUBERNETES_WORDS here if they are not the operator's reasons: {unknown}"
    )


def test_every_listed_reason_is_used() -> None:
    words = controller_words()
    unused = (set(R.REASONS) | set(R.EVENT_REASONS)) - set(words)
    assert not unused, f"listed in api/reasons.py but written nowhere: {sorted(unused)}"


def test_no_word_is_both_a_reason_and_a_kubernetes_word() -> None:
    assert not KNOWN & KUBERNETES_WORDS
    # An event reason that is also a condition reason is listed once, as a reason.
    assert not set(R.REASONS) & set(R.EVENT_REASONS)


def test_every_reason_says_what_it_means() -> None:
    for name, reason in R.REASONS.items():
        assert CAMEL.match(name), name
        assert reason.meaning and len(reason.meaning) <= 100, name
    for type_, meaning in R.CONDITION_TYPES.items():
        assert meaning, type_
