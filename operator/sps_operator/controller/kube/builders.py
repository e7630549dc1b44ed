"""Pure builders of the Kubernetes objects the operator creates or applies (k8sres-style).

Every function takes plain inputs and returns plain dicts; no API calls. Objects
never copy GitOps tracking metadata (`app.kubernetes.io/instance`,
`argocd.argoproj.io/*`) from the SpsProfile or the target.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sps_operator.api import labels as L
from sps_operator.api.fingerprint import sgl_twin, sglang_name
from sps_operator.api.kinds import RunPhase
from sps_operator.api.spec import DEFAULT_ADDITIVE_FRACS, ServerSource, SpsProfileSpec, TableKind
from sps_operator.constants import API_GROUP, API_VERSION, IMAGE, KIND
from sps_operator.controller.kube import group_clone, names
from sps_operator.controller.policies.claims import VolumePin, pin_to_node
from sps_operator.controller.sglang.flags import without_flag
from sps_operator.controller.sglang.podenv import escape
from sps_operator.controller.sglang.serverconfig import (
    CONST_TABLE_PATH,
    TABLE_PATH_FLAG,
    ServerCommand,
    find_server_container,
)
from sps_operator.tables.formats import SpsCostTable, diagonal_as_additive, load_sps_table_text

PROFILING_ENV_COMMON = {
    "SGLANG_DSPARK_ENABLE_SPS_RECORD": "1",
    "SGLANG_SIMULATE_ACC_LEN": "1.0",
    "SGLANG_SIMULATE_ACC_METHOD": "match-expected",
    # Newer SGLang then reports its resolved environment in /server_info, which the
    # profiler records beside the table (older builds ignore it).
    "SGLANG_EXPOSE_OWN_ENV_VARS": "1",
}
SERVER_CONTAINER = "sglang-server"
PROFILER_CONTAINER = "profiler"
OWN_CONTAINERS = frozenset({SERVER_CONTAINER, PROFILER_CONTAINER})
SEED_VOLUME = "sps-seed-table"
TABLE_VOLUME = "sps-table"
SEED_MOUNT_DIR = "/etc/sps/seed"
WORK_VOLUME = "sps-work"
WORK_DIR = "/tmp/sps"
TOKEN_VOLUME = "sps-profiler-token"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SERVER_WAIT_SECONDS = 1800
PROFILER_UID = 65532
# The `restricted` Pod Security Standard for the profiler container: it needs nothing more.
RESTRICTED_CONTAINER: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": PROFILER_UID,
    "runAsGroup": PROFILER_UID,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
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
        L.LABEL_PROFILE: names.label_value(profile.name),
        L.LABEL_PROFILE_UID: profile.uid,
        L.LABEL_COMPONENT: component,
        L.LABEL_MANAGED_BY: L.MANAGED_BY,
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
class JobDefaults:
    """What the operator's admin sets for every profiling Job (chart values); a profile's
    spec.job overrides them."""

    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    priority_class: str | None = None


@dataclass(frozen=True)
class RunPlan:
    """Everything needed to build one phase of a profiling run."""

    profile: ProfileRef
    spec: SpsProfileSpec
    run: str
    phase: RunPhase  # Diagonal runs static; OffDiagonal (Additive only) compact
    gpu_product: str
    fingerprint: str
    target_pod_spec: Mapping[str, Any] = field(default_factory=dict)
    server_container: str | None = None
    server: ServerCommand | None = None  # the target's server command line (Clone)
    server_port: int = 30000
    seed_table_config_map: str | None = None
    profiler_image: str = IMAGE
    # ConfigMaps that hold tables the target mounts (ours, or the AnnotateOnly stable one):
    # the clone never mounts them, so it never depends on the table it is about to produce.
    table_config_maps: frozenset[str] = frozenset()
    defaults: JobDefaults = field(default_factory=lambda: JobDefaults())
    # Where the target's ReadWriteOnce claims attach (claims.volume_pin): the clone runs there.
    volume_pin: VolumePin = field(default_factory=VolumePin)

    @property
    def job_name(self) -> str:
        return names.job_name(self.run, self.phase)

    @property
    def result_config_map(self) -> str:
        return names.result_config_map(self.run, self.phase)

    @property
    def account(self) -> str:
        return names.profiler_account(self.run)

    @property
    def group(self) -> group_clone.Group | None:
        """The target's multi-node group the clone repeats (None: one pod, or External)."""
        if self.spec.server.source == ServerSource.EXTERNAL:
            return None
        group = group_clone.group_of(self.server)
        if group is not None and "." in self.job_name:
            raise ValueError(
                f"a multi-node clone's pods are named {self.job_name}-<rank>, which must be a "
                "DNS label: name the SpsProfile without '.' to profile a multi-node server"
            )
        return group

    @property
    def leader_host(self) -> str:
        service = names.group_service(self.job_name)
        return group_clone.leader_host(self.job_name, service, self.profile.namespace)

    def labels(self) -> dict[str, str]:
        return {
            L.LABEL_RUN: self.run,
            L.LABEL_GPU: names.label_value(self.gpu_product),
            L.LABEL_FINGERPRINT: self.fingerprint,
        }


def verify_mode(spec: SpsProfileSpec, phase: RunPhase) -> str:
    # Diagonal rounds run full width (static); the off-diagonal phase trims (compact).
    return "compact" if phase == RunPhase.OFF_DIAGONAL else "static"


def sweep_argv(spec: SpsProfileSpec, phase: RunPhase) -> list[str]:
    """The sweep of one phase as `sps-profiler run` flags: the one spelling of the Job's
    command line the builder and the tests share (the profiler's parser reads it back in
    tests/unit/test_controller_acceptance.py)."""
    sweep = spec.table.sweep
    args: list[str] = []
    if sweep.batch_sizes:
        args += ["--batch-size", *[str(b) for b in sweep.batch_sizes]]
    elif sweep.max_batch_size:
        args += ["--max-batch-size", str(sweep.max_batch_size)]
    if phase == RunPhase.OFF_DIAGONAL:
        fracs = sweep.fracs or DEFAULT_ADDITIVE_FRACS
        args += ["--fracs", *[repr(float(f)) for f in fracs]]
    if sweep.input_len is not None:
        args += ["--input-len", str(sweep.input_len)]
    args += ["--context-len", str(sweep.context_len), "--repeats", str(sweep.repeats)]
    args += ["--ci-rel-width", repr(sweep.ci_rel_width)]
    if sweep.min_steady_steps is not None:
        args += ["--min-steady-steps", str(sweep.min_steady_steps)]
    if sweep.min_steady_seconds is not None:
        args += ["--min-steady-seconds", repr(sweep.min_steady_seconds)]
    if sweep.vocab_size is not None:
        args += ["--vocab-size", str(sweep.vocab_size)]
    args += ["--round-timeout", repr(sweep.round_timeout_seconds)]
    return args


def profiler_args(plan: RunPlan, base_url: str) -> list[str]:
    args = ["run", "--base-url", base_url, "--out", f"{WORK_DIR}/dspark_sps.json"]
    args += sweep_argv(plan.spec, plan.phase)
    args += ["--wait-for-server", str(SERVER_WAIT_SECONDS)]
    args += ["--publish-configmap", plan.result_config_map]
    args += ["--publish-namespace", plan.profile.namespace]
    if plan.group is not None:  # one pod template for all ranks: only rank 0 profiles
        args += ["--node-rank", f"$({group_clone.RANK_ENV})"]
    return args


def _with_env(
    env: Sequence[Mapping[str, Any]], overrides: Mapping[str, str], env_from: bool = False
) -> list[dict]:
    """`env` with `overrides` set. SGLang copies `SGL_X` over `SGLANG_X` at start, so an
    `SGL_` spelling of an override is dropped too; with an `envFrom` (which may carry one
    the operator cannot see, and which `env` wins over) the `SGL_` twin is set as well."""
    kept = [dict(e) for e in env if sglang_name(str(e.get("name"))) not in overrides]
    out = kept + [{"name": k, "value": v} for k, v in overrides.items()]
    if env_from:
        out += [{"name": sgl_twin(k), "value": v} for k, v in overrides.items() if sgl_twin(k) != k]
    return out


def is_table_volume(volume: Mapping[str, Any], table_config_maps: frozenset[str]) -> bool:
    """A volume that carries an SPS table (the one the operator injects, or one of the
    given ConfigMaps, directly or projected)."""
    if volume.get("name") == TABLE_VOLUME:
        return True
    sources = [volume.get("configMap") or {}]
    sources += [
        s.get("configMap") or {} for s in (volume.get("projected") or {}).get("sources") or []
    ]
    return any(src.get("name") in table_config_maps for src in sources)


def _mounts_without(container: Mapping[str, Any], dropped: set[str]) -> list[dict[str, Any]]:
    return [dict(m) for m in container.get("volumeMounts") or [] if m.get("name") not in dropped]


def server_sidecar(
    plan: RunPlan, container: Mapping[str, Any], dropped_volumes: set[str]
) -> dict[str, Any]:
    """A copy of the target's server container as a native sidecar in profiling mode.

    It keeps the container's own securityContext, image and resources. Its command line is
    the one the operator parsed (a plain `sh -c` script becomes the exec form), without
    the table flag: the clone starts without a table (phase 2 gets the seed table). A
    server written with the fzyzcjy fork's `const` keeps it where the clone runs compact
    without a seed (that fork refuses to start so). Its last log lines become its
    termination message, so a refusal to start is read from the pod's status."""
    sidecar = copy.deepcopy(dict(container))
    sidecar["name"] = SERVER_CONTAINER
    sidecar["restartPolicy"] = "Always"
    for key in ("livenessProbe", "readinessProbe", "startupProbe", "lifecycle"):
        sidecar.pop(key, None)
    server = plan.server
    if server is None:
        raise ValueError("a Clone run needs the target's parsed server command")
    args = without_flag(list(server.args), TABLE_PATH_FLAG)
    mounts = _mounts_without(sidecar, dropped_volumes)
    if plan.phase == RunPhase.OFF_DIAGONAL and plan.seed_table_config_map:
        # The phase-1 measurement as a seed table makes the server leave its verify-all
        # shortcut, so the forced budget fractions really trim the verify graph.
        args += [TABLE_PATH_FLAG, f"{SEED_MOUNT_DIR}/{L.TABLE_KEY}"]
        mounts.append({"name": SEED_VOLUME, "mountPath": SEED_MOUNT_DIR, "readOnly": True})
    elif server.table_path == CONST_TABLE_PATH and verify_mode(plan.spec, plan.phase) != "static":
        args += [TABLE_PATH_FLAG, CONST_TABLE_PATH]
    group = plan.group
    if group is not None:
        args = group_clone.group_args(args, group, plan.leader_host)
    sidecar["command"] = list(server.launcher)
    sidecar["args"] = args
    if mounts:
        sidecar["volumeMounts"] = mounts
    else:
        sidecar.pop("volumeMounts", None)
    # The values the fingerprint read of the list's variables, not the ConfigMap keys they
    # came from: an edit before the clone's pod starts cannot change what it measures.
    pinned = {read.name: escape(read.value) for read in server.envs}
    env = {
        **pinned,
        **server.env,
        **PROFILING_ENV_COMMON,
        "SGLANG_RAGGED_VERIFY_MODE": verify_mode(plan.spec, plan.phase),
    }
    sidecar["env"] = _with_env(sidecar.get("env") or [], env, bool(sidecar.get("envFrom")))
    sidecar["terminationMessagePolicy"] = "FallbackToLogsOnError"
    if group is not None:
        # No probes: only rank 0 serves HTTP, and every rank shares one pod template (the
        # profiler waits for the server itself).
        sidecar["env"] = group_clone.group_env(sidecar["env"], group, plan.leader_host)
        return sidecar
    probe = {
        "httpGet": {"path": "/health", "port": plan.server_port},
        "periodSeconds": 2,
        "failureThreshold": SERVER_WAIT_SECONDS // 2,
        "timeoutSeconds": 5,
    }
    sidecar["startupProbe"] = probe
    sidecar["readinessProbe"] = {**probe, "failureThreshold": 3}
    return sidecar


def copied_sidecar(container: Mapping[str, Any], dropped_volumes: set[str]) -> dict[str, Any]:
    """Another container of the target's pod (a proxy, a log shipper, a weights helper) as
    a native sidecar of the clone, started before its server: a server that needs it still
    works, and it stops when the profiler is done (a plain container would keep the Job's
    pod running). Its probes go: a native sidecar's startupProbe would hold back the
    containers after it, and nothing routes traffic to a clone."""
    sidecar = copy.deepcopy(dict(container))
    sidecar["restartPolicy"] = "Always"
    for key in ("livenessProbe", "readinessProbe", "startupProbe"):
        sidecar.pop(key, None)
    sidecar["volumeMounts"] = _mounts_without(container, dropped_volumes)
    return sidecar


def profiler_container(
    plan: RunPlan, base_url: str, server: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    job = plan.spec.job
    mounts: list[dict[str, Any]] = [
        {"name": WORK_VOLUME, "mountPath": WORK_DIR},
        {"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True},
    ]
    # The server's volumes at the same paths (read-only): the tokenizer path the server
    # reports in /server_info then resolves inside the profiler too.
    for mount in (server or {}).get("volumeMounts") or []:
        if mount.get("mountPath") not in (WORK_DIR, TOKEN_DIR):
            mounts.append({**dict(mount), "readOnly": True})
    container: dict[str, Any] = {
        "name": PROFILER_CONTAINER,
        "image": job.image or plan.profiler_image,
        "command": ["sps-profiler"],
        "args": profiler_args(plan, base_url),
        "env": [
            {"name": "SPS_PROFILER_RUN", "value": plan.run},
            # A read-only root file system: caches go to the work volume.
            {"name": "HOME", "value": WORK_DIR},
            *([group_clone.rank_env()] if plan.group is not None else []),
        ],
        "volumeMounts": mounts,
        "securityContext": copy.deepcopy(RESTRICTED_CONTAINER),
    }
    if job.resources is not None:
        container["resources"] = job.resources.to_k8s()
    return container


def token_volume() -> dict[str, Any]:
    """The API credentials, for the profiler container only (the cloned server runs the
    user's image and gets none): what the kubelet would otherwise mount into every
    container."""
    return {
        "name": TOKEN_VOLUME,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
                {
                    "configMap": {
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}
                        ]
                    }
                },
            ]
        },
    }


def pod_own_labels(plan: RunPlan) -> dict[str, str]:
    """The labels the operator itself puts on a profiling pod."""
    return {**base_labels(plan.profile, L.COMPONENT_POD), **plan.labels()}


def _clone_target(
    plan: RunPlan,
    pod: dict[str, Any],
    volumes: list[dict[str, Any]],
    init_containers: list[dict[str, Any]],
    node_selector: dict[str, str],
    tolerations: list[dict[str, Any]],
) -> dict[str, Any]:
    """Clone the target's server into the Job's pod (adds to the pod and the lists given:
    the target's volumes, init containers, sidecars, placement); returns the server
    container as the profiler sees it."""
    pod_spec = plan.target_pod_spec
    container = find_server_container(pod_spec, plan.server_container)
    if container is None:
        raise ValueError(f"the target has no container named {plan.server_container!r}")
    reserved = {WORK_VOLUME, TOKEN_VOLUME, SEED_VOLUME, TABLE_VOLUME}
    dropped = reserved | {
        str(v.get("name"))
        for v in pod_spec.get("volumes") or []
        if is_table_volume(v, plan.table_config_maps)
    }
    volumes += [
        copy.deepcopy(dict(v))
        for v in pod_spec.get("volumes") or []
        if v.get("name") not in dropped
    ]
    for init in pod_spec.get("initContainers") or []:
        copied = copy.deepcopy(dict(init))
        copied["volumeMounts"] = _mounts_without(init, dropped)
        init_containers.append(copied)
    init_containers += [
        copied_sidecar(c, dropped)
        for c in pod_spec.get("containers") or []
        if c.get("name") != container.get("name")
    ]
    init_containers.append(server_sidecar(plan, container, dropped))
    for copied in init_containers[:-1]:
        if copied.get("name") in OWN_CONTAINERS:  # the clone's own names win
            copied["name"] = f"target-{copied['name']}"
    server_view = {**dict(container), "volumeMounts": _mounts_without(container, dropped)}
    node_selector.update(pod_spec.get("nodeSelector") or {})
    tolerations += [copy.deepcopy(dict(t)) for t in pod_spec.get("tolerations") or []]
    # The pod keeps the target's own security context (the server needs it).
    for key in (
        "affinity",
        "imagePullSecrets",
        "priorityClassName",
        "runtimeClassName",
        "securityContext",
    ):
        if pod_spec.get(key):
            pod[key] = copy.deepcopy(pod_spec[key])
    if plan.volume_pin.node:
        pin_to_node(pod, plan.volume_pin.node)
    if plan.phase == RunPhase.OFF_DIAGONAL and plan.seed_table_config_map:
        volumes.append({"name": SEED_VOLUME, "configMap": {"name": plan.seed_table_config_map}})
    return server_view


def profiling_job(plan: RunPlan) -> dict[str, Any]:
    """The profiling Job: backoffLimit 0 (profiling failures are rarely transient and GPU
    time is expensive; the operator decides about retries)."""
    spec = plan.spec
    volumes: list[dict[str, Any]] = [{"name": WORK_VOLUME, "emptyDir": {}}, token_volume()]
    init_containers: list[dict[str, Any]] = []
    node_selector: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []
    pod: dict[str, Any] = {"restartPolicy": "Never", "automountServiceAccountToken": False}
    if spec.server.source == ServerSource.EXTERNAL:
        base_url = str(spec.server.url).rstrip("/")
        containers = [profiler_container(plan, base_url)]
    else:
        base_url = f"http://127.0.0.1:{plan.server_port}"
        server_view = _clone_target(plan, pod, volumes, init_containers, node_selector, tolerations)
        containers = [profiler_container(plan, base_url, server_view)]
    node_selector.update(spec.job.node_selector or {})
    if spec.server.source != ServerSource.EXTERNAL:
        # Last, so it always wins: a clone measures the GPU product its table is labelled
        # with (a spec.job.nodeSelector naming another one is refused: policy.pin_refusal).
        node_selector[spec.gpu_product_label] = plan.gpu_product
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
    priority = spec.job.priority_class_name or plan.defaults.priority_class
    if priority:
        pod["priorityClassName"] = priority
    # The user's labels and annotations (and the operator's defaults) first: the operator's
    # own sps.dev/* labels, which it selects by, always win.
    extra_labels = {**plan.defaults.labels, **(spec.job.labels or {})}
    extra_annotations = {**plan.defaults.annotations, **(spec.job.annotations or {})}
    job_labels = {**extra_labels, **plan.labels()}
    pod_labels = {**extra_labels, **pod_own_labels(plan)}
    meta = object_meta(plan.profile, plan.job_name, L.COMPONENT_JOB, job_labels)
    if plan.volume_pin.node:
        # Read back while the Job waits: why it waits for that node's GPUs.
        meta["annotations"] = {L.ANNOTATION_VOLUME_PIN: plan.volume_pin.describe()}
    template_meta: dict[str, Any] = {"labels": pod_labels}
    if extra_annotations:
        meta["annotations"] = {**extra_annotations, **(meta.get("annotations") or {})}
        template_meta["annotations"] = dict(extra_annotations)
    job_spec: dict[str, Any] = {
        "backoffLimit": 0,
        # The run's own deadline counts from when the Job runs (the operator enforces it);
        # the Job's bound adds the longest wait for GPUs, so it holds with the operator down.
        "activeDeadlineSeconds": spec.job.active_deadline_seconds
        + spec.capacity.wait_timeout_seconds,
        "template": {"metadata": template_meta, "spec": pod},
    }
    group = plan.group
    if group is not None:
        # A lost rank fails its index, and the Job, at once (backoffLimitPerIndex).
        del job_spec["backoffLimit"]
        job_spec.update(group_clone.job_spec_fields(group))
        group_clone.drop_partial_admission(meta)
        pod["subdomain"] = names.group_service(plan.job_name)
    if extra_labels.get(L.LABEL_KUEUE_QUEUE):
        job_spec["suspend"] = True  # Kueue admits it (and unsuspends it) when quota allows
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": job_spec}


def group_service(plan: RunPlan, job_uid: str) -> dict[str, Any]:
    """The headless Service of a multi-node clone, labelled with the run and owned by the
    run's Job (`job_uid`): the garbage collector deletes it with the Job."""
    name = names.group_service(plan.job_name)
    meta = object_meta(plan.profile, name, L.COMPONENT_GROUP_SERVICE, plan.labels())
    meta["ownerReferences"] = [group_clone.job_owner_reference(plan.job_name, job_uid)]
    return group_clone.headless_service(meta, plan.job_name)


def additive_seed(diagonal_json: str) -> str:
    """Phase 2's seed table: the phase-1 diagonal measurement in the additive format."""
    table = load_sps_table_text(diagonal_json)
    if not isinstance(table, SpsCostTable):
        raise ValueError("phase 1 did not produce a diagonal table")
    return diagonal_as_additive(table).to_json()


def result_config_map(plan: RunPlan) -> dict[str, Any]:
    """Created empty by the operator; the profiler (and only it) patches it."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(
            plan.profile, plan.result_config_map, L.COMPONENT_RESULT, plan.labels()
        ),
        "data": {},
    }


def profiler_rbac(plan: RunPlan) -> list[dict[str, Any]]:
    """ServiceAccount + Role + RoleBinding: the Job may write ONLY its result ConfigMaps."""
    account = plan.account
    results = [names.result_config_map(plan.run, RunPhase.DIAGONAL)]
    if plan.spec.table.kind == TableKind.ADDITIVE:
        results.append(names.result_config_map(plan.run, RunPhase.OFF_DIAGONAL))
    meta = object_meta(plan.profile, account, L.COMPONENT_RBAC, {L.LABEL_RUN: plan.run})
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
