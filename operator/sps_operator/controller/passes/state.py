"""The state one reconcile pass works on: what it observed (`Snapshot`, `Target`), what it
decides (`Pass.status`, handed from step to step) and where it writes (`Pass.kube`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from sps_operator.api import labels as L
from sps_operator.api.models import SpsProfile
from sps_operator.api.spec import RolloutMode, SpsProfileSpec
from sps_operator.api.status import RunStatus, SpsProfileStatus, TableRef, TargetStatus
from sps_operator.constants import IMAGE
from sps_operator.controller.kube.builders import JobDefaults, ProfileRef
from sps_operator.controller.kube.client import KubeApi, Obj, owned_by
from sps_operator.controller.kube.envsources import EnvSources, read_env_config_maps
from sps_operator.controller.kube.projections import data_omitted, template_omitted
from sps_operator.controller.policies import clocks, workloads
from sps_operator.controller.policies.borrow import PoolBid
from sps_operator.controller.policies.claims import ClaimInfo
from sps_operator.controller.policies.job_policy import BORROW_BOUNDS, JobPolicy, ServiceInfo
from sps_operator.controller.policies.kueue import KUEUE_RECHECK_SECONDS
from sps_operator.controller.policies.ownership import ProfileSummary
from sps_operator.controller.policies.placement import PodInfo
from sps_operator.controller.policies.selectors import matches_selector
from sps_operator.controller.process.memories import Rewrites
from sps_operator.controller.process.metrics import Metrics
from sps_operator.controller.sglang.podenv import ConfigMapEnv
from sps_operator.controller.sglang.serverconfig import ServerCommand, ServerConfig


@dataclass(frozen=True)
class Settings:
    """Operator-wide settings (flags of `sps-operator run`, values of the chart)."""

    profiler_image: str = IMAGE
    gpu_debounce_seconds: float = 30.0
    # What profile authors may ask of a profiling Job (the admin's jobPolicy).
    policy: JobPolicy = field(default_factory=JobPolicy)
    # Labels, annotations and a PriorityClass for every profiling Job (a Kueue queue, say).
    job_defaults: JobDefaults = field(default_factory=JobDefaults)
    # A fit runs in a child process with these bounds (its cost depends on what a Job
    # published); in-process only where a test wants speed.
    isolate_fits: bool = True
    fit_seconds: float = 120.0
    fit_memory_mib: int = 1024
    # BorrowReplica: where the per-GPU-product pool Leases live (the operator's namespace,
    # which no tenant can write), and how often a pass may look for orphaned ones.
    pool_namespace: str = "default"
    pool_sweep_seconds: float = 60.0
    # The admin's bounds of every hold of the shared GPU pool (chart borrowPolicy; no
    # tenant value lengthens them): a replica lent to a run (from the borrow to the run's
    # end), the slot kept for a rollout after it, a waiting run's place ahead of others.
    max_lent_seconds: float = BORROW_BOUNDS.max_lent_seconds
    max_rollout_hold_seconds: float = BORROW_BOUNDS.max_rollout_hold_seconds
    max_pool_turn_seconds: float = BORROW_BOUNDS.max_pool_turn_seconds
    # How often a run queued in Kueue looks at Kueue's words again (kueue.py; the flag
    # exists for the test bed, whose scenarios would otherwise wait out 30 s per step).
    kueue_recheck_seconds: float = KUEUE_RECHECK_SECONDS
    # Minimum time between scheduled runs and between rollouts onto one Deployment that
    # already runs a table measured for it (the flag's and chart's default is 1 h; 0 here
    # so a test states the interval it means).
    min_refresh_interval_seconds: float = 0.0
    # The most targets of one profile mid-rollout at once, whatever its
    # spec.rollout.maxConcurrent asks (the flag's and chart's default is 10; 0, no ceiling,
    # here so a test states the one it means).
    max_concurrent_rollouts: int = 0
    # How long a roll of a StatefulSet or LeaderWorkerSet may take before it counts as
    # failed and rolls back (those kinds have no progressDeadlineSeconds; a Deployment's
    # own deadline counts for it).
    workload_progress_seconds: float = 600.0
    # Ask the serving servers for their /server_info to confirm Live (the flag's and
    # chart's default is on; off here: a unit test's pods have no server behind them).
    confirm_servers: bool = False


@dataclass(frozen=True)
class Snapshot:
    """Everything a pass reads, taken once at its start: built straight from the
    operator's caches on the event loop (`indexes.world_for`) or, in the unit tests, from
    LISTs through the fake API (tests/unit/api_snapshot.py). `for_profile` then applies
    the rules of what is the profile's, whatever the source handed over. Steps read only
    this and write through `KubeApi`."""

    # Candidates for spec.selector; after `for_profile`, those it selects, by name.
    deployments: Sequence[Obj] = ()
    jobs: Mapping[str, Obj] = field(default_factory=dict)  # the profile's (`belongs_to`), by name
    config_maps: Mapping[str, Obj] = field(default_factory=dict)  # the profile's, by name
    stable: Obj | None = None  # AnnotateOnly: the stable ConfigMap the Deployments mount
    # The SpsProfiles of the namespace that select (or are recorded on) one of the selected
    # Deployments or name the stable ConfigMap: all that ownership must weigh.
    profiles: Sequence[ProfileSummary] = ()
    pods: Sequence[PodInfo] = ()
    node_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    pdbs: Sequence[Obj] = ()  # PodDisruptionBudgets of the namespace
    hpas: Sequence[Obj] = ()  # HorizontalPodAutoscalers of the namespace
    borrowed: Sequence[Obj] = ()  # Deployments of the namespace carrying a borrow record
    # Which of this profile's ConfigMaps (and its stable one) a Deployment of the namespace
    # mounts, selected or not: nothing mounted is ever deleted.
    mounted: frozenset[str] = frozenset()
    # What selects pods in the namespace and may select this profile's profiling pod (a
    # superset: the policy matches them): it must never pass for one of their pods.
    pod_selecting_deployments: Sequence[Obj] = ()
    services: Sequence[ServiceInfo] = ()  # those, and the one spec.server.url names
    # The ConfigMaps the selected Deployments read env from, by name (None: missing);
    # `for_profile` reads them through `env_sources` (the cache) or the API.
    env_config_maps: Mapping[str, ConfigMapEnv | None] = field(default_factory=dict)
    env_sources: EnvSources | None = None
    # Runs of any namespace waiting for their turn to borrow on this run's GPU product.
    pool_bids: Sequence[PoolBid] = ()
    # The PersistentVolumeClaims the selected Deployments mount, by name (absent: not seen).
    claims: Mapping[str, ClaimInfo] = field(default_factory=dict)
    # The kinds spec.targetKinds names that the API server does not serve (`for_profile`).
    unserved_kinds: tuple[str, ...] = ()

    @classmethod
    def empty(cls) -> Snapshot:
        """Before the pass has read anything."""
        return cls()

    def for_profile(self, kube: KubeApi, ref: ProfileRef, spec: SpsProfileSpec) -> Snapshot:
        """The same snapshot with the rules of what is the profile's applied: the
        Deployments its validated selector selects in its namespace, its own Jobs and
        ConfigMaps, its namespace's borrowed and pod-selecting Deployments; and what only
        the API may tell (an AnnotateOnly stable ConfigMap the caches do not hold yet, the
        ConfigMaps the servers read env from), read here, off the event loop."""
        selector = spec.selector.to_k8s()
        kinds = [str(k) for k in spec.target_kinds or workloads.KIND_NAMES]
        selected = [
            whole
            for d in self.deployments
            if in_namespace(d, ref.namespace)
            and workloads.kind_of(d).kind in kinds
            and matches_selector(selector, (d.get("metadata") or {}).get("labels") or {})
            and (whole := _whole_deployment(kube, ref.namespace, d)) is not None
        ]
        # Only kinds the profile names are asked about (the default takes what is served).
        unserved = tuple(k for k in kinds if spec.target_kinds and not kube.serves(k))
        stable_name = stable_table_name(spec)
        stable = None
        if stable_name:
            stable = self.stable
            if (
                stable is None
                or not in_namespace(stable, ref.namespace)
                or stable["metadata"].get("name") != stable_name
                or data_omitted(stable)  # its bytes are read: larger than the caches keep
            ):
                stable = kube.get("ConfigMap", ref.namespace, stable_name)
        return replace(
            self,
            deployments=sorted(selected, key=lambda d: d["metadata"]["name"]),
            jobs=owned_by_name(self.jobs.values(), ref),
            config_maps=owned_by_name(self.config_maps.values(), ref),
            stable=stable,
            borrowed=[d for d in self.borrowed if in_namespace(d, ref.namespace)],
            pod_selecting_deployments=[
                d for d in self.pod_selecting_deployments if in_namespace(d, ref.namespace)
            ],
            env_config_maps=read_env_config_maps(kube, ref.namespace, selected, self.env_sources),
            unserved_kinds=unserved,
        )


def _whole_deployment(kube: KubeApi, namespace: str, dep: Obj) -> Obj | None:
    """`dep` with the pod template the pass reads: as the caches keep it, or read with a
    GET when they keep only a stub of a template within the bound the pass parses (None:
    gone, or another object under its name since; the caches will say)."""
    if not template_omitted(dep):
        return dep
    meta = dep.get("metadata") or {}
    kind = workloads.kind_of(dep).kind  # the caches' value says its watch's kind
    read = kube.get(kind, namespace, str(meta.get("name") or ""))
    if read is None or (read.get("metadata") or {}).get("uid") != meta.get("uid"):
        return None
    return {**read, "kind": kind}  # as the caches file it


# What a pass is handed: the snapshot, or (the unit tests' LISTs) how to read it inside the
# pass, where an API error is the pass's to report.
World = Snapshot | Callable[[], Snapshot]

# The operator's caches follow the API by watches: an object it created a moment ago may
# not be in them yet. For this long, an object the status names but the snapshot lacks is
# "not seen yet", not "gone".
CACHE_GRACE = timedelta(seconds=60)


def stable_table_name(spec: SpsProfileSpec) -> str | None:
    """The AnnotateOnly stable ConfigMap's name (None in other rollout modes)."""
    rollout = spec.rollout
    return rollout.table_config_map if rollout.mode == RolloutMode.ANNOTATE_ONLY else None


def in_namespace(obj: Mapping[str, Any] | None, namespace: str) -> bool:
    return ((obj or {}).get("metadata") or {}).get("namespace") == namespace


def belongs_to(obj: Mapping[str, Any] | None, ref: ProfileRef) -> bool:
    """The one rule of what is a profile's: in its namespace and owned by it (controller
    ownerReference to its UID). Labels and UIDs identify; they never authorize."""
    return in_namespace(obj, ref.namespace) and owned_by(obj, ref.uid)


def owned_by_name(objects: Iterable[Obj], ref: ProfileRef) -> dict[str, Obj]:
    """The profile's own objects among `objects`, by name."""
    return {o["metadata"]["name"]: o for o in objects if belongs_to(o, ref)}


def by_name(objects: Iterable[Obj]) -> dict[str, Obj]:
    return {str((o.get("metadata") or {}).get("name", "")): o for o in objects}


@dataclass
class Target:
    """A workload the profile selects (a Deployment, StatefulSet or LeaderWorkerSet:
    `policies.workloads`), as this pass understood it."""

    deployment: Obj  # the workload object, of any of those kinds
    name: str
    container: Mapping[str, Any] | None = None
    command: ServerCommand | None = None
    config: ServerConfig | None = None
    fingerprint: str = ""  # the table's key: the server's inputs and the table spec
    legacy_fingerprint: str = ""  # the same by fingerprint version 1 (fingerprint_v1)
    changes: list[str] = field(default_factory=list)  # since the table it runs was measured
    table_source: str | None = None  # compat.table_source
    gpu: str | None = None  # settled GPU product (None: not placed, moving, or mixed)
    products: frozenset[str] = frozenset()
    observed_gpu: str | None = None  # what the pods run on now (placement.MIXED for several)
    observed_since: datetime | None = None
    unplaced: str | None = None  # why its running pods tell no GPU product (placement)
    owner: str | None = None  # the profile that serves it
    reason: str | None = None  # why the operator leaves it alone (CamelCase)
    problem: str | None = None  # ... and what to do about it

    def server_report(self) -> dict[str, Any]:
        """What status says about the server itself (TargetStatus fields)."""
        if self.config is None:
            return {}
        return {
            "sglang_version": self.config.version.describe(),
            "table_source": self.table_source,
            "unfingerprinted": list(self.config.unfingerprinted) or None,
        }

    def refuse(self, reason: str, problem: str) -> None:
        if self.problem is None:
            self.reason, self.problem = reason, problem

    @property
    def usable(self) -> bool:
        """Profiled and served: no problem, and settled on one GPU product."""
        return self.problem is None and self.gpu is not None

    @property
    def kind(self) -> str:
        return workloads.kind_of(self.deployment).kind

    @property
    def template(self) -> Mapping[str, Any]:
        """The server's pod template (a LeaderWorkerSet's leader, or its one template)."""
        return workloads.server_template(self.deployment)

    @property
    def pod_spec(self) -> Mapping[str, Any]:
        return self.template.get("spec") or {}

    def _annotation(self, key: str) -> str | None:
        """The operator's pod-template annotation `key`, when every template of the
        workload carries the same value (a LeaderWorkerSet whose leader and workers
        disagree runs no one table)."""
        found = {
            str(((t.get("metadata") or {}).get("annotations") or {}).get(key) or "")
            for _, t in workloads.templates(self.deployment)
        }
        return next(iter(found)) or None if len(found) == 1 else None

    @property
    def running_hash(self) -> str | None:
        """Hash of the table the pod template says it runs (the operator's annotation)."""
        return self._annotation(L.ANNOTATION_TABLE_HASH)

    @property
    def running_config_map(self) -> str | None:
        return self._annotation(L.ANNOTATION_TABLE)


class Capacity(Protocol):
    """The GPU capacity service (controller/capacity/service.py) as the reconcilers see
    it: the one door to the pool, borrowing, Kueue and cost."""

    def job_labels(self, p: Pass) -> dict[str, str]: ...
    def run_limit(self, p: Pass) -> tuple[int, str]: ...
    def follow_wait(self, p: Pass, run: RunStatus, job: Mapping[str, Any]) -> str | None: ...
    def reattach_borrow(self, p: Pass, run: RunStatus) -> None: ...
    def close_segment(self, p: Pass, run: RunStatus) -> None: ...
    def return_for_run(
        self, p: Pass, run: RunStatus, table: TableRef | None = None, why: str = ""
    ) -> None: ...
    def follow_rollout_borrow(self, p: Pass, statuses: Sequence[TargetStatus]) -> None: ...
    def return_orphans(self, p: Pass) -> None: ...


@dataclass
class Pass:
    """One level-triggered pass over an SpsProfile."""

    body: Mapping[str, Any]
    profile: SpsProfile
    ref: ProfileRef
    status: SpsProfileStatus  # the new status, handed from step to step
    now: datetime
    generation: int | None
    kube: KubeApi
    settings: Settings
    metrics: Metrics
    snapshot: Snapshot
    capacity: Capacity
    targets: list[Target] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    created: dict[str, Obj] = field(default_factory=dict)  # ConfigMaps written in this pass
    # ConfigMaps read back whole in this pass (the caches keep only their metadata).
    read_back: dict[str, Obj | None] = field(default_factory=dict)
    wake: float | None = None  # seconds until this profile needs its next pass
    returned: set[str] = field(default_factory=set)  # Deployments given their replica back
    # What the pool Leases recorded when this pass read them, by GPU product (dropped when
    # this pass writes one): a pass reads each at most once.
    pool_reads: dict[str, Any] = field(default_factory=dict)
    stable_conflict: str | None = None  # AnnotateOnly: why another profile writes the stable
    step: str = "start"  # the step running, for error reports
    # The operator's write-backs of what another writer undoes, process-wide (backoff).
    rewrites: Rewrites = field(default_factory=Rewrites)
    # What another writer keeps undoing now, as (reason, message): Degraded says so.
    contested: list[tuple[str, str]] = field(default_factory=list)

    @property
    def spec(self) -> SpsProfileSpec:
        return self.profile.spec

    @property
    def namespace(self) -> str:
        return self.ref.namespace

    @property
    def min_interval_seconds(self) -> float:
        """The minimum time between scheduled runs and between rollouts onto a Deployment
        that already runs a table measured for it: the operator's, lengthened (never
        shortened) by the profile's spec.refresh.minIntervalSeconds."""
        own = self.spec.refresh.min_interval_seconds or 0
        return max(float(own), self.settings.min_refresh_interval_seconds)

    def event(self, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))

    def config_map(self, name: str) -> Obj | None:
        """One of this profile's ConfigMaps: as read at the start, or created since. One
        whose data the caches left out (`projections.data_omitted`: larger than they keep)
        is read once per pass with a GET, and only while it is still the same object."""
        cm = self.snapshot.config_maps.get(name) or self.created.get(name)
        if cm is None or not data_omitted(cm):
            return cm
        if name in self.created:
            return self.created[name]
        if name not in self.read_back:
            read = self.kube.get("ConfigMap", self.namespace, name)
            uid = (cm.get("metadata") or {}).get("uid")
            same = read is not None and (read.get("metadata") or {}).get("uid") == uid
            self.read_back[name] = read if same else None
        return self.read_back[name]

    def wake_within(self, seconds: float) -> None:
        """Ask for the next pass no later than `seconds` from now."""
        self.wake = seconds if self.wake is None else min(self.wake, seconds)

    def recent(self, stamp: str | None) -> bool:
        """`stamp` (RFC 3339) lies within the cache grace period. A time further ahead of
        this replica's clock than the skew bound is not recent: another replica's clock
        must not make "a moment ago" last for hours."""
        when = clocks.trusted(stamp, self.now)
        return when is not None and self.now - when < CACHE_GRACE

    def target(self, name: str) -> Target | None:
        return next((t for t in self.targets if t.name == name), None)
