"""The run step of profiling: start a profiling run, follow its Job, collect its result
(the profiling reconciler publishes it).

A run is at most one per profile (`status.currentRun`); its objects have deterministic
names hashed from the profile's UID, so a restarted operator adopts them — but only what
this profile owns: an object of that name that is not ours stops the run with a message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from sps_operator.api import labels as L
from sps_operator.api import limits
from sps_operator.api.hashing import content_hash
from sps_operator.api.reasons import (
    DEADLINE_EXCEEDED,
    DIAGONAL_ONLY_SERVER,
    FIT_FAILED,
    JOB_CREATE_FAILED,
    JOB_MISSING,
    NAME_TAKEN,
    NEVER_WROTE_RESULT,
    OFF_DIAGONAL_PHASE_STARTED,
    PROFILING_FAILED,
    PROFILING_STARTED,
    RESULT_MISSING,
    RESULT_REFUSED,
    SERVER_CHANGED,
    TARGET_CHANGED,
    TARGET_GONE,
    WAITING_FOR_GPUS,
)
from sps_operator.api.result import STATUS_FAILED, STATUS_SUCCEEDED, ResultError, read_result
from sps_operator.api.spec import ServerSource, TableKind
from sps_operator.api.status import FailureRecord, RunPhase, RunStatus
from sps_operator.controller.kube import builders, group_clone, names, table_objects
from sps_operator.controller.kube.client import Obj, api_error_detail
from sps_operator.controller.passes.state import Target
from sps_operator.controller.policies import claims, compat
from sps_operator.controller.policies import conditions as cond
from sps_operator.controller.policies import job_policy as policy
from sps_operator.controller.policies.clocks import elapsed
from sps_operator.controller.policies.run_job import group_pods, job_pods
from sps_operator.controller.policies.triggers import RunRequest, TargetView, decide_run
from sps_operator.controller.process.bounded import judge_bounded
from sps_operator.controller.profiling import group_service
from sps_operator.controller.profiling.outcome import (
    RETRYABLE,
    NameTaken,
    create_owned,
    delete_rbac,
    end_run,
    fail_run,
    record_failure,
)
from sps_operator.controller.profiling.state import ProfilingPass


@dataclass(frozen=True)
class Measured:
    """What a finished run measured: the rounds a table is fitted from, and the Job's
    manifest of how it measured them."""

    rounds: Sequence[Mapping[str, Any]]
    manifest: Mapping[str, Any]


# How long a Complete Job's result may lag behind its completion (the profiler's final
# write and the Job's status reach the operator's caches by different watches).
RESULT_GRACE_SECONDS = 60.0


def never_written(cm: str, job: str) -> str:
    """Why a result ConfigMap can hold nothing at all when the Job ends: the profiler writes
    `running` before anything else, so it never reached the API server, or never started."""
    return (
        f"the profiler {NEVER_WROTE_RESULT} {cm}: it could not reach the API "
        "server, or never started. A NetworkPolicy that denies the profiling pod's egress to "
        "the API server or the cluster DNS does this: allow it (the chart's "
        "networkPolicy.profilingPods.enabled, or the policy in docs/security.md, Network "
        f"policy); the profiler's own words: `kubectl logs job/{job} -c profiler`"
    )


def run_refusal(p: ProfilingPass, plan: builders.RunPlan, job: Obj) -> policy.Refusal | None:
    """Why the Job `plan` built may not be created (None: it may): the admin's policy, the
    GPU-product pin, the pod selectors of the namespace, the target's volume claims."""
    settings, spec = p.settings, p.spec
    clone = spec.server.source != ServerSource.EXTERNAL
    pod_labels = ((job["spec"]["template"].get("metadata") or {}).get("labels")) or {}
    snapshot = p.snapshot
    pin = _volume_pin(p, plan.target_pod_spec, plan.gpu_product) if clone else None
    return (
        policy.spec_refusal(
            settings.policy,
            spec,
            namespace=p.namespace,
            profiler_image=settings.profiler_image,
            services=snapshot.services,
        )
        or policy.job_refusal(
            settings.policy,
            job,
            spec=spec,
            default_labels=settings.job_defaults.labels,
            default_priority_class=settings.job_defaults.priority_class,
        )
        or (
            policy.pin_refusal(spec, job, spec.gpu_product_label, plan.gpu_product)
            if clone
            else None
        )
        or policy.selector_refusal(
            pod_labels,
            builders.pod_own_labels(plan),
            policy.pod_selectors(
                snapshot.pod_selecting_deployments, snapshot.services, snapshot.pdbs
            ),
        )
        # Last: the only one a wait can fix (a ready pod holding a ReadWriteOnce claim).
        or (pin if isinstance(pin, policy.Refusal) else None)
    )


def refuse_run(p: ProfilingPass, run: RunStatus, refusal: policy.Refusal) -> None:
    """Record why a run creates nothing. The record carries no trigger: every pass checks
    again (said once: no new event while the refusal stays the same), and the run starts at
    the first pass after the cause is fixed."""
    message = str(refusal)[:4000]
    said = FailureRecord(
        run=run.name, reason=refusal.reason, message=message, at=cond.rfc3339(p.now)
    )
    last = p.status.last_failure
    if is_refusal(last) and (last.run, last.reason, last.message) == (
        said.run, said.reason, said.message
    ):  # fmt: skip
        return
    record_failure(p, run, refusal.reason, message, retryable=False)
    assert p.status.last_failure is not None
    p.status.last_failure.trigger_key = None


def is_refusal(failure: FailureRecord | None) -> TypeGuard[FailureRecord]:
    """`failure` records a refusal (no run was created), not a failed run."""
    return (
        failure is not None
        and failure.trigger_key is None
        and failure.reason in policy.REFUSAL_REASONS
    )


def _table_config_maps(p: ProfilingPass) -> frozenset[str]:
    """ConfigMaps holding tables that a target may mount (never mounted by a clone)."""
    tables = {
        n
        for n, cm in p.snapshot.config_maps.items()
        if (cm["metadata"].get("labels") or {}).get(L.LABEL_COMPONENT) == L.COMPONENT_TABLE
    }
    if p.spec.rollout.table_config_map:
        tables.add(p.spec.rollout.table_config_map)
    return frozenset(tables)


def _volume_pin(
    p: ProfilingPass, pod_spec: Mapping[str, Any], gpu_product: str
) -> claims.VolumePin | policy.Refusal:
    """Where a clone of `pod_spec` can attach the target's claims (or why it cannot)."""
    snapshot = p.snapshot
    return claims.volume_pin(
        pod_spec,
        snapshot.claims,
        snapshot.pods,
        snapshot.node_labels,
        p.spec.gpu_product_label,
        gpu_product,
    )


def _plan(
    p: ProfilingPass, target: Target, run: RunStatus, phase: RunPhase, seed: str | None
) -> builders.RunPlan:
    pin = (
        _volume_pin(p, target.pod_spec, run.gpu_product)
        if p.spec.server.source != ServerSource.EXTERNAL
        else None
    )
    return builders.RunPlan(
        profile=p.ref,
        spec=p.spec,
        run=run.name,
        phase=phase,
        gpu_product=run.gpu_product,
        fingerprint=run.fingerprint,
        target_pod_spec=target.pod_spec,
        server_container=(target.container or {}).get("name"),
        server=target.command,
        server_port=target.config.port if target.config else 30000,
        seed_table_config_map=seed,
        profiler_image=p.settings.profiler_image,
        table_config_maps=_table_config_maps(p),
        defaults=p.settings.job_defaults,
        volume_pin=pin if isinstance(pin, claims.VolumePin) else claims.VolumePin(),
    )


def _create_phase(
    p: ProfilingPass, plan: builders.RunPlan, job: Obj, with_rbac: bool
) -> str | None:
    """Create what a phase needs; the UID of its Job, recorded at once: a Job replaced
    under its name before the next pass is then not the run's (`_replaced_job`)."""
    # Order matters for restarts: everything the Job needs exists before the Job, but a
    # group's Service, which the Job owns (`group_service`): its name is checked first.
    if plan.group is not None:
        group_service.check_name_free(p, plan)
    if with_rbac and not plan.spec.job.service_account_name:
        for obj in builders.profiler_rbac(plan):
            create_owned(p, obj)
    create_owned(p, builders.result_config_map(plan))
    uid = create_owned(p, job)
    if plan.group is not None:
        group_service.create(p, plan, uid or "")
    return uid[:64] if uid else None


def maybe_start_run(p: ProfilingPass) -> None:
    st = p.status
    usable = [t for t in p.targets if t.usable]
    running = {t.config_map: t for t in st.tables}
    views = [
        TargetView(t.name, t.gpu, t.fingerprint, running.get(t.running_config_map or ""))
        for t in usable
    ]
    refused: tuple[RunStatus, policy.Refusal] | None = None
    while True:
        request = decide_run(
            p.spec, views, st.tables, st.refresh_count, st.refresh_reason, st.last_failure, p.now
        )
        if request is None:
            break
        target = next(t for t in usable if t.name == request.target)
        run = _new_run(p, request)
        if request.trigger == SERVER_CHANGED:
            run.changes = target.changes[: limits.MAX_REPORT_LINES] or None
        # An External server cannot be restarted in static mode for a diagonal phase, nor
        # given a seed table: an Additive profile against it is the off-diagonal phase alone.
        if (
            p.spec.server.source == ServerSource.EXTERNAL
            and p.spec.table.kind == TableKind.ADDITIVE
        ):
            run.phase = RunPhase.OFF_DIAGONAL
            run.job = names.job_name(run.name, run.phase)
        plan = _plan(p, target, run, run.phase, None)
        try:
            job = builders.profiling_job(plan)
        except ValueError as exc:
            record_failure(p, run, JOB_CREATE_FAILED, f"could not build the profiling Job: {exc}")
            return
        refusal = run_refusal(p, plan, job)
        if refusal is None:
            _start(p, run, plan, job)
            return
        refused = refused or (run, refusal)
        # A refusal may concern this server alone (its node affinity): another may run.
        views = [
            v
            for v in views
            if (v.gpu_product, v.fingerprint) != (request.gpu_product, request.fingerprint)
        ]
    if refused is not None:
        refuse_run(p, *refused)
    elif is_refusal(st.last_failure):
        st.last_failure = None  # no run is wanted any more: nothing is refused


def _new_run(p: ProfilingPass, request: RunRequest) -> RunStatus:
    name = names.run_name(
        p.ref.name, p.ref.uid, request.gpu_product, request.fingerprint, request.nonce
    )
    return RunStatus(
        name=name,
        job=names.job_name(name, RunPhase.DIAGONAL),
        phase=RunPhase.DIAGONAL,
        gpu_product=request.gpu_product,
        fingerprint=request.fingerprint,
        target=request.target,
        trigger=request.trigger,
        started_at=cond.rfc3339(p.now),
        trigger_key=request.trigger_key,
        attempt=request.attempt,
        refresh_count=p.status.refresh_count,
    )


def _start(p: ProfilingPass, run: RunStatus, plan: builders.RunPlan, job: Obj) -> None:
    st = p.status
    if is_refusal(st.last_failure):
        st.last_failure = None  # fixed: the run starts
    cleanup_runs(p, keep=run.name)
    try:
        run.job_uid = _create_phase(p, plan, job, with_rbac=True)
    except NameTaken as exc:
        record_failure(p, run, NAME_TAKEN, str(exc), retryable=False)
        return
    except Exception as exc:
        # A Job the API server rejects will not pass on retry without a change; record it
        # like a failed run (same backoff), so status says why nothing is profiling.
        message = f"could not create the profiling Job {plan.job_name}: {api_error_detail(exc)}"
        record_failure(p, run, JOB_CREATE_FAILED, message)
        return
    st.current_run = run
    p.event(
        "Normal",
        PROFILING_STARTED,
        f"{run.trigger}: profiling {run.target} on {run.gpu_product} "
        f"(Job {plan.job_name}, attempt {run.attempt})",
    )
    p.metrics.run_started(p.ref, run=f"{run.name}/{run.attempt}@{run.started_at}")


def cleanup_runs(p: ProfilingPass, keep: str | None) -> None:
    """Delete the Jobs, result ConfigMaps and seeds of runs other than `keep`."""
    for job in p.snapshot.jobs.values():
        if (job["metadata"].get("labels") or {}).get(L.LABEL_RUN) != keep:
            p.delete_own("Job", job)
            if group_pods(job) > 1:  # (its own Service goes with it: the garbage collector)
                group_service.delete_profile_owned(p, str(job["metadata"]["name"]))
    for cm in p.snapshot.config_maps.values():
        labels = cm["metadata"].get("labels") or {}
        component = labels.get(L.LABEL_COMPONENT)
        if component in (L.COMPONENT_RESULT, L.COMPONENT_SEED) and labels.get(L.LABEL_RUN) != keep:
            p.delete_own("ConfigMap", cm)


def lost_ranks(p: ProfilingPass, job: Obj) -> str:
    """What a failed group clone's Job lost: the failed ranks (the Job's failedIndexes)
    and, for each, its pod's words (evicted, preempted, its node gone, a container that
    could not run), or that its pod is gone (deleted). Empty for a one-pod Job."""
    if group_pods(job) <= 1:
        return ""
    failed = str((job.get("status") or {}).get("failedIndexes") or "")[:64]
    pods = {
        pod.labels.get(group_clone.COMPLETION_INDEX_LABEL): pod
        for pod in job_pods(p.snapshot.pods, job)
    }
    said = []
    for index in [i for i in failed.split(",") if i.isdigit()][:4]:
        pod = pods.get(index)
        words = pod and (
            pod.lost or pod.stuck or pod.unschedulable or "; ".join(w for _, w in pod.exits[:1])
        )
        gone = "its pod was deleted (by a user, a controller, or with its node)"
        said.append(
            f"rank {index}" + (f" (pod {pod.name}): {words}" if pod and words else f": {gone}")
        )
    if not said:
        return "; a rank of the group was lost"
    return "; the group lost " + "; ".join(said)


# Conditions that end a Job (or announce its end). Not `Suspended`: a Job created suspended
# for Kueue carries Suspended=True until it is admitted.
JOB_ENDING = ("Complete", "Failed", "SuccessCriteriaMet", "FailureTarget")


def _finished(job: Obj) -> dict[str, Obj]:
    return {
        c["type"]: c
        for c in (job.get("status") or {}).get("conditions") or []
        if c.get("status") == "True" and c.get("type") in JOB_ENDING
    }


def _replaced_job(p: ProfilingPass, run: RunStatus, job: Obj) -> bool:
    """Whether the run's Job was deleted and created again under its name (another UID):
    not the Job the operator created, so never followed (its pod template, its result) nor
    deleted (it is not ours); the run ends JobMissing. Else records the Job's UID: its pods
    are those whose controller is this very Job (a GPU pool's order, the wait)."""
    uid = str((job.get("metadata") or {}).get("uid") or "")[:64] or None
    if run.job_uid is not None and uid != run.job_uid:
        fail_run(
            p,
            JOB_MISSING,
            f"Job {run.job} (uid {run.job_uid}) was deleted and another Job created under its "
            f"name (uid {uid}): the operator follows only the Job it created; delete the "
            f"other one (kubectl delete job {run.job} -n {p.namespace}) and find who created it",
        )
        return True
    run.job_uid = uid
    return False


def progress_run(p: ProfilingPass) -> Measured | None:
    """Follow the current run; what it measured once its Job finished with a result the
    table is to be fitted from (the profiling reconciler publishes it), else None."""
    run = p.status.current_run
    assert run is not None
    phase = run.phase
    job = p.snapshot.jobs.get(run.job)
    if job is None:
        if p.recent(run.started_at):
            p.wake_within(1.0)  # created a moment ago: not in the cache yet
            return None
        fail_run(p, JOB_MISSING, f"Job {run.job} disappeared before it finished")
        return None
    if _replaced_job(p, run, job):
        return None
    p.capacity.reattach_borrow(p, run)
    finished = _finished(job)
    if not finished and clone_refused(p, run):
        return None
    if not finished:
        too_long = p.capacity.follow_wait(p, run, job)
        if too_long is not None:
            # At once: a pod scheduled late must not take the GPUs a lent replica is given
            # back on.
            p.kube.delete("Job", p.namespace, run.job)
            fail_run(p, run.waiting.reason if run.waiting else WAITING_FOR_GPUS, too_long)
            return None
        if _past_deadline(p, run):
            return None
    # Read here, not above: a result larger than the caches keep is read with a GET.
    result_cm = p.config_map(names.result_config_map(run.name, phase)) or {}
    try:
        result = read_result(result_cm.get("data"), result_cm.get("binaryData"))
    except ResultError as exc:
        if not finished:
            return None  # the profiler may still be writing; judged when the Job ends
        fail_run(p, RESULT_REFUSED, f"the result of Job {run.job} was refused: {exc}")
        return None
    if result.progress:
        run.progress = result.progress
    result_name = names.result_config_map(run.name, phase)
    if "Failed" in finished:
        detail = result.message or finished["Failed"].get("message") or ""
        why = finished["Failed"].get("reason") or "JobFailed"
        if not result.status:
            detail = f"{detail}; {never_written(result_name, run.job)}"
        detail += lost_ranks(p, job)
        fail_run(p, PROFILING_FAILED, f"Job {run.job} failed ({why}): {detail}")
        return None
    if "Complete" not in finished and "SuccessCriteriaMet" not in finished:
        return None
    if result.status == STATUS_FAILED:
        fail_run(p, PROFILING_FAILED, f"profiler reported: {result.message}")
        return None
    if result.status != STATUS_SUCCEEDED or not result.rounds:
        # The Job's Complete can be seen before the profiler's last write to the result:
        # wait for it, bounded.
        run.result_wait_since = run.result_wait_since or cond.rfc3339(p.now)
        waited = elapsed(run.result_wait_since, p.now)
        if waited < RESULT_GRACE_SECONDS:
            p.wake_within(RESULT_GRACE_SECONDS - waited)
            return None
        fail_run(
            p,
            RESULT_MISSING,
            f"Job {run.job} completed but its result ConfigMap {result_name} still held no "
            f"final result {waited:.0f} s later (status {result.status!r}"
            + (f", progress {result.progress}" if result.progress else "")
            + (
                f"): the profiler's last write never arrived; see `kubectl logs job/{run.job} "
                "-c profiler`"
                if result.status
                else f"): {never_written(result_name, run.job)}"
            ),
        )
        return None
    kind = p.spec.table.kind
    if kind == TableKind.ADDITIVE and phase == RunPhase.DIAGONAL:
        start_phase2(p, result.rounds)
        return None
    rounds = list(result.rounds)
    if kind == TableKind.ADDITIVE:
        phase1 = p.config_map(names.result_config_map(run.name, RunPhase.DIAGONAL))
        if phase1 is not None:
            try:
                first = read_result(phase1.get("data"), phase1.get("binaryData"))
            except ResultError as exc:
                fail_run(p, RESULT_REFUSED, f"the phase-1 result was refused: {exc}")
                return None
            rounds = list(first.rounds) + rounds
    return Measured(rounds, result.manifest)


def clone_refused(p: ProfilingPass, run: RunStatus) -> bool:
    """End the run at once when its profiling clone refused to start for a reason a retry
    cannot change (a loader that reads only diagonal tables, a flag combination SGLang
    refuses); the Job would otherwise wait for it until the server wait runs out. A
    diagonal-only server is remembered: Additive is refused for it from now on."""
    refused = compat.clone_refusal(p.snapshot.pods, run.name, builders.SERVER_CONTAINER)
    if refused is None:
        return False
    reason, meaning, words = refused
    target = p.target(run.target)
    same_server = target is not None and target.fingerprint == run.fingerprint
    if reason == DIAGONAL_ONLY_SERVER and same_server and target and target.config:
        p.status.diagonal_only_servers = compat.remembered(
            p.status.diagonal_only_servers, target.config
        )
    fail_run(
        p,
        reason,
        f"the profiling server of Job {run.job} refused to start: {meaning}. Its last words: "
        f"{words}",
        retryable=False,
    )
    return True


def target_change(run: RunStatus, target: Target) -> str | None:
    """How the target's server differs from the one the run started for (None: it is the
    same: the same fingerprint, on the same GPU product once its pods have settled)."""
    if target.fingerprint != run.fingerprint:
        return f"server fingerprint {run.fingerprint} -> {target.fingerprint or 'unknown'}"
    if target.gpu is not None and target.gpu != run.gpu_product:
        return f"GPU product {run.gpu_product} -> {target.gpu}"
    return None


def _past_deadline(p: ProfilingPass, run: RunStatus) -> bool:
    """The run's own deadline, counted from when its Job started running (the Job's
    activeDeadlineSeconds also covers the wait for GPUs: it is the run's deadline plus
    capacity.waitTimeoutSeconds, a bound that holds while the operator is down), or
    Kueue's maximum execution time when shorter: a replica lent to the run stays lent no
    longer. True when the run was ended for it."""
    if _lent_too_long(p, run):
        return True
    limit, source = p.capacity.run_limit(p)
    if run.running_since is None:
        return False
    ran = elapsed(run.running_since, p.now)
    if ran < limit:
        p.wake_within(limit - ran)
        return False
    p.kube.delete("Job", p.namespace, run.job)
    lent = "; the lent replica was given back" if run.borrow is not None else ""
    fail_run(
        p,
        DEADLINE_EXCEEDED,
        f"Job {run.job} ran {ran:.0f} s, past {source} {limit} (counted from when it started "
        f"running, not from its wait for GPUs){lent}",
    )
    return True


def _lent_too_long(p: ProfilingPass, run: RunStatus) -> bool:
    """A replica lent to the run goes back at the admin's bound (chart
    borrowPolicy.maxLentSeconds), counted from the borrow, whatever the run's own limits
    (its wait for the pod is a tenant's value): the run ends. True when it was ended."""
    if run.borrow is None:
        return False
    bound = p.settings.max_lent_seconds
    lent = elapsed(run.borrow.at, p.now)
    if lent < bound:
        p.wake_within(bound - lent)
        return False
    p.kube.delete("Job", p.namespace, run.job)
    fail_run(
        p,
        DEADLINE_EXCEEDED,
        f"a replica of {run.borrow.deployment} was lent to run {run.name} for {lent:.0f} s, "
        f"the admin's bound (chart borrowPolicy.maxLentSeconds {bound:.0f}); the run ended "
        "and the lent replica was given back",
    )
    return True


def start_phase2(p: ProfilingPass, rounds: Sequence[Obj]) -> None:
    run = p.status.current_run
    assert run is not None
    verdict = judge_bounded(rounds, p.spec, kind=TableKind.DIAGONAL, gate=False, limits=p.settings)
    if not verdict.accepted or verdict.table_json is None:
        reason = verdict.reason or FIT_FAILED
        message = f"phase 1 (diagonal): {verdict.message}"
        fail_run(p, reason, message, retryable=reason in RETRYABLE)
        return
    target = p.target(run.target)
    if target is None or target.command is None:
        fail_run(p, TARGET_GONE, f"Deployment {run.target} is gone or no longer understood")
        return
    changed = target_change(run, target)
    if changed:
        # Phase 2 clones the Deployment as it is now: it must be the server phase 1 measured,
        # or the table would be stored (and rolled) under a server it was not measured on.
        fail_run(
            p,
            TARGET_CHANGED,
            f"Deployment {run.target} changed between the phases ({changed}): phase 2 would "
            "measure another server than phase 1. This run ends; the next one profiles the "
            "server as it is now",
        )
        return
    seed_name = names.seed_table_config_map(run.name)
    # The seed goes in the additive format the phase-2 table will have: a server whose
    # loader reads only diagonal tables refuses it in the clone, not in production.
    seed_json = builders.additive_seed(verdict.table_json)
    seed = table_objects.table_config_map(
        p.ref,
        seed_name,
        seed_json,
        content_hash(seed_json),
        run.gpu_product,
        run.fingerprint,
        {"run": run.name, "purpose": "phase-2 seed table"},
        component=L.COMPONENT_SEED,
    )
    seed["metadata"]["labels"][L.LABEL_RUN] = run.name
    plan = _plan(p, target, run, RunPhase.OFF_DIAGONAL, seed_name)
    try:
        job = builders.profiling_job(plan)
    except ValueError as exc:
        fail_run(p, JOB_CREATE_FAILED, f"could not build {plan.job_name}: {exc}")
        return
    refusal = run_refusal(p, plan, job)
    if refusal is not None:
        refuse_run(p, run, refusal)
        delete_rbac(p, run.name)
        end_run(p, "rejected")
        return
    try:
        create_owned(p, seed)
        job_uid = _create_phase(p, plan, job, with_rbac=False)
    except NameTaken as exc:
        fail_run(p, NAME_TAKEN, str(exc), retryable=False)
        return
    except Exception as exc:
        fail_run(p, JOB_CREATE_FAILED, f"could not create {plan.job_name}: {api_error_detail(exc)}")
        return
    run.phase = RunPhase.OFF_DIAGONAL
    run.job = plan.job_name
    run.job_uid = job_uid
    run.diagonal_table = seed_name
    run.progress = None
    p.capacity.close_segment(p, run)  # the new Job has its own clock
    run.result_wait_since = None
    p.event(
        "Normal",
        OFF_DIAGONAL_PHASE_STARTED,
        f"diagonal phase done; off-diagonal Job {plan.job_name}",
    )
