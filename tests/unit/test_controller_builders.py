"""Object builders: the profiling Job, result ConfigMap, RBAC, tables, rollout patches."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from sps_operator.api import labels as L
from sps_operator.api.kinds import RunPhase
from sps_operator.api.limits import MAX_PROFILE_NAME
from sps_operator.api.spec import SpsProfileSpec
from sps_operator.controller.kube import builders, names, table_objects, workload_apply
from sps_operator.controller.sglang.serverconfig import parse_server

PROFILE = builders.ProfileRef("llama", "serving", "uid-1")
TARGET_POD: dict[str, Any] = {
    "nodeSelector": {"pool": "gpu"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"x": 1}},
    "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "models"}}],
    "containers": [
        {
            "name": "sglang",
            "image": "lmsysorg/sglang:v1",
            "command": ["python3", "-m", "sglang.launch_server"],
            "args": [
                "--model-path", "/models/m", "--port", "30000", "--speculative-algorithm", "DSPARK",
                "--speculative-dspark-sps-table-path", "/etc/sps/table/table.json",
            ],
            "env": [{"name": "SGLANG_RAGGED_VERIFY_MODE", "value": "compact"}],
            "readinessProbe": {"httpGet": {"path": "/ready", "port": 30000}},
            "volumeMounts": [
                {"name": "models", "mountPath": "/models"},
                {"name": "sps-table", "mountPath": "/etc/sps/table"},
            ],
            "resources": {"limits": {"nvidia.com/gpu": 1}},
        }
    ],
}  # fmt: skip


def spec(**overrides: Any) -> SpsProfileSpec:
    base: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "sglang"}},
        "table": {"kind": "Diagonal", "sweep": {"batchSizes": [1, 2, 4, 8], "repeats": 2}},
    }
    base.update(overrides)
    return SpsProfileSpec.model_validate(base)


def plan(phase: RunPhase = RunPhase.DIAGONAL, **spec_overrides: Any) -> builders.RunPlan:
    return builders.RunPlan(
        profile=PROFILE,
        spec=spec(**spec_overrides),
        run="llama-abc",
        phase=phase,
        gpu_product="NVIDIA-H100-80GB-HBM3",
        fingerprint="f" * 16,
        target_pod_spec=TARGET_POD,
        server_container="sglang",
        server=parse_server(TARGET_POD["containers"][0]),
        server_port=30000,
        seed_table_config_map="llama-abc-seed" if phase == RunPhase.OFF_DIAGONAL else None,
        profiler_image="ghcr.io/sps-dev/sps-operator:test",
    )


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


def test_job_clone_mode_sidecar_and_profiler() -> None:
    job = builders.profiling_job(plan())
    assert job["metadata"]["name"] == "llama-abc"
    assert job["spec"]["backoffLimit"] == 0
    assert job["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["serviceAccountName"] == "llama-abc-profiler"
    assert pod["nodeSelector"] == {"pool": "gpu", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert pod["tolerations"] == TARGET_POD["tolerations"]
    assert pod["affinity"] == TARGET_POD["affinity"]
    assert {v["name"] for v in pod["volumes"]} == {"sps-work", "sps-profiler-token", "models"}
    assert pod["automountServiceAccountToken"] is False
    (sidecar,) = pod["initContainers"]
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["image"] == "lmsysorg/sglang:v1"
    assert "--speculative-dspark-sps-table-path" not in sidecar["args"]
    assert sidecar["command"] == ["python3", "-m", "sglang.launch_server"]
    assert sidecar["args"][:2] == ["--model-path", "/models/m"]
    assert env_of(sidecar) == {
        "SGLANG_RAGGED_VERIFY_MODE": "static",
        "SGLANG_DSPARK_ENABLE_SPS_RECORD": "1",
        "SGLANG_SIMULATE_ACC_LEN": "1.0",
        "SGLANG_SIMULATE_ACC_METHOD": "match-expected",
        "SGLANG_EXPOSE_OWN_ENV_VARS": "1",
    }
    assert sidecar["startupProbe"]["httpGet"] == {"path": "/health", "port": 30000}
    assert sidecar["readinessProbe"]["httpGet"]["path"] == "/health"
    assert [m["name"] for m in sidecar["volumeMounts"]] == ["models"]
    assert sidecar["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    (profiler,) = pod["containers"]
    assert profiler["image"] == "ghcr.io/sps-dev/sps-operator:test"
    args = profiler["args"]
    assert args[0] == "run"
    assert args[args.index("--base-url") + 1] == "http://127.0.0.1:30000"
    assert args[args.index("--batch-size") + 1 : args.index("--batch-size") + 5] == [
        "1", "2", "4", "8",
    ]  # fmt: skip
    assert args[args.index("--publish-configmap") + 1] == "llama-abc-result"
    assert args[args.index("--publish-namespace") + 1] == "serving"
    assert "--fracs" not in args and "--wait-for-server" in args
    # Nothing in the image plots: no matplotlib configuration directory.
    assert env_of(profiler) == {"SPS_PROFILER_RUN": plan().run, "HOME": builders.WORK_DIR}


def test_job_phase_two_mounts_the_seed_table_in_compact_mode() -> None:
    p = plan(
        phase=RunPhase.OFF_DIAGONAL,
        table={"kind": "Additive", "sweep": {"batchSizes": [1, 2], "fracs": [0.5, 1]}},
    )
    job = builders.profiling_job(p)
    assert job["metadata"]["name"] == "llama-abc-p2"
    pod = job["spec"]["template"]["spec"]
    sidecar = pod["initContainers"][-1]
    assert env_of(sidecar)["SGLANG_RAGGED_VERIFY_MODE"] == "compact"
    i = sidecar["args"].index("--speculative-dspark-sps-table-path")
    assert sidecar["args"][i + 1] == "/etc/sps/seed/table.json"
    assert {"name": "sps-seed-table", "configMap": {"name": "llama-abc-seed"}} in pod["volumes"]
    args = pod["containers"][0]["args"]
    assert args[args.index("--fracs") + 1 : args.index("--fracs") + 3] == ["0.5", "1.0"]
    assert args[args.index("--publish-configmap") + 1] == "llama-abc-p2-result"


def test_sidecar_drops_the_injected_table_mount_even_when_it_is_the_only_one() -> None:
    pod = {
        "containers": [
            {
                "name": "sglang",
                "image": "lmsysorg/sglang:v1",
                "args": ["--speculative-dspark-sps-table-path", "/etc/sps/table/table.json"],
                "volumeMounts": [{"name": "sps-table", "mountPath": "/etc/sps/table"}],
            }
        ],
        "volumes": [{"name": "sps-table", "configMap": {"name": "old-table"}}],
    }
    server = parse_server({**pod["containers"][0], "command": ["sglang", "serve"], "args": [
        "--speculative-algorithm", "DSPARK", *pod["containers"][0]["args"]]})  # fmt: skip
    p = builders.RunPlan(**{**plan().__dict__, "target_pod_spec": pod, "server": server})
    spec = builders.profiling_job(p)["spec"]["template"]["spec"]
    sidecar = spec["initContainers"][-1]
    assert "volumeMounts" not in sidecar
    assert sidecar["args"] == ["--speculative-algorithm", "DSPARK"]
    assert [v["name"] for v in spec["volumes"]] == ["sps-work", "sps-profiler-token"]
    mounts = spec["containers"][0]["volumeMounts"]
    assert [m["name"] for m in mounts] == ["sps-work", "sps-profiler-token"]


def test_job_external_mode_has_no_sidecar_and_job_overrides_apply() -> None:
    p = plan(
        server={"source": "External", "url": "http://prof:30000/"},
        job={
            "image": "my/profiler:1",
            "nodeSelector": {"zone": "a"},
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "activeDeadlineSeconds": 600,
            "serviceAccountName": "mine",
            "resources": {"limits": {"cpu": "1"}},
        },
    )
    job = builders.profiling_job(p)
    pod = job["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    assert pod["nodeSelector"] == {"zone": "a"}
    assert pod["tolerations"] == [{"key": "k", "operator": "Exists"}]
    assert pod["serviceAccountName"] == "mine"
    # The run's own deadline counts from when the Job runs (the operator enforces it); the
    # Job's bound adds the longest wait for GPUs (capacity.waitTimeoutSeconds, default 3600).
    assert job["spec"]["activeDeadlineSeconds"] == 600 + 3600
    profiler = pod["containers"][0]
    assert profiler["image"] == "my/profiler:1"
    assert profiler["resources"] == {"limits": {"cpu": "1"}}
    assert profiler["args"][profiler["args"].index("--base-url") + 1] == "http://prof:30000"


def test_missing_server_container_is_a_clear_error() -> None:
    p = builders.RunPlan(**{**plan().__dict__, "server_container": "nope"})
    with pytest.raises(ValueError, match="no container named 'nope'"):
        builders.profiling_job(p)


def test_profiler_rbac_grants_only_the_result_config_maps() -> None:
    sa, role, binding = builders.profiler_rbac(
        plan(table={"kind": "Additive", "sweep": {"fracs": [0.5]}})
    )
    assert sa["kind"] == "ServiceAccount" and sa["metadata"]["name"] == "llama-abc-profiler"
    (rule,) = role["rules"]
    assert rule == {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": ["llama-abc-result", "llama-abc-p2-result"],
        "verbs": ["get", "patch"],
    }
    assert binding["roleRef"]["name"] == "llama-abc-profiler"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "llama-abc-profiler", "namespace": "serving"}
    ]


def test_table_config_map_is_immutable_labelled_and_free_of_gitops_metadata() -> None:
    cm = table_objects.table_config_map(
        PROFILE, "llama-table-0123456789", '{"a":1}', "0123456789abcdef",
        "NVIDIA-H100-80GB-HBM3", "f" * 16, {"run": "r"},
    )  # fmt: skip
    assert cm["immutable"] is True
    labels = cm["metadata"]["labels"]
    assert labels[L.LABEL_PROFILE] == "llama"
    assert labels[L.LABEL_GPU] == "NVIDIA-H100-80GB-HBM3"
    assert labels[L.LABEL_FINGERPRINT] == "f" * 16
    assert cm["data"]["table.json"] == '{"a":1}'
    meta = builders.object_meta(
        PROFILE,
        "x",
        "table",
        labels={"app.kubernetes.io/instance": "argo-app", "keep": "me"},
        annotations={"argocd.argoproj.io/tracking-id": "t", "note": "n"},
    )
    assert "app.kubernetes.io/instance" not in meta["labels"] and meta["labels"]["keep"] == "me"
    assert meta["annotations"] == {"note": "n"}


def test_inject_apply_owns_only_volume_mount_flag_and_annotation() -> None:
    dep = {"metadata": {"name": "srv", "namespace": "serving", "resourceVersion": "41"}}
    body = workload_apply.inject_apply(
        dep, "sglang", "llama-table-0123", "hash1", "/etc/sps/table/table.json",
        ["--model-path", "m", "--speculative-dspark-sps-table-path", "/old"],
    )  # fmt: skip
    template = body["spec"]["template"]
    assert template["metadata"]["annotations"][L.ANNOTATION_TABLE_HASH] == "hash1"
    (container,) = template["spec"]["containers"]
    assert container["args"] == [
        "--model-path", "m", "--speculative-dspark-sps-table-path", "/etc/sps/table/table.json",
    ]  # fmt: skip
    assert container["volumeMounts"] == [
        {"name": "sps-table", "mountPath": "/etc/sps/table", "readOnly": True}
    ]
    assert set(container) == {"name", "args", "volumeMounts"}
    (volume,) = template["spec"]["volumes"]
    assert volume["configMap"] == {
        "name": "llama-table-0123",
        "items": [{"key": "table.json", "path": "table.json"}],
    }
    assert set(body["spec"]) == {"template"}
    # Conditional on what was read: the args above are the ones of resourceVersion 41.
    assert body["metadata"] == {"name": "srv", "namespace": "serving", "resourceVersion": "41"}


def test_annotate_only_apply_is_the_annotation_alone() -> None:
    body = workload_apply.annotate_apply(
        {"metadata": {"name": "srv", "namespace": "serving", "resourceVersion": "7"}}, "cm", "h2"
    )
    assert body["metadata"]["resourceVersion"] == "7"
    assert body["spec"] == {
        "template": {
            "metadata": {"annotations": {L.ANNOTATION_TABLE_HASH: "h2", L.ANNOTATION_TABLE: "cm"}}
        }
    }


def test_a_deployment_write_without_a_resource_version_is_never_built() -> None:
    with pytest.raises(ValueError, match="resourceVersion"):
        workload_apply.annotate_apply(
            {"metadata": {"name": "srv", "namespace": "serving"}}, "c", "h"
        )


def test_names_are_deterministic_unique_per_profile_and_short_enough() -> None:
    long = "p" * MAX_PROFILE_NAME
    gpu = "NVIDIA-H100-80GB-HBM3"
    a = names.run_name(long, "uid-1", gpu, "f" * 16, "k#1")
    assert a == names.run_name(long, "uid-1", gpu, "f" * 16, "k#1")
    assert a != names.run_name(long, "uid-1", gpu, "f" * 16, "k#2")
    assert a != names.run_name(long, "uid-1", "NVIDIA-H200", "f" * 16, "k#1")
    # A profile deleted and created again under the same name shares nothing.
    assert a != names.run_name(long, "uid-2", gpu, "f" * 16, "k#1")
    table = names.table_config_map(long, "uid-1", gpu, "f" * 16, "0123456789abcdef")
    assert table != names.table_config_map(long, "uid-2", gpu, "f" * 16, "0123456789abcdef")
    # The same table measured for another server is another ConfigMap.
    assert table != names.table_config_map(long, "uid-1", gpu, "e" * 16, "0123456789abcdef")
    # The Job's pods are named <job>-xxxxx and the Job name becomes a label value.
    assert len(names.job_name(a, RunPhase.OFF_DIAGONAL)) + len("-xxxxx") <= 63
    for derived in (
        names.result_config_map(a, RunPhase.OFF_DIAGONAL),
        names.profiler_account(a),
        table,
    ):
        assert len(derived) <= 63, derived


def test_the_profiler_runs_restricted_and_alone_holds_the_api_token() -> None:
    target = {**TARGET_POD, "securityContext": {"runAsNonRoot": True, "fsGroup": 2000}}
    pod = builders.profiling_job(builders.RunPlan(**{**plan().__dict__, "target_pod_spec": target}))
    spec = pod["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"] == target["securityContext"]  # the server's own
    (profiler,) = spec["containers"]
    context = profiler["securityContext"]
    assert context["runAsNonRoot"] is True and context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    token = {"name": "sps-profiler-token", "mountPath": builders.TOKEN_DIR, "readOnly": True}
    assert token in profiler["volumeMounts"]
    sidecar = spec["initContainers"][-1]
    assert all(m["name"] != "sps-profiler-token" for m in sidecar.get("volumeMounts") or [])
    assert "securityContext" not in sidecar  # exactly the target container's (none here)
    (volume,) = [v for v in spec["volumes"] if v["name"] == "sps-profiler-token"]
    kinds = [next(iter(s)) for s in volume["projected"]["sources"]]
    assert kinds == ["serviceAccountToken", "configMap", "downwardAPI"]


def test_the_clone_never_mounts_a_table_the_target_mounts() -> None:
    """GitOps first run: the Deployment mounts the stable ConfigMap under its own volume
    name; the clone must not depend on the table it is about to produce."""
    container = {
        **TARGET_POD["containers"][0],
        "volumeMounts": [
            {"name": "models", "mountPath": "/models"},
            {"name": "git-table", "mountPath": "/etc/sps/table"},
            {"name": "mixed", "mountPath": "/etc/mixed"},
        ],
    }
    target = {
        **TARGET_POD,
        "initContainers": [{"name": "warm", "image": "busybox",
                            "volumeMounts": [{"name": "git-table", "mountPath": "/t"}]}],
        "containers": [container],
        "volumes": [
            {"name": "models", "persistentVolumeClaim": {"claimName": "models"}},
            {"name": "git-table", "configMap": {"name": "llama-sps"}},
            {"name": "mixed", "projected": {"sources": [{"configMap": {"name": "llama-sps"}}]}},
        ],
    }  # fmt: skip
    p = builders.RunPlan(
        **{
            **plan().__dict__,
            "target_pod_spec": target,
            "table_config_maps": frozenset({"llama-sps"}),
        }
    )
    spec = builders.profiling_job(p)["spec"]["template"]["spec"]
    assert {v["name"] for v in spec["volumes"]} == {"sps-work", "sps-profiler-token", "models"}
    for c in [*spec["initContainers"], *spec["containers"]]:
        assert {m["name"] for m in c.get("volumeMounts") or []} <= {
            "models", "sps-work", "sps-profiler-token"
        }, c["name"]  # fmt: skip


def test_a_shell_wrapped_server_is_cloned_in_exec_form() -> None:
    script = "SGLANG_PREP_IN_CUDA_GRAPH=1 exec python3 -m sglang.launch_server --speculative-algorithm DSPARK --port 30000"  # noqa: E501
    container = {"name": "sglang", "image": "img", "command": ["sh", "-c", script]}
    target = {"containers": [container]}
    p = builders.RunPlan(
        **{**plan().__dict__, "target_pod_spec": target, "server": parse_server(container)}
    )
    sidecar = builders.profiling_job(p)["spec"]["template"]["spec"]["initContainers"][-1]
    assert sidecar["command"] == ["python3", "-m", "sglang.launch_server"]
    assert sidecar["args"] == ["--speculative-algorithm", "DSPARK", "--port", "30000"]
    assert env_of(sidecar)["SGLANG_PREP_IN_CUDA_GRAPH"] == "1"


def test_owner_patch_carries_the_resource_version_it_was_decided_on() -> None:
    dep = {"metadata": {"name": "srv", "resourceVersion": "42"}}
    assert workload_apply.owner_patch(dep, "llama") == {
        "metadata": {"resourceVersion": "42", "annotations": {L.ANNOTATION_OWNER: "llama"}}
    }
    assert workload_apply.owner_patch(dep, None)["metadata"]["annotations"] == {
        L.ANNOTATION_OWNER: None
    }


def production_plan() -> builders.RunPlan:
    """The target pod of a production cluster: pull secret, runtime class, an init
    container, a native sidecar and a plain sidecar (one named like the clone's profiler)."""
    pod = {
        **TARGET_POD,
        "imagePullSecrets": [{"name": "registry"}],
        "runtimeClassName": "nvidia",
        "initContainers": [
            {"name": "fetch", "image": "busybox", "command": ["true"]},
            {"name": "mesh", "image": "proxy", "restartPolicy": "Always"},
        ],
        "containers": [
            *TARGET_POD["containers"],
            {
                "name": "logs",
                "image": "shipper",
                "readinessProbe": {"exec": {"command": ["true"]}},
                "startupProbe": {"exec": {"command": ["true"]}},
                "livenessProbe": {"exec": {"command": ["true"]}},
                "volumeMounts": [
                    {"name": "models", "mountPath": "/models"},
                    {"name": "sps-table", "mountPath": "/etc/sps/table"},
                ],
            },
            {"name": "profiler", "image": "theirs"},
        ],
    }
    return dataclasses.replace(plan(), target_pod_spec=pod)


def test_plain_sidecars_become_native_sidecars_before_the_server() -> None:
    pod = builders.profiling_job(production_plan())["spec"]["template"]["spec"]
    names_in_order = [c["name"] for c in pod["initContainers"]]
    assert names_in_order == ["fetch", "mesh", "logs", "target-profiler", "sglang-server"]
    by_name = {c["name"]: c for c in pod["initContainers"]}
    assert "restartPolicy" not in by_name["fetch"]  # an init container stays one
    assert by_name["mesh"]["restartPolicy"] == "Always"
    logs = by_name["logs"]
    assert logs["restartPolicy"] == "Always" and logs["image"] == "shipper"
    assert not {"readinessProbe", "startupProbe", "livenessProbe"} & logs.keys()
    assert [m["name"] for m in logs["volumeMounts"]] == ["models"]  # never the table
    assert by_name["target-profiler"]["image"] == "theirs"
    assert [c["name"] for c in pod["containers"]] == ["profiler"]
    assert pod["imagePullSecrets"] == [{"name": "registry"}]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["tolerations"] == TARGET_POD["tolerations"]


def test_the_clone_s_profiling_env_is_not_overwritten_by_an_sgl_spelling() -> None:
    """SGLang copies SGL_X over SGLANG_X at start: a server written with
    SGL_RAGGED_VERIFY_MODE=compact would run the diagonal phase's clone compact, and one
    with SGL_DSPARK_ENABLE_SPS_RECORD=0 would record nothing."""
    pod = copy.deepcopy(TARGET_POD)
    pod["containers"][0]["env"] = [
        {"name": "SGL_RAGGED_VERIFY_MODE", "value": "compact"},
        {"name": "SGL_DSPARK_ENABLE_SPS_RECORD", "value": "0"},
        {"name": "SGL_KEEP_ME", "value": "x"},
    ]
    p = plan()
    p = dataclasses.replace(p, target_pod_spec=pod, server=parse_server(pod["containers"][0]))
    sidecar = builders.profiling_job(p)["spec"]["template"]["spec"]["initContainers"][-1]
    env = env_of(sidecar)
    assert "SGL_RAGGED_VERIFY_MODE" not in env and "SGL_DSPARK_ENABLE_SPS_RECORD" not in env
    assert env["SGLANG_RAGGED_VERIFY_MODE"] == "static" and env["SGL_KEEP_ME"] == "x"
    # An envFrom may carry an SGL_ spelling unseen: the clone sets the twin, which wins.
    pod["containers"][0]["envFrom"] = [{"configMapRef": {"name": "site"}}]
    p = dataclasses.replace(p, target_pod_spec=pod, server=parse_server(pod["containers"][0]))
    sidecar = builders.profiling_job(p)["spec"]["template"]["spec"]["initContainers"][-1]
    env = env_of(sidecar)
    assert env["SGL_RAGGED_VERIFY_MODE"] == env["SGLANG_RAGGED_VERIFY_MODE"] == "static"
    assert env["SGL_DSPARK_ENABLE_SPS_RECORD"] == "1"
