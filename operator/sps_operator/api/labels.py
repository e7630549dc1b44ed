"""Label, annotation and key names shared by the operator, the profiler and the plugin
(and the size bound of a table ConfigMap's meta.json, which the operator and the plugin
both read).

One place, imported by every part that reads or writes these objects, so the plugin
never has to import the controller and the two sides cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sps_operator.constants import LABEL_PREFIX

# Labels on everything the operator creates.
LABEL_PROFILE = f"{LABEL_PREFIX}/profile"  # the SpsProfile's name (names are ≤ 40 characters)
LABEL_PROFILE_UID = f"{LABEL_PREFIX}/profile-uid"  # what selections use: names can be reused
LABEL_COMPONENT = f"{LABEL_PREFIX}/component"
LABEL_RUN = f"{LABEL_PREFIX}/run"
LABEL_GPU = f"{LABEL_PREFIX}/gpu-product"
LABEL_FINGERPRINT = f"{LABEL_PREFIX}/fingerprint"
LABEL_TABLE_HASH = f"{LABEL_PREFIX}/table-hash"
LABEL_RELEASED = f"{LABEL_PREFIX}/released"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "sps-operator"

# The operator's own pods carry these (the chart's pod template): `kubectl sps version`
# finds them by this selector and reads the version from the image they run.
OPERATOR_POD_SELECTOR = (
    "app.kubernetes.io/part-of=sps-operator,app.kubernetes.io/component=operator"
)
OPERATOR_CONTAINER = "operator"

COMPONENT_TABLE = "table"
COMPONENT_SEED = "seed-table"
COMPONENT_RESULT = "result"
COMPONENT_JOB = "profiling-job"
COMPONENT_POD = "profiling-pod"
COMPONENT_RBAC = "profiler-rbac"
COMPONENT_GROUP_SERVICE = "group-service"  # a multi-node clone's headless Service
COMPONENT_STABLE = "stable-table"

# Annotations.
ANNOTATION_TABLE_HASH = f"{LABEL_PREFIX}/table-hash"  # pod template and stable ConfigMap
ANNOTATION_TABLE = f"{LABEL_PREFIX}/table"  # pod template: the table ConfigMap it runs
ANNOTATION_REPROFILE = f"{LABEL_PREFIX}/reprofile"  # on the SpsProfile: `kubectl sps reprofile`
ANNOTATION_OWNER = f"{LABEL_PREFIX}/owner"  # on a Deployment: the one SpsProfile that serves it
ANNOTATION_PLACEHOLDER = f"{LABEL_PREFIX}/placeholder"  # stable ConfigMap: SGLang's "no table"
ANNOTATION_GPU = f"{LABEL_PREFIX}/gpu-product"  # the unmangled product name (labels mangle it)

# Keys of a table ConfigMap.
TABLE_KEY = "table.json"
META_KEY = "meta.json"
# A table's meta.json: provenance, fit quality and the bounded manifest (64 KiB compact,
# about twice that as written with indentation). Read back (by the operator and by
# `kubectl sps`) only through the bounded parser, and nothing larger is read.
MAX_META_BYTES = 256 * 1024
# On a profiling Job: the node its target's ReadWriteOnce claims pin it to, and why.
ANNOTATION_VOLUME_PIN = f"{LABEL_PREFIX}/volume-pin"
ANNOTATION_BORROWED = f"{LABEL_PREFIX}/borrowed"  # on a Deployment: a replica lent to a run

# Kueue: a Job naming a queue is created suspended; Kueue admits (unsuspends) it.
LABEL_KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
LABEL_KUEUE_PRIORITY = "kueue.x-k8s.io/priority-class"  # a WorkloadPriorityClass
# Kueue deactivates a Workload admitted longer than this (seconds, counted from admission).
LABEL_KUEUE_MAX_EXEC = "kueue.x-k8s.io/max-exec-time-seconds"
# Kueue's own label on the Workload it keeps for a Job (the Job's UID), and the API
# versions of Workloads and LocalQueues the operator reads, preferred first.
LABEL_KUEUE_JOB_UID = "kueue.x-k8s.io/job-uid"
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta2", "v1beta1")
# Kueue's visibility API (pending workloads of a LocalQueue, with their positions).
KUEUE_VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"


def max_exec_seconds(labels: Mapping[str, Any]) -> int | None:
    """Kueue's maximum execution time a Job's labels set (`kueue.x-k8s.io/max-exec-time-
    seconds`: a positive whole number of seconds, as Kueue's webhook accepts it); None
    when absent or not such a number (the policy refuses that before any Job exists)."""
    value = labels.get(LABEL_KUEUE_MAX_EXEC)
    if not isinstance(value, str) or not value.isascii() or not value.isdigit():
        return None
    if len(value) > 10 or int(value) < 1:
        return None
    return int(value)
