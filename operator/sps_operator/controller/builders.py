"""Pure builders of the Kubernetes objects the operator creates or applies (k8sres-style).

Every function takes plain inputs and returns plain dicts; no API calls. Objects
never copy GitOps tracking metadata (`app.kubernetes.io/instance`,
`argocd.argoproj.io/*`) from the SpsProfile or the target.
"""

from __future__ import annotations

import copy
import json
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sps_operator.api.models import SpsProfileSpec, TableKind
from sps_operator.constants import API_GROUP, API_VERSION, IMAGE, KIND
from sps_operator.controller import names
from sps_operator.controller.serverconfig import TABLE_PATH_FLAG, split_flag

PROFILING_ENV_COMMON = {
    "SGLANG_DSPARK_ENABLE_SPS_RECORD": "1",
    "SGLANG_SIMULATE_ACC_LEN": "1.0",
    "SGLANG_SIMULATE_ACC_METHOD": "match-expected",
}
SERVER_CONTAINER = "sglang-server"
PROFILER_CONTAINER = "profiler"
SEED_VOLUME = "sps-seed-table"
TABLE_VOLUME = "sps-table"
SEED_MOUNT_DIR = "/etc/sps/seed"
WORK_DIR = "/tmp/sps"
SERVER_WAIT_SECONDS = 1800
# Metadata a GitOps tool uses to track what it owns; never copied onto our objects.
GITOPS_LABELS = ("app.kubernetes.io/instance",)
GITOPS_PREFIXES = ("argocd.argoproj.io/",)


def strip_gitops(meta: Mapping[str, str] | None) -> dict[str, str]:
    return {
        k: v
        for k, v in (meta or {}).items()
        if k not in GITOPS_LABELS and not k.startswith(GITOPS_PREFIXES)
    }


@dataclass(frozen=True)
class ProfileRef:
    """The identity of an SpsProfile, for ownerReferences and labels."""

    name: str
    namespace: str
    uid: str

    def owner_reference(self) -> dict[str, Any]:
        return {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            # No blockOwnerDeletion: with the OwnerReferencesPermissionEnforcement admission
            # plugin it would need update on spsprofiles/finalizers; background GC needs none.
        }


def base_labels(profile: ProfileRef, component: str) -> dict[str, str]:
    return {
        names.LABEL_PROFILE: names.label_value(profile.name),
        names.LABEL_COMPONENT: component,
        names.LABEL_MANAGED_BY: names.MANAGED_BY,
    }


def object_meta(
    profile: ProfileRef,
    name: str,
    component: str,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": profile.namespace,
        "labels": {**base_labels(profile, component), **strip_gitops(labels)},
        "ownerReferences": [profile.owner_reference()],
    }
    if annotations:
        meta["annotations"] = strip_gitops(annotations)
    return meta


# --------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class RunPlan:
    """Everything needed to build one phase of a profiling run."""

    profile: ProfileRef
    spec: SpsProfileSpec
    run: str
    phase: int  # 1 = diagonal (static), 2 = off-diagonal (compact, Additive only)
    gpu_product: str
    fingerprint: str
    target_pod_spec: Mapping[str, Any] = field(default_factory=dict)
    server_container: str | None = None
    server_port: int = 30000
    seed_table_config_map: str | None = None
    profiler_image: str = IMAGE

    @property
    def job_name(self) -> str:
        return names.job_name(self.run, self.phase)

    @property
    def result_config_map(self) -> str:
        return names.result_config_map(self.run, self.phase)

    @property
    def account(self) -> str:
        return names.profiler_account(self.run)

    def labels(self) -> dict[str, str]:
        return {
            names.LABEL_RUN: self.run,
            names.LABEL_GPU: names.label_value(self.gpu_product),
            names.LABEL_FINGERPRINT: self.fingerprint,
        }


def verify_mode(spec: SpsProfileSpec, phase: int) -> str:
    # Diagonal rounds run full width (static); the off-diagonal phase trims (compact).
    return "compact" if phase == 2 else "static"


def profiler_args(plan: RunPlan, base_url: str) -> list[str]:
    sweep = plan.spec.table.sweep
    args = ["run", "--base-url", base_url, "--out", f"{WORK_DIR}/dspark_sps.json"]
    if sweep.batch_sizes:
        args += ["--batch-size", *[str(b) for b in sweep.batch_sizes]]
    elif sweep.max_batch_size:
        args += ["--max-batch-size", str(sweep.max_batch_size)]
    if plan.phase == 2:
        fracs = sweep.fracs or [0.25, 0.5, 0.75, 1.0]
        args += ["--fracs", *[repr(float(f)) for f in fracs]]
    args += ["--input-len", str(sweep.input_len), "--repeats", str(sweep.repeats)]
    args += ["--ci-rel-width", repr(sweep.ci_rel_width)]
    if sweep.min_steady_steps is not None:
        args += ["--min-steady-steps", str(sweep.min_steady_steps)]
    if sweep.min_steady_seconds is not None:
        args += ["--min-steady-seconds", repr(sweep.min_steady_seconds)]
    if sweep.vocab_size is not None:
        args += ["--vocab-size", str(sweep.vocab_size)]
    args += ["--round-timeout", repr(sweep.round_timeout_seconds)]
    args += ["--wait-for-server", str(SERVER_WAIT_SECONDS)]
    args += ["--publish-configmap", plan.result_config_map]
    args += ["--publish-namespace", plan.profile.namespace]
    return args


def _without_table_flag(tokens: Sequence[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for token in tokens:
        if skip:
            skip = False
            continue
        name, inline = split_flag(token)
        if name == TABLE_PATH_FLAG:
            skip = inline is None
            continue
        out.append(token)
    return out


def _with_env(env: Sequence[Mapping[str, Any]], overrides: Mapping[str, str]) -> list[dict]:
    kept = [dict(e) for e in env if e.get("name") not in overrides]
    return kept + [{"name": k, "value": v} for k, v in overrides.items()]


def server_sidecar(plan: RunPlan, container: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the target's server container as a native sidecar in profiling mode."""
    sidecar = copy.deepcopy(dict(container))
    sidecar["name"] = SERVER_CONTAINER
    sidecar["restartPolicy"] = "Always"
    for key in ("livenessProbe", "readinessProbe", "startupProbe", "lifecycle"):
        sidecar.pop(key, None)
    command = _without_table_flag([str(t) for t in sidecar.get("command") or []])
    args = _without_table_flag([str(t) for t in sidecar.get("args") or []])
    mounts = [dict(m) for m in sidecar.get("volumeMounts") or [] if m.get("name") != TABLE_VOLUME]
    if plan.phase == 2 and plan.seed_table_config_map:
        # The phase-1 diagonal table makes the server leave its verify-all shortcut, so the
        # forced budget fractions really trim the verify graph.
        args += [TABLE_PATH_FLAG, f"{SEED_MOUNT_DIR}/{names.TABLE_KEY}"]
        mounts.append({"name": SEED_VOLUME, "mountPath": SEED_MOUNT_DIR, "readOnly": True})
    if command:
        sidecar["command"] = command
    if args or "args" in sidecar:
        sidecar["args"] = args
    if mounts:
        sidecar["volumeMounts"] = mounts
    else:
        sidecar.pop("volumeMounts", None)
    env = {**PROFILING_ENV_COMMON, "SGLANG_RAGGED_VERIFY_MODE": verify_mode(plan.spec, plan.phase)}
    sidecar["env"] = _with_env(sidecar.get("env") or [], env)
    probe = {
        "httpGet": {"path": "/health", "port": plan.server_port},
        "periodSeconds": 2,
        "failureThreshold": SERVER_WAIT_SECONDS // 2,
        "timeoutSeconds": 5,
    }
    sidecar["startupProbe"] = probe
    sidecar["readinessProbe"] = {**probe, "failureThreshold": 3}
    return sidecar


def profiler_container(
    plan: RunPlan, base_url: str, server: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    job = plan.spec.job
    mounts: list[dict[str, Any]] = [{"name": "work", "mountPath": WORK_DIR}]
    # The server's volumes at the same paths (read-only): the tokenizer path the server
    # reports in /server_info then resolves inside the profiler too.
    for mount in (server or {}).get("volumeMounts") or []:
        if mount.get("name") not in (TABLE_VOLUME, "work") and mount.get("mountPath") != WORK_DIR:
            mounts.append({**dict(mount), "readOnly": True})
    container: dict[str, Any] = {
        "name": PROFILER_CONTAINER,
        "image": job.image or plan.profiler_image,
        "command": ["sps-profiler"],
        "args": profiler_args(plan, base_url),
        "env": [{"name": "SPS_PROFILER_RUN", "value": plan.run}],
        "volumeMounts": mounts,
    }
    if job.resources is not None:
        container["resources"] = job.resources.to_k8s()
    return container


def profiling_job(plan: RunPlan) -> dict[str, Any]:
    """The profiling Job: backoffLimit 0 (profiling failures are rarely transient and GPU
    time is expensive; the operator decides about retries)."""
    spec = plan.spec
    pod_spec = plan.target_pod_spec
    volumes: list[dict[str, Any]] = [{"name": "work", "emptyDir": {}}]
    init_containers: list[dict[str, Any]] = []
    node_selector: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []
    pod: dict[str, Any] = {"restartPolicy": "Never"}
    if spec.server.source == "External":
        base_url = str(spec.server.url).rstrip("/")
        containers = [profiler_container(plan, base_url)]
    else:
        container = _find_container(pod_spec, plan.server_container)
        base_url = f"http://127.0.0.1:{plan.server_port}"
        volumes += [
            copy.deepcopy(dict(v))
            for v in pod_spec.get("volumes") or []
            if v.get("name") not in (TABLE_VOLUME, "work")
        ]
        init_containers = [copy.deepcopy(dict(c)) for c in pod_spec.get("initContainers") or []]
        init_containers.append(server_sidecar(plan, container))
        containers = [profiler_container(plan, base_url, container)]
        node_selector.update(pod_spec.get("nodeSelector") or {})
        node_selector[spec.gpu_product_label] = plan.gpu_product
        tolerations += [copy.deepcopy(dict(t)) for t in pod_spec.get("tolerations") or []]
        for key in ("affinity", "imagePullSecrets", "priorityClassName", "runtimeClassName"):
            if pod_spec.get(key):
                pod[key] = copy.deepcopy(pod_spec[key])
        if plan.phase == 2 and plan.seed_table_config_map:
            volumes.append({"name": SEED_VOLUME, "configMap": {"name": plan.seed_table_config_map}})
    node_selector.update(spec.job.node_selector or {})
    tolerations += [t.to_k8s() for t in spec.job.tolerations or []]
    pod.update(
        {
            "serviceAccountName": spec.job.service_account_name or plan.account,
            "containers": containers,
            "volumes": volumes,
        }
    )
    if init_containers:
        pod["initContainers"] = init_containers
    if node_selector:
        pod["nodeSelector"] = node_selector
    if tolerations:
        pod["tolerations"] = tolerations
    labels = {**plan.labels(), names.LABEL_COMPONENT: names.COMPONENT_JOB}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": object_meta(plan.profile, plan.job_name, names.COMPONENT_JOB, plan.labels()),
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": spec.job.active_deadline_seconds,
            "template": {
                "metadata": {"labels": {**base_labels(plan.profile, "profiling-pod"), **labels}},
                "spec": pod,
            },
        },
    }


def _find_container(pod_spec: Mapping[str, Any], name: str | None) -> Mapping[str, Any]:
    containers = pod_spec.get("containers") or []
    for container in containers:
        if name is None or container.get("name") == name:
            return container
    raise ValueError(
        f"the target has no container named {name!r}; set spec.serverContainer to one of "
        f"{[c.get('name') for c in containers]}"
    )


def result_config_map(plan: RunPlan) -> dict[str, Any]:
    """Created empty by the operator; the profiler (and only it) patches it."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(
            plan.profile, plan.result_config_map, names.COMPONENT_RESULT, plan.labels()
        ),
        "data": {},
    }


def profiler_rbac(plan: RunPlan) -> list[dict[str, Any]]:
    """ServiceAccount + Role + RoleBinding: the Job may write ONLY its result ConfigMaps."""
    account = plan.account
    results = [names.result_config_map(plan.run, 1)]
    if plan.spec.table.kind == TableKind.ADDITIVE:
        results.append(names.result_config_map(plan.run, 2))
    meta = object_meta(plan.profile, account, names.COMPONENT_RBAC, {names.LABEL_RUN: plan.run})
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": copy.deepcopy(meta)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": copy.deepcopy(meta),
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": results,
                    "verbs": ["get", "patch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": copy.deepcopy(meta),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": account,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": account, "namespace": plan.profile.namespace}
            ],
        },
    ]


# --------------------------------------------------------------------------- tables


def table_config_map(
    profile: ProfileRef,
    name: str,
    table_json: str,
    table_hash: str,
    gpu_product: str,
    fingerprint: str,
    meta: Mapping[str, Any],
    component: str = names.COMPONENT_TABLE,
) -> dict[str, Any]:
    """An immutable ConfigMap per table, named by content hash."""
    labels = {
        names.LABEL_GPU: names.label_value(gpu_product),
        names.LABEL_FINGERPRINT: fingerprint,
        names.LABEL_TABLE_HASH: table_hash,
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(
            profile,
            name,
            component,
            labels,
            annotations={names.LABEL_GPU: gpu_product},
        ),
        "immutable": True,
        "data": {
            names.TABLE_KEY: table_json,
            names.META_KEY: json.dumps(meta, sort_keys=True, indent=1),
        },
    }


# --------------------------------------------------------------------------- rollout


def inject_apply(
    deployment: Mapping[str, Any],
    container_name: str,
    table_config_map: str,
    table_hash: str,
    table_path: str,
    server_args: Sequence[str],
) -> dict[str, Any]:
    """The server-side-apply body for Inject: only the fields the operator owns.

    The args list is atomic in SSA, so the operator necessarily co-owns `args`; it sends the
    container's current args with its flag set (Git's values unchanged)."""
    directory, filename = posixpath.split(table_path)
    args = [*_without_table_flag(list(server_args)), TABLE_PATH_FLAG, table_path]
    pod_spec: dict[str, Any] = {
        "containers": [
            {
                "name": container_name,
                "args": args,
                "volumeMounts": [{"name": TABLE_VOLUME, "mountPath": directory, "readOnly": True}],
            }
        ],
        "volumes": [
            {
                "name": TABLE_VOLUME,
                "configMap": {
                    "name": table_config_map,
                    "items": [{"key": names.TABLE_KEY, "path": filename}],
                },
            }
        ],
    }
    template = {**_table_annotations(table_config_map, table_hash), "spec": pod_spec}
    return _deployment_apply(deployment, template)


def annotate_apply(
    deployment: Mapping[str, Any], table_config_map: str, table_hash: str
) -> dict[str, Any]:
    """The server-side-apply body for AnnotateOnly: the pod-template annotation, nothing else."""
    return _deployment_apply(deployment, _table_annotations(table_config_map, table_hash))


def _table_annotations(table_config_map: str, table_hash: str) -> dict[str, Any]:
    """The pod-template metadata the operator owns: which table, at which hash."""
    return {
        "metadata": {
            "annotations": {
                names.ANNOTATION_TABLE_HASH: table_hash,
                names.ANNOTATION_TABLE: table_config_map,
            }
        }
    }


def _deployment_apply(deployment: Mapping[str, Any], template: dict[str, Any]) -> dict[str, Any]:
    """A Deployment apply body naming `deployment` and carrying only `template`."""
    meta = deployment.get("metadata") or {}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
        "spec": {"template": template},
    }


def stable_table_apply(
    profile: ProfileRef, name: str, table_json: str, table_hash: str, filename: str
) -> dict[str, Any]:
    """AnnotateOnly: the stable ConfigMap the Deployment in Git mounts (SSA; data only)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": profile.namespace,
            "annotations": {names.ANNOTATION_TABLE_HASH: table_hash},
        },
        "data": {filename: table_json},
    }


def container_args(pod_spec: Mapping[str, Any], name: str | None) -> list[str]:
    return [str(a) for a in _find_container(pod_spec, name).get("args") or []]
