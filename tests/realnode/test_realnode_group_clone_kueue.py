"""The multi-node clone under Kueue on real kubelets (issue 34 §2): the group's Indexed Job
is one Workload whose pod set counts both ranks, admitted whole (4 GPUs at once), run to
completion and finished whole. On the second bed (tests/run-all.sh), where Kueue is.
"""

from __future__ import annotations

from typing import Any

from realnode_helpers import get_json
from test_realnode_group_clone import create_run, group_formed, group_plan, job_condition

from sps_operator.controller.kube import builders
from sps_testbed import RealNodeCluster
from sps_testbed.kueue import CLUSTER_QUEUE, QUEUE_NAME_LABEL, KueueSetup, condition
from waiting import wait_for


def test_under_kueue_the_group_is_one_workload_of_two_pods_admitted_at_once(
    realnode_cluster: RealNodeCluster, realnode_kueue: KueueSetup, realnode_kueue_namespace: str
) -> None:
    bed, ns = realnode_cluster, realnode_kueue_namespace
    defaults = builders.JobDefaults(labels={QUEUE_NAME_LABEL: CLUSTER_QUEUE})
    job = create_run(bed, ns, group_plan(bed, ns, "group-queued", defaults))
    assert job["spec"]["suspend"] is True

    def admitted() -> dict[str, Any] | None:
        items = get_json(bed, "workloads.kueue.x-k8s.io", "-n", ns)["items"]
        return next((w for w in items if condition(w, "Admitted").get("status") == "True"), None)

    workload = wait_for("the group's Workload admitted", admitted, timeout=120)
    assert len(get_json(bed, "workloads.kueue.x-k8s.io", "-n", ns)["items"]) == 1
    (pod_set,) = workload["spec"]["podSets"]
    assert pod_set["count"] == 2, pod_set
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    assert assignment["count"] == 2 and assignment["resourceUsage"]["nvidia.com/gpu"] == "4"
    wait_for(
        "both ranks admitted together and running",
        lambda: group_formed(bed, ns, "group-queued"),
        timeout=240,
    )
    done = wait_for(
        "the queued group's Job to end",
        lambda: job_condition(bed, ns, "group-queued", "Complete", "Failed"),
        timeout=420,
    )
    assert done["type"] == "Complete", done
    # Given back at once: the Workload finished.
    wait_for(
        "the Workload finished",
        lambda: all(
            condition(w, "Finished").get("status") == "True"
            for w in get_json(bed, "workloads.kueue.x-k8s.io", "-n", ns)["items"]
        ),
        timeout=60,
    )
