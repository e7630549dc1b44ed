"""One level-triggered pass over an SpsProfile: observe, then trigger → run → collect/fit/
gate → publish → roll out → trim history → report. Each step is idempotent; the state
that must survive a restart lives in `status` and in deterministic object names."""

from __future__ import annotations

import hashlib
import json
import logging
import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from sps_operator.api.models import (
    FailureRecord,
    RolloutMode,
    RunPhase,
    RunStatus,
    ServerSource,
    SpsProfile,
    SpsProfileSpec,
    SpsProfileStatus,
    TableKind,
    TableRef,
    TargetStatus,
)
from sps_operator.constants import IMAGE
from sps_operator.controller import builders, names
from sps_operator.controller import conditions as cond
from sps_operator.controller.gates import check_gates
from sps_operator.controller.history import PublishedTable, tables_to_delete
from sps_operator.controller.kube import Kube
from sps_operator.controller.metrics import Metrics
from sps_operator.controller.placement import Debouncer, PodInfo, placement
from sps_operator.controller.results import (
    api_quality,
    fit_rounds,
    read_run_result,
    rounds_jsonl,
)
from sps_operator.controller.serverconfig import (
    TABLE_PATH_FLAG,
    find_server_container,
    server_config,
    table_fingerprint,
)
from sps_operator.controller.triggers import (
    REPROFILE,
    SCHEDULE,
    TOKEN,
    TargetView,
    decide_run,
    parse_time,
    schedule_state,
    target_table_state,
    time_str,
)
from sps_operator.tables.formats import load_sps_table_text

log = logging.getLogger("sps_operator.reconcile")

# Event reasons (constants, like Dynamo's).
EV_RUN_STARTED = "ProfilingStarted"
EV_PHASE2 = "OffDiagonalPhaseStarted"
EV_RUN_FAILED = "ProfilingFailed"
EV_PUBLISHED = "TablePublished"
EV_REUSED = "TableReused"
EV_REJECTED = "TableRejected"
EV_ROLLED = "RolloutApplied"
EV_ROLLOUT_FAILED = "RolloutFailed"
EV_MIXED = "MixedGpuProducts"
EV_JOB_CREATE_FAILED = "JobCreateFailed"
MIXED = "<mixed>"


@dataclass
class Settings:
    profiler_image: str = IMAGE
    gpu_debounce_seconds: float = 30.0


@dataclass
class Target:
    deployment: dict[str, Any]
    name: str
    container: Mapping[str, Any] | None
    fingerprint: str = ""
    port: int = 30000
    gpu: str | None = None
    products: frozenset[str] = frozenset()
    problem: str | None = None


def selector_string(selector: Mapping[str, Any]) -> str:
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


def table_hash(table_json: str) -> str:
    return hashlib.sha256(table_json.encode()).hexdigest()[:16]


@dataclass
class Pass:
    """The state of one reconcile pass."""

    body: Mapping[str, Any]
    profile: SpsProfile
    ref: builders.ProfileRef
    status: SpsProfileStatus
    now: datetime
    generation: int | None
    events: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def spec(self) -> SpsProfileSpec:
        return self.profile.spec

    def event(self, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))


class Reconciler:
    def __init__(
        self,
        kube: Kube,
        settings: Settings | None = None,
        clock: Callable[[], datetime] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.kube = kube
        self.settings = settings or Settings()
        self.clock = clock or (lambda: datetime.now(UTC))
        self.metrics = metrics or Metrics()
        self.debouncer = Debouncer(timedelta(seconds=self.settings.gpu_debounce_seconds))

    # ------------------------------------------------------------------ entry

    def reconcile(
        self,
        body: Mapping[str, Any],
        pods: Sequence[PodInfo],
        node_labels: Mapping[str, Mapping[str, str]],
    ) -> None:
        now = self.clock().replace(microsecond=0)
        meta = body.get("metadata", {})
        name, namespace = meta["name"], meta["namespace"]
        if meta.get("deletionTimestamp"):
            return
        try:
            profile = SpsProfile.model_validate(body)
        except ValidationError as exc:
            self._report_invalid(body, exc, now)
            return
        p = Pass(
            body=body,
            profile=profile,
            ref=builders.ProfileRef(name, namespace, meta["uid"]),
            status=profile.status.model_copy(deep=True),
            now=now,
            generation=meta.get("generation"),
        )
        before = self._status_dict(profile.status)
        self._refresh_requests(p, meta)
        targets = self._observe_targets(p, pods, node_labels)
        if p.status.current_run is not None:
            self._progress_run(p, targets)
        if p.status.current_run is None:
            self._maybe_start_run(p, targets)
        self._rollout(p, targets)
        self._trim_history(p)
        self._report(p, targets)
        after = self._status_dict(p.status)
        if after != before:
            self.kube.patch_status(namespace, name, after)
        for type_, reason, message in p.events:
            self.kube.event(body, type_, reason, message, now)

    @staticmethod
    def _status_dict(status: SpsProfileStatus) -> dict[str, Any]:
        wire = status.to_k8s()
        # A merge patch removes a field only when it is sent as null.
        return {
            (f.alias or n): wire.get(f.alias or n) for n, f in SpsProfileStatus.model_fields.items()
        }

    def _report_invalid(self, body: Mapping[str, Any], exc: ValidationError, now: datetime) -> None:
        meta = body["metadata"]
        raw_status = body.get("status") or {}
        try:
            status = SpsProfileStatus.model_validate(raw_status)
        except ValidationError:
            status = SpsProfileStatus()
        before = self._status_dict(status)
        message = "; ".join(
            f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        status.conditions = cond.set_condition(
            status.conditions,
            cond.READY,
            False,
            "InvalidSpec",
            message,
            now,
            meta.get("generation"),
        )
        status.observed_generation = meta.get("generation")
        after = self._status_dict(status)
        if after != before:
            self.kube.patch_status(meta["namespace"], meta["name"], after)

    # ------------------------------------------------------------------ trigger inputs

    def _refresh_requests(self, p: Pass, meta: Mapping[str, Any]) -> None:
        st, spec, now = p.status, p.spec, p.now

        def request(reason: str) -> None:
            st.refresh_requested_at = cond.rfc3339(now)
            st.refresh_reason = reason

        token = spec.refresh.token
        if token and token != st.observed_token:
            if st.observed_token is not None or st.tables:
                request(TOKEN)
            st.observed_token = token
        annotation = (meta.get("annotations") or {}).get(names.ANNOTATION_REPROFILE)
        if annotation and annotation != st.observed_reprofile:
            request(REPROFILE)
            st.observed_reprofile = annotation
        sched = schedule_state(
            spec.refresh.schedule, st.last_schedule_time, meta.get("creationTimestamp"), now
        )
        if sched.due:
            st.last_schedule_time = cond.rfc3339(now)
            if st.tables:
                request(SCHEDULE)
        st.next_schedule_time = time_str(sched.next_time)

    def _observe_targets(
        self,
        p: Pass,
        pods: Sequence[PodInfo],
        node_labels: Mapping[str, Mapping[str, str]],
    ) -> list[Target]:
        selector = p.spec.selector.to_k8s()
        deployments = self.kube.list_deployments(p.ref.namespace, selector_string(selector))
        table_spec = p.spec.table.to_k8s()
        targets: list[Target] = []
        keys: list[str] = []
        for dep in sorted(deployments, key=lambda d: d["metadata"]["name"]):
            name = dep["metadata"]["name"]
            pod_spec = dep.get("spec", {}).get("template", {}).get("spec", {})
            container = find_server_container(pod_spec, p.spec.server_container)
            target = Target(deployment=dep, name=name, container=container)
            targets.append(target)
            if container is None:
                target.problem = (
                    f"no container named {p.spec.server_container!r}; set spec.serverContainer "
                    f"to one of {[c.get('name') for c in pod_spec.get('containers') or []]}"
                )
                continue
            config = server_config(container)
            target.fingerprint = table_fingerprint(config, table_spec)
            target.port = config.port
            pod_selector = dep.get("spec", {}).get("selector") or {}
            where = placement(pod_selector, pods, node_labels, p.spec.gpu_product_label)
            target.products = where.products
            raw = MIXED if where.mixed else where.product
            key = f"{p.ref.namespace}/{name}"
            keys.append(key)
            stable = self.debouncer.observe(key, raw, p.now)
            if stable == MIXED:
                target.problem = (
                    f"pods run on several GPU products ({', '.join(sorted(where.products))}); "
                    "pin the Deployment to one product with a nodeSelector on "
                    f"{p.spec.gpu_product_label}"
                )
            else:
                target.gpu = stable
        return targets

    # ------------------------------------------------------------------ run

    def _views(self, targets: Sequence[Target]) -> list[TargetView]:
        return [
            TargetView(t.name, t.gpu, t.fingerprint)
            for t in targets
            if t.problem is None and t.container is not None
        ]

    def _maybe_start_run(self, p: Pass, targets: Sequence[Target]) -> None:
        st = p.status
        request = decide_run(
            p.spec,
            self._views(targets),
            st.tables,
            st.refresh_requested_at,
            st.refresh_reason,
            st.last_failure,
            p.now,
        )
        if request is None:
            return
        target = next(t for t in targets if t.name == request.target)
        run = names.run_name(p.ref.name, request.gpu_product, request.fingerprint, request.nonce)
        self._cleanup_runs(p, keep=run)
        # An External server cannot be restarted in static mode for a diagonal phase, nor
        # given a seed table: an Additive profile against it is the off-diagonal phase alone.
        external_additive = (
            p.spec.server.source == ServerSource.EXTERNAL
            and p.spec.table.kind == TableKind.ADDITIVE
        )
        phase = 2 if external_additive else 1
        plan = self._plan(p, target, run, phase, request.gpu_product, request.fingerprint, None)
        try:
            self._create_phase(plan, with_rbac=True)
        except (ApiException, ValueError) as exc:
            # A Job the API server rejects will not pass on retry without a change; record it
            # like a failed run (same backoff), so status says why nothing is profiling.
            detail = exc.body if isinstance(exc, ApiException) and exc.body else str(exc)
            st.last_failure = FailureRecord(
                run=run,
                reason="JobCreateFailed",
                message=f"could not create the profiling Job {plan.job_name}: {detail}"[:4000],
                at=cond.rfc3339(p.now),
                gpu_product=request.gpu_product,
                fingerprint=request.fingerprint,
                attempts=request.attempt,
                trigger_key=request.trigger_key,
            )
            p.event("Warning", EV_JOB_CREATE_FAILED, st.last_failure.message)
            return
        st.current_run = RunStatus(
            name=run,
            job=plan.job_name,
            phase=RunPhase.OFF_DIAGONAL if phase == 2 else RunPhase.DIAGONAL,
            gpu_product=request.gpu_product,
            fingerprint=request.fingerprint,
            target=target.name,
            trigger=request.trigger,
            started_at=cond.rfc3339(p.now),
            trigger_key=request.trigger_key,
            attempt=request.attempt,
        )
        p.event(
            "Normal",
            EV_RUN_STARTED,
            f"{request.trigger}: profiling {target.name} on {request.gpu_product} "
            f"(Job {plan.job_name}, attempt {request.attempt})",
        )
        self.metrics.run_started(p.ref)

    def _plan(
        self,
        p: Pass,
        target: Target,
        run: str,
        phase: int,
        gpu: str,
        fingerprint: str,
        seed: str | None,
    ) -> builders.RunPlan:
        pod_spec = target.deployment.get("spec", {}).get("template", {}).get("spec", {})
        return builders.RunPlan(
            profile=p.ref,
            spec=p.spec,
            run=run,
            phase=phase,
            gpu_product=gpu,
            fingerprint=fingerprint,
            target_pod_spec=pod_spec,
            server_container=(target.container or {}).get("name"),
            server_port=target.port,
            seed_table_config_map=seed,
            profiler_image=self.settings.profiler_image,
        )

    def _create_phase(self, plan: builders.RunPlan, with_rbac: bool) -> None:
        # Order matters for restarts: everything the Job needs exists before the Job.
        if with_rbac and not plan.spec.job.service_account_name:
            for obj in builders.profiler_rbac(plan):
                self.kube.create(obj)
        self.kube.create(builders.result_config_map(plan))
        created = self.kube.create(builders.profiling_job(plan))
        if not created:
            log.info("adopting existing Job %s/%s", plan.profile.namespace, plan.job_name)

    def _cleanup_runs(self, p: Pass, keep: str | None) -> None:
        """Delete the Jobs, result ConfigMaps, seeds and RBAC of runs other than `keep`."""
        ns = p.ref.namespace
        selector = f"{names.LABEL_PROFILE}={names.label_value(p.ref.name)}"
        for job in self.kube.list_jobs(ns, selector):
            if job["metadata"].get("labels", {}).get(names.LABEL_RUN) != keep:
                self.kube.delete("Job", ns, job["metadata"]["name"])
        for cm in self.kube.list_config_maps(ns, selector):
            labels = cm["metadata"].get("labels", {})
            component = labels.get(names.LABEL_COMPONENT)
            if component in (names.COMPONENT_RESULT, names.COMPONENT_SEED) and (
                labels.get(names.LABEL_RUN) != keep
            ):
                self.kube.delete("ConfigMap", ns, cm["metadata"]["name"])

    def _delete_rbac(self, p: Pass, run: str) -> None:
        account = names.profiler_account(run)
        for kind in ("RoleBinding", "Role", "ServiceAccount"):
            self.kube.delete(kind, p.ref.namespace, account)

    def _progress_run(self, p: Pass, targets: Sequence[Target]) -> None:
        st = p.status
        run = st.current_run
        assert run is not None
        ns = p.ref.namespace
        job = self.kube.get_job(ns, run.job)
        phase = 2 if run.phase == RunPhase.OFF_DIAGONAL else 1
        result_cm = self.kube.get_config_map(ns, names.result_config_map(run.name, phase))
        result = read_run_result((result_cm or {}).get("data"), (result_cm or {}).get("binaryData"))
        if result.progress:
            run.progress = result.progress
        if job is None:
            self._fail_run(p, "JobMissing", f"Job {run.job} disappeared before it finished")
            return
        finished = {
            c["type"]: c
            for c in job.get("status", {}).get("conditions") or []
            if c.get("status") == "True"
        }
        if "Failed" in finished:
            detail = result.message or finished["Failed"].get("message") or ""
            reason = finished["Failed"].get("reason") or "JobFailed"
            self._fail_run(p, "ProfilingFailed", f"Job {run.job} failed ({reason}): {detail}")
            return
        if "Complete" not in finished and "SuccessCriteriaMet" not in finished:
            return
        if result.status == "failed":
            self._fail_run(p, "ProfilingFailed", f"profiler reported: {result.message}")
            return
        if result.status != "succeeded" or not result.rounds:
            self._fail_run(
                p,
                "ResultMissing",
                f"Job {run.job} completed but its result ConfigMap has no rounds "
                f"(status {result.status!r})",
            )
            return
        additive = p.spec.table.kind == TableKind.ADDITIVE
        if additive and phase == 1:
            self._start_phase2(p, targets, result.rounds)
            return
        rounds = list(result.rounds)
        if additive:
            phase1 = self.kube.get_config_map(ns, names.result_config_map(run.name, 1))
            if phase1 is not None:
                first = read_run_result(phase1.get("data"), phase1.get("binaryData"))
                rounds = list(first.rounds) + rounds
        self._finish_run(p, rounds, result.manifest)

    def _start_phase2(
        self, p: Pass, targets: Sequence[Target], rounds: Sequence[Mapping[str, Any]]
    ) -> None:
        run = p.status.current_run
        assert run is not None
        try:
            fit = fit_rounds(rounds, additive=False)
        except ValueError as exc:
            self._fail_run(p, "FitFailed", f"phase-1 diagonal fit failed: {exc}")
            return
        seed_json = fit.table.to_json()
        seed_name = names.seed_table_config_map(run.name)
        seed = builders.table_config_map(
            p.ref,
            seed_name,
            seed_json,
            table_hash(seed_json),
            run.gpu_product,
            run.fingerprint,
            {"run": run.name, "purpose": "phase-2 seed table"},
            component=names.COMPONENT_SEED,
        )
        seed["metadata"]["labels"][names.LABEL_RUN] = run.name
        self.kube.create(seed)
        target = next((t for t in targets if t.name == run.target), None)
        if target is None:
            self._fail_run(p, "TargetGone", f"Deployment {run.target} is gone")
            return
        plan = self._plan(p, target, run.name, 2, run.gpu_product, run.fingerprint, seed_name)
        try:
            self._create_phase(plan, with_rbac=False)
        except (ApiException, ValueError) as exc:
            detail = exc.body if isinstance(exc, ApiException) and exc.body else str(exc)
            self._fail_run(p, "JobCreateFailed", f"could not create {plan.job_name}: {detail}")
            return
        run.phase = RunPhase.OFF_DIAGONAL
        run.job = plan.job_name
        run.diagonal_table = seed_name
        run.progress = None
        p.event("Normal", EV_PHASE2, f"diagonal phase done; off-diagonal Job {plan.job_name}")

    def _fail_run(self, p: Pass, reason: str, message: str, retryable: bool = True) -> None:
        st = p.status
        run = st.current_run
        assert run is not None
        st.last_failure = FailureRecord(
            run=run.name,
            reason=reason,
            message=message[:4000],
            at=cond.rfc3339(p.now),
            gpu_product=run.gpu_product,
            fingerprint=run.fingerprint,
            attempts=run.attempt or 1,
            trigger_key=run.trigger_key,
            retryable=retryable,
        )
        self._delete_rbac(p, run.name)
        self._end_run(p, "failed" if retryable else "rejected")
        p.event("Warning", EV_RUN_FAILED if retryable else EV_REJECTED, message)

    def _end_run(self, p: Pass, outcome: str) -> None:
        run = p.status.current_run
        assert run is not None
        started = parse_time(run.started_at) or p.now
        self.metrics.run_finished(p.ref, outcome, (p.now - started).total_seconds())
        p.status.current_run = None

    def _finish_run(
        self, p: Pass, rounds: Sequence[Mapping[str, Any]], manifest: Mapping[str, Any]
    ) -> None:
        st = p.status
        run = st.current_run
        assert run is not None
        additive = p.spec.table.kind == TableKind.ADDITIVE
        try:
            fit = fit_rounds(rounds, additive=additive)
        except ValueError as exc:
            self._fail_run(p, "FitFailed", f"fit failed: {exc}", retryable=False)
            return
        table_json = fit.table.to_json()
        digest = table_hash(table_json)
        cm_name = names.table_config_map(p.ref.name, digest)
        quality = api_quality(fit)
        meta = {
            "gpuProduct": run.gpu_product,
            "fingerprint": run.fingerprint,
            "run": run.name,
            "trigger": run.trigger,
            "target": run.target,
            "kind": p.spec.table.kind,
            "quality": fit.quality.to_dict(),
            "profiledAt": cond.rfc3339(p.now),
            "manifest": dict(manifest),
        }
        cm = builders.table_config_map(
            p.ref, cm_name, table_json, digest, run.gpu_product, run.fingerprint, meta
        )
        cm["data"]["rounds.jsonl"] = rounds_jsonl(rounds)
        self.kube.create(cm)
        ref = TableRef(
            gpu_product=run.gpu_product,
            fingerprint=run.fingerprint,
            kind=p.spec.table.kind,
            config_map=cm_name,
            hash=digest,
            quality=quality,
            profiled_at=cond.rfc3339(p.now),
            run=run.name,
        )
        live = self._live_table_for_gate(p, run.gpu_product, run.fingerprint)
        live_table = None
        if live is not None:
            live_cm = self.kube.get_config_map(p.ref.namespace, live.config_map)
            if live_cm is not None:
                live_table = load_sps_table_text(live_cm["data"][names.TABLE_KEY])
        verdict = check_gates(p.spec.gates, quality, fit.table, live_table)
        if not verdict.passed:
            ref.message = verdict.message
            st.rejected_table = ref
            self._fail_run(p, verdict.reason, verdict.message, retryable=False)
            return
        previous = next(
            (
                t
                for t in st.tables
                if t.gpu_product == run.gpu_product and t.fingerprint == run.fingerprint
            ),
            None,
        )
        ref.previous = previous.config_map if previous is not None else None
        st.tables = [t for t in st.tables if t is not previous] + [ref]
        if st.last_failure is not None and st.last_failure.trigger_key == run.trigger_key:
            st.last_failure = None
        self._delete_rbac(p, run.name)
        self._end_run(p, "succeeded")
        # The finished run's Job and result stay for inspection until the next run starts.
        p.event(
            "Normal",
            EV_PUBLISHED,
            f"table {cm_name} for {run.gpu_product} (RMS {quality.rms_ms} ms)",
        )

    def _live_table_for_gate(self, p: Pass, gpu: str, fingerprint: str) -> TableRef | None:
        state = target_table_state(p.status.tables, gpu, fingerprint)
        return state.table or state.fallback

    # ------------------------------------------------------------------ rollout

    def _rollout(self, p: Pass, targets: Sequence[Target]) -> None:
        st = p.status
        mode = p.spec.rollout.mode
        statuses: list[TargetStatus] = []
        previous = {t.deployment: t for t in st.targets}
        for target in targets:
            ts = TargetStatus(
                deployment=target.name,
                gpu_product=target.gpu or (",".join(sorted(target.products)) or None),
                fingerprint=target.fingerprint or None,
                message=target.problem,
            )
            statuses.append(ts)
            if target.problem is not None or target.gpu is None:
                old = previous.get(target.name)
                if old is not None:
                    ts.table, ts.hash, ts.rolled_out = old.table, old.hash, old.rolled_out
                if target.gpu is None and target.problem is None:
                    ts.message = "waiting for the pods to settle on one GPU product"
                continue
            state = target_table_state(st.tables, target.gpu, target.fingerprint)
            table = state.table or state.fallback
            if table is None:
                ts.message = "no table for this GPU product yet"
                continue
            ts.table, ts.hash = table.config_map, table.hash
            if state.table is None:
                ts.message = "server changed since the table was profiled (stale)"
            if mode == RolloutMode.DISABLED:
                continue
            if state.table is not None and self._rollout_failed(target, table):
                restored = self._roll_back(p, target, table)
                if restored is None:
                    ts.message = "the rollout of this table failed and there is no previous one"
                    continue
                table = restored
                ts.table, ts.hash = table.config_map, table.hash
                ts.message = "rolled back: the rollout of the new table failed"
            ts.rolled_out = self._apply_table(p, target, table)
        st.targets = statuses

    @staticmethod
    def _rollout_failed(target: Target, table: TableRef) -> bool:
        """The Deployment runs `table`'s template and its rollout hit the progress deadline."""
        dep = target.deployment
        template = dep.get("spec", {}).get("template", {})
        annotations = (template.get("metadata") or {}).get("annotations") or {}
        if annotations.get(names.ANNOTATION_TABLE_HASH) != table.hash:
            return False
        status = dep.get("status", {})
        if status.get("observedGeneration", 0) < dep.get("metadata", {}).get("generation", 0):
            return False
        return any(
            c.get("type") == "Progressing"
            and c.get("status") == "False"
            and c.get("reason") == "ProgressDeadlineExceeded"
            for c in status.get("conditions") or []
        )

    def _roll_back(self, p: Pass, target: Target, failed: TableRef) -> TableRef | None:
        """Return to the table `failed` replaced; keep `failed` for inspection, say so, and
        do not profile again for the same trigger."""
        st = p.status
        message = (
            f"Deployment {target.name} did not become available with table "
            f"{failed.config_map} (ProgressDeadlineExceeded)"
        )
        previous_cm = (
            self.kube.get_config_map(p.ref.namespace, failed.previous) if failed.previous else None
        )
        st.last_failure = FailureRecord(
            run=failed.run or "",
            reason="RolloutFailed",
            message=message + ("; rolled back to " + str(failed.previous) if previous_cm else ""),
            at=cond.rfc3339(p.now),
            gpu_product=failed.gpu_product,
            fingerprint=failed.fingerprint,
            trigger_key=f"{failed.gpu_product}/{failed.fingerprint}/refresh@{st.refresh_requested_at}",
            retryable=False,
        )
        if previous_cm is None:
            return None
        meta_text = (previous_cm.get("data") or {}).get(names.META_KEY) or "{}"
        meta = json.loads(meta_text)
        labels = previous_cm.get("metadata", {}).get("labels") or {}
        restored = TableRef(
            gpu_product=failed.gpu_product,
            fingerprint=failed.fingerprint,
            kind=failed.kind,
            config_map=str(failed.previous),
            hash=labels.get(names.LABEL_TABLE_HASH, ""),
            profiled_at=meta.get("profiledAt"),
            run=meta.get("run"),
        )
        st.rejected_table = failed.model_copy(update={"message": message})
        st.tables = [t for t in st.tables if t is not failed] + [restored]
        p.event("Warning", EV_ROLLOUT_FAILED, st.last_failure.message)
        return restored

    def _apply_table(self, p: Pass, target: Target, table: TableRef) -> bool:
        dep = target.deployment
        template = dep.get("spec", {}).get("template", {})
        annotations = (template.get("metadata") or {}).get("annotations") or {}
        rollout = p.spec.rollout
        container = target.container or {}
        applied = annotations.get(names.ANNOTATION_TABLE_HASH) == table.hash
        if rollout.mode == RolloutMode.INJECT:
            args = [str(a) for a in container.get("args") or []]
            applied = applied and TABLE_PATH_FLAG in " ".join(args)
        if rollout.mode == RolloutMode.ANNOTATE_ONLY:
            stable = self.kube.get_config_map(p.ref.namespace, str(rollout.table_config_map))
            filename = posixpath.basename(rollout.table_path)
            current_hash = ((stable or {}).get("metadata", {}).get("annotations") or {}).get(
                names.ANNOTATION_TABLE_HASH
            )
            if current_hash != table.hash:
                table_cm = self.kube.get_config_map(p.ref.namespace, table.config_map)
                if table_cm is None:
                    return False
                self.kube.apply_config_map(
                    builders.stable_table_apply(
                        p.ref,
                        str(rollout.table_config_map),
                        table_cm["data"][names.TABLE_KEY],
                        table.hash,
                        filename,
                    )
                )
        if not applied:
            if rollout.mode == RolloutMode.INJECT:
                body = builders.inject_apply(
                    dep,
                    str(container.get("name")),
                    table.config_map,
                    table.hash,
                    rollout.table_path,
                    [str(a) for a in container.get("args") or []],
                )
            else:
                body = builders.annotate_apply(dep, table.config_map, table.hash)
            self.kube.apply_deployment(body)
            self.metrics.rollout(p.ref, str(rollout.mode))
            p.event(
                "Normal",
                EV_ROLLED,
                f"Deployment {target.name} now runs table {table.config_map} ({rollout.mode})",
            )
            return False
        return deployment_rolled_out(dep)

    # ------------------------------------------------------------------ history

    def _trim_history(self, p: Pass) -> None:
        selector = (
            f"{names.LABEL_PROFILE}={names.label_value(p.ref.name)},"
            f"{names.LABEL_COMPONENT}={names.COMPONENT_TABLE}"
        )
        cms = self.kube.list_config_maps(p.ref.namespace, selector)
        published = [
            PublishedTable(
                name=cm["metadata"]["name"],
                gpu_product=cm["metadata"].get("labels", {}).get(names.LABEL_GPU, ""),
                created=cm["metadata"].get("creationTimestamp", ""),
            )
            for cm in cms
        ]
        st = p.status
        live = {t.config_map for t in st.tables} | {t.table for t in st.targets if t.table}
        live |= {t.previous for t in st.tables if t.previous}  # the rollback targets
        if st.rejected_table is not None:
            live.add(st.rejected_table.config_map)
        for name in tables_to_delete(published, live, p.spec.history_limit):
            self.kube.delete("ConfigMap", p.ref.namespace, name)
        existing = {t.name for t in published}
        # Forget tables whose ConfigMap is gone (deleted by hand): they cannot be reused.
        st.tables = [t for t in st.tables if t.config_map in existing or not published]

    # ------------------------------------------------------------------ report

    def _report(self, p: Pass, targets: Sequence[Target]) -> None:
        st, now, gen = p.status, p.now, p.generation

        def setc(type_: str, status: bool | None, reason: str, message: str) -> None:
            st.conditions = cond.set_condition(
                st.conditions, type_, status, reason, message, now, gen
            )

        products = sorted({t.gpu for t in targets if t.gpu})
        st.gpu_product = ",".join(products) or None
        live = [t.table for t in st.targets if t.table]
        st.live_table = ",".join(sorted(set(live))) or None
        problems = [f"{t.name}: {t.problem}" for t in targets if t.problem]
        if st.current_run is not None:
            run = st.current_run
            setc(
                cond.PROFILING,
                True,
                run.trigger,
                f"run {run.name} ({run.phase}) for {run.gpu_product} on Job {run.job}"
                + (f", progress {run.progress}" if run.progress else ""),
            )
        else:
            setc(cond.PROFILING, False, "Idle", "no profiling run in progress")
        waiting = [t for t in st.targets if t.table is None]
        if not targets:
            table_ok, table_reason, table_msg = (
                False,
                "NoTargets",
                "the selector matches no Deployment",
            )
        elif waiting:
            table_ok = False
            table_reason = "Profiling" if st.current_run else "NoTable"
            table_msg = "; ".join(f"{t.deployment}: {t.message}" for t in waiting)
        else:
            table_ok, table_reason, table_msg = True, "TableLive", f"live: {st.live_table}"
        setc(cond.TABLE_READY, table_ok, table_reason, table_msg)
        stale = [t for t in st.targets if t.message and "stale" in t.message]
        refresh_pending = st.refresh_requested_at is not None and any(
            (t.profiled_at or "") < st.refresh_requested_at for t in st.tables
        )
        if stale:
            setc(cond.STALE, True, "ServerChanged", "; ".join(t.deployment for t in stale))
        elif refresh_pending:
            setc(cond.STALE, True, st.refresh_reason or "RefreshRequested", "refresh pending")
        else:
            setc(cond.STALE, False, "Current", "every table matches its server")
        mode = p.spec.rollout.mode
        if mode == RolloutMode.DISABLED:
            setc(cond.ROLLED_OUT, False, "RolloutDisabled", "spec.rollout.mode is Disabled")
            rolled_ok = True
        else:
            pending = [t.deployment for t in st.targets if t.table and not t.rolled_out]
            rolled_ok = table_ok and not pending
            if rolled_ok:
                setc(cond.ROLLED_OUT, True, "RolledOut", "every target runs its table")
            elif pending:
                setc(cond.ROLLED_OUT, False, "RolloutPending", f"rolling: {', '.join(pending)}")
            else:
                setc(cond.ROLLED_OUT, False, "NoTable", "no table to roll out yet")
        failure = st.last_failure
        if problems:
            setc(cond.DEGRADED, True, "TargetProblem", "; ".join(problems))
            p_reason = "TargetProblem"
        elif failure is not None:
            setc(cond.DEGRADED, True, failure.reason, failure.message)
            p_reason = failure.reason
        else:
            setc(cond.DEGRADED, False, "AsExpected", "")
            p_reason = ""
        if p.spec.suspend and not table_ok:
            setc(cond.READY, False, "Suspended", "spec.suspend is true")
        elif table_ok and rolled_ok:
            msg = "tables live" + (f"; degraded: {p_reason}" if p_reason else "")
            setc(cond.READY, True, "TableLive", msg)
        elif st.current_run is not None:
            setc(cond.READY, False, "Profiling", table_msg)
        elif not table_ok:
            setc(cond.READY, False, p_reason or table_reason, table_msg)
        else:
            setc(cond.READY, False, "RolloutPending", "waiting for the Deployments to roll")
        st.observed_generation = gen
        for table in st.tables:
            self.metrics.table_age(p.ref, table.gpu_product, table.profiled_at, now)


def deployment_rolled_out(dep: Mapping[str, Any]) -> bool:
    """Like `kubectl rollout status`: the new template is observed and fully available."""
    meta, spec, status = dep.get("metadata", {}), dep.get("spec", {}), dep.get("status", {})
    if status.get("observedGeneration", 0) < meta.get("generation", 0):
        return False
    replicas = spec.get("replicas", 1)
    return (
        status.get("updatedReplicas", 0) >= replicas
        and status.get("availableReplicas", 0) >= replicas
        and status.get("replicas", 0) <= replicas
    )


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)
