"""The rollout step: put each target's table onto its Deployment, watch the rollout, roll
back a rollout that fails.

The one rule: a table goes onto a Deployment only if it was measured for that
Deployment's exact (GPU product, server fingerprint). `eligible_table` is the only way to
obtain what `apply_*` accept, and it checks that rule against the table ConfigMap itself
(its labels, its content hash, its owner, SGLang's loader and the self-check), not
against status alone. A table measured for another server may stay where it already runs
while a new one is profiled; it is never newly rolled. A table is reported live only when
the Deployment's template makes its server read it, the rollout completed and every ready
pod carries its hash: never on a deadline alone. A rollout that does not complete says
what blocks it, in the words of the scheduler, the kubelet or the Deployment controller.
A scheduled refresh of a table that already runs waits for the minimum interval between
rollouts; a refresh a user asked for does not. New tables go onto templates at the pace
rollout.maxConcurrent sets (turns.py); a rollback is never held.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kubernetes.client.rest import ApiException

from sps_operator.api import labels as L
from sps_operator.api.hashing import content_hash
from sps_operator.api.legacy_tables import is_v1
from sps_operator.api.reasons import (
    PLACEHOLDER_TABLE,
    ROLLOUT_APPLIED,
    ROLLOUT_BLOCKED,
    ROLLOUT_FAILED,
    ROLLOUT_QUEUED,
    STABLE_TABLE_CONTESTED,
    TABLE_MODIFIED,
    TABLE_NOT_ELIGIBLE,
)
from sps_operator.api.spec import RolloutMode
from sps_operator.api.status import FailureRecord, TableRef, TargetState, TargetStatus
from sps_operator.api.times import parse_rfc3339
from sps_operator.api.untrusted_json import read_json_object, readable
from sps_operator.controller.kube import names, table_objects, workload_apply
from sps_operator.controller.kube.client import owned_by
from sps_operator.controller.kube.table_objects import table_text
from sps_operator.controller.passes.state import Target
from sps_operator.controller.policies import clocks, workloads
from sps_operator.controller.policies import conditions as cond
from sps_operator.controller.policies.deployments import (
    deployment_rolled_out,
    every_ready_pod_runs,
    rollout_blockers,
)
from sps_operator.controller.policies.ownership import recorded_owner
from sps_operator.controller.policies.stable_writers import (
    MAX_REWRITE_SECONDS,
    PLACEHOLDER_HASH,
    PLACEHOLDER_JSON,
)
from sps_operator.controller.policies.triggers import (
    USER_REQUESTED,
    refresh_trigger_key,
    run_spec_hash,
    table_for,
)
from sps_operator.controller.rollout import turns
from sps_operator.controller.rollout.confirm import confirm_live
from sps_operator.controller.rollout.holders import hold_tables
from sps_operator.controller.rollout.state import RolloutPass
from sps_operator.controller.rollout.templates import deadline_name, inject_serves, rollout_failed
from sps_operator.tables.formats import load_sps_table_text
from sps_operator.tables.selfcheck import self_check

CHANGED_SINCE_READ = "the Deployment changed since this pass read it; retrying from the new version"
# The watch event of the change wakes the profile at once; this is the safety net.
RETRY_AFTER_CONFLICT_SECONDS = 5.0


@dataclass(frozen=True)
class EligibleTable:
    """A table checked to have been measured for one target; only `eligible_table` makes
    one."""

    ref: TableRef
    text: str
    deployment: str


@dataclass(frozen=True)
class NotEligible:
    """Why a table may not go onto a target (`reason`: TableNotEligible, or TableModified
    when the ConfigMap's bytes are not the ones the operator published)."""

    reason: str
    message: str


def bytes_match(cm: Mapping[str, Any] | None, recorded_hash: str | None) -> bool:
    """The ConfigMap's table bytes hash to `recorded_hash`, the hash the operator recorded
    in status when it published them. A table is its bytes: its name, labels and owner
    are claims anyone who can edit the namespace can make."""
    text = table_text(cm)
    return text is not None and bool(recorded_hash) and content_hash(text) == recorded_hash


def eligible_table(p: RolloutPass, target: Target, ref: TableRef) -> EligibleTable | NotEligible:
    """The table, if it may go onto `target`; otherwise why not."""
    if not target.usable or ref.gpu_product != target.gpu or ref.fingerprint != target.fingerprint:
        return NotEligible(
            TABLE_NOT_ELIGIBLE,
            f"table {ref.config_map} was measured for ({ref.gpu_product}, {ref.fingerprint}), "
            f"not for this Deployment's ({target.gpu}, {target.fingerprint})",
        )
    cm = p.config_map(ref.config_map)
    if cm is None or not owned_by(cm, p.ref.uid):
        return NotEligible(
            TABLE_NOT_ELIGIBLE,
            f"table ConfigMap {ref.config_map} is missing or not owned by this profile",
        )
    if not bytes_match(cm, ref.hash):
        return NotEligible(
            TABLE_MODIFIED,
            f"table ConfigMap {ref.config_map} does not hold the table the operator published "
            f"(its bytes do not hash to {ref.hash}, recorded in status): it was replaced or "
            "edited, so it is never rolled",
        )
    labels = cm["metadata"].get("labels") or {}
    expected = {
        L.LABEL_GPU: names.label_value(ref.gpu_product),
        L.LABEL_TABLE_HASH: ref.hash,
    }
    # A table re-keyed by an upgrade keeps the fingerprint (version 1) it was stored under,
    # and one this version measured may carry its server's (api/legacy_tables.py).
    measured_for = {ref.fingerprint, ref.adopted_from} - {None}
    if (
        any(labels.get(k) != v for k, v in expected.items())
        or labels.get(L.LABEL_FINGERPRINT) not in measured_for
    ):
        return NotEligible(
            TABLE_NOT_ELIGIBLE,
            f"table ConfigMap {ref.config_map} is labelled for another server or table",
        )
    text = str(table_text(cm))
    try:
        problems = self_check(load_sps_table_text(text))
    except ValueError as exc:
        problems = [str(exc)]
    if problems:
        return NotEligible(
            TABLE_NOT_ELIGIBLE,
            f"table {ref.config_map} fails its self-check: {'; '.join(problems)}",
        )
    return EligibleTable(ref, text, target.name)


# --------------------------------------------------------------------------- the step


def rollout(p: RolloutPass) -> None:
    st = p.status
    mode = p.spec.rollout.mode
    if mode == RolloutMode.ANNOTATE_ONLY:
        _annotate_only_preflight(p)
    statuses: list[TargetStatus] = []
    before = {t.deployment: t for t in st.targets}
    rolling = turns.rolling_now(p)
    candidates: list[turns.Candidate] = []  # a new table for its template: paced
    chosen: dict[str, EligibleTable] = {}
    rolled_back: list[str] = []
    for target in p.targets:
        previous = before.get(target.name)
        ts = TargetStatus(
            deployment=target.name,
            kind=target.kind,
            gpu_product=target.gpu or (",".join(sorted(target.products)) or None),
            fingerprint=target.fingerprint or None,
            owner=target.owner,
            observed_gpu=target.observed_gpu,
            observed_since=cond.rfc3339(target.observed_since) if target.observed_since else None,
            rolled_at=previous.rolled_at if previous else None,
            **target.server_report(),
        )
        statuses.append(ts)
        if target.problem is None and target.gpu is None:
            if _own_rollout_moving(p, target, ts):
                continue
            ts.state = TargetState.WAITING
            ts.message = target.unplaced or "waiting for the pods to settle on one GPU product"
            continue
        exact = None
        if target.problem is None:
            exact = table_for(st.tables, str(target.gpu), target.fingerprint)
            if exact is None:
                _report_stale_or_missing(p, target, ts)
                continue
            if p.config_map(exact.config_map) is None and p.recent(exact.profiled_at):
                ts.state, ts.message = TargetState.ROLLING, "the new table is being published"
                p.wake_within(1.0)
                continue
            eligible = eligible_table(p, target, exact)
            if isinstance(eligible, NotEligible):
                target.refuse(eligible.reason, eligible.message)
                if eligible.reason == TABLE_MODIFIED:
                    _forget_modified(p, exact, eligible.message)
        if target.problem is not None or exact is None or isinstance(eligible, NotEligible):
            ts.state, ts.reason, ts.message = TargetState.REFUSED, target.reason, target.problem
            continue
        ts.table, ts.hash = exact.config_map, exact.hash
        if mode == RolloutMode.DISABLED:
            ts.state = TargetState.PUBLISHED
            continue
        if rollout_failed(
            target,
            exact,
            previous.rolled_at if previous else None,
            p.now,
            p.settings.workload_progress_seconds,
        ):
            restored = _roll_back(p, target, exact)
            if restored is None:
                # Nothing to return to: the new pods keep trying. Never live on a deadline
                # alone: live is when every ready pod runs the table.
                ts.state = TargetState.ROLLING
                _note_blocked(
                    p, target, ts, previous, exact.hash,
                    f"the rollout of table {exact.config_map} passed the {deadline_name(target)} "
                    "and there is no previous table to return to",
                )  # fmt: skip
                continue
            eligible = restored
            ts.table, ts.hash = restored.ref.config_map, restored.ref.hash
            ts.message = "rolled back: the rollout of the new table failed"
            rolled_back.append(target.name)  # never held by the pace
        else:
            eligible = _held_back(p, target, eligible, ts, previous)
            if target.running_hash != eligible.ref.hash:
                candidates.append(turns.Candidate(target, ts, previous, eligible.ref))
                chosen[target.name] = eligible
                continue
        _put_on(p, target, ts, previous, eligible)
    for c in turns.take_turns_now(p, candidates, rolling, rolled_back):
        _put_on(p, c.target, c.ts, c.previous, chosen[c.target.name])
    st.targets = statuses


def _put_on(
    p: RolloutPass,
    target: Target,
    ts: TargetStatus,
    previous: TargetStatus | None,
    eligible: EligibleTable,
) -> None:
    """Make the target's template serve `eligible` and report how far its rollout is."""
    ts.state = TargetState.ROLLING
    if not _claim(p, target):
        ts.message = "the Deployment changed while being claimed; retrying"
        return
    inject = p.spec.rollout.mode == RolloutMode.INJECT
    hold_tables(p, target, eligible.ref.config_map if inject else None)
    applied = _apply(p, target, eligible)
    if applied is None:
        ts.message = CHANGED_SINCE_READ
        return
    if target.running_hash != eligible.ref.hash:
        ts.rolled_at = cond.rfc3339(p.now)  # a new table goes onto its template now
    ts.rolled_out = applied and every_ready_pod_runs(
        target.deployment, p.snapshot.pods, eligible.ref.hash
    )
    if ts.rolled_out:
        ts.state = TargetState.LIVE
        confirm_live(p, target, ts, eligible.ref)
    else:
        _note_blocked(p, target, ts, previous, eligible.ref.hash, None)


def _forget_modified(p: RolloutPass, table: TableRef, message: str) -> None:
    """A live table whose ConfigMap no longer holds the bytes the operator published: say
    so, and drop it from status.tables so the run that measured it is repeated (status
    keeps only the table's hash, not its bytes, so the operator cannot republish it; the
    repeated run's publish replaces the modified ConfigMap, `publish.publish_table`)."""
    if table not in p.status.tables:
        return  # another target of this pass found it first
    p.status.tables = [t for t in p.status.tables if t is not table]
    p.event("Warning", TABLE_MODIFIED, message + "; measuring it again")
    p.wake_within(0)


def _note_blocked(
    p: RolloutPass,
    target: Target,
    ts: TargetStatus,
    previous: TargetStatus | None,
    table_hash: str,
    headline: str | None,
) -> None:
    """A rollout that is not done: name what blocks it (the scheduler's, kubelet's or
    Deployment controller's words about the new pods), and since when."""
    blockers = rollout_blockers(target.deployment, p.snapshot.pods, table_hash)
    if headline is None and blockers is None:
        return
    ts.reason = ROLLOUT_BLOCKED
    ts.message = "; ".join(x for x in (headline, blockers, ts.message) if x)
    since = previous.blocked_since if previous and previous.reason == ROLLOUT_BLOCKED else None
    ts.blocked_since = since or cond.rfc3339(p.now)


def _held_back(
    p: RolloutPass,
    target: Target,
    newest: EligibleTable,
    ts: TargetStatus,
    previous: TargetStatus | None,
) -> EligibleTable:
    """The table to roll now: `newest`, unless the Deployment already runs the table it
    replaces (measured for this same server) and got it less than the minimum interval
    ago: every rollout restarts every server, so a scheduled refresh waits (and says so).
    A first table, a table for a changed server, a table a user asked for (token,
    `kubectl sps reprofile`) and a rollback never wait."""
    interval = timedelta(seconds=p.min_interval_seconds)
    rolled = clocks.trusted(previous.rolled_at if previous else None, p.now)
    old_name = newest.ref.previous
    if (
        interval <= timedelta(0)
        or newest.ref.trigger in USER_REQUESTED
        or rolled is None
        or old_name is None
        or target.running_config_map != old_name
        or target.running_hash == newest.ref.hash
    ):
        return newest
    until = rolled + interval
    if p.now >= until:
        return newest
    old_ref = _stored_ref(p, old_name, newest.ref.previous_hash, newest.ref, target)
    old = eligible_table(p, target, old_ref) if old_ref is not None else None
    if not isinstance(old, EligibleTable) or target.running_hash != old.ref.hash:
        return newest
    ts.table, ts.hash = old.ref.config_map, old.ref.hash
    ts.next_table, ts.held_until = newest.ref.config_map, cond.rfc3339(until)
    ts.message = (
        f"table {newest.ref.config_map} waits until {ts.held_until}: at most one rollout "
        f"onto a Deployment per {interval.total_seconds():.0f} s for a scheduled refresh (each "
        "restarts every server; refresh.minIntervalSeconds and the operator's minimum); the "
        "table it replaces, measured for this same server, runs meanwhile. `kubectl sps "
        "reprofile` or a new refresh.token rolls its new table at once"
    )
    p.wake_within((until - p.now).total_seconds())
    return old


def _own_rollout_moving(p: RolloutPass, target: Target, ts: TargetStatus) -> bool:
    """A rollout this profile started replaces the pods, so for a moment none (or old and
    new) run on a settled product: that is the rollout going on, not a GPU move to wait
    for. Said only while the template still carries the table being rolled and no pod
    runs on another product than the one it was rolled for (that is a move)."""
    before = next((t for t in p.status.targets if t.deployment == target.name), None)
    if (
        before is None
        or before.state != TargetState.ROLLING
        or before.reason == ROLLOUT_QUEUED
        or not before.hash
        or before.hash != target.running_hash
        or target.observed_gpu not in (None, before.gpu_product)
    ):
        return False
    ts.state, ts.table, ts.hash = TargetState.ROLLING, before.table, before.hash
    ts.gpu_product = ts.gpu_product or before.gpu_product
    ts.message = f"rolling onto table {before.table}: its new pods are starting"
    _note_blocked(p, target, ts, before, before.hash, None)
    return True


def _report_stale_or_missing(p: RolloutPass, target: Target, ts: TargetStatus) -> None:
    """No table for this exact server: say what runs meanwhile (it stays, untouched)."""
    ours = {t.config_map: t for t in p.status.tables}
    running = target.running_config_map
    if running in ours:
        old = ours[running]
        ts.state, ts.table, ts.hash = TargetState.STALE, old.config_map, old.hash
        what = "GPU product" if old.gpu_product != target.gpu else "server"
        follow = (
            "a new table is being profiled"
            if p.spec.refresh.on_server_change or what == "GPU product"
            else "refresh.onServerChange is false"
        )
        ts.message = (
            f"stale: the {what} changed since table {old.config_map} was measured "
            f"({old.gpu_product}); it stays until a table for this one exists ({follow})"
        )
        if target.changes and what == "server":
            ts.message += "; changed: " + "; ".join(target.changes)
    else:
        ts.state = TargetState.NO_TABLE
        ts.message = f"no table for {target.gpu} and this server yet"


def _claim(p: RolloutPass, target: Target) -> bool:
    """Record this profile as the Deployment's one owner before writing to it. The claim
    is conditional on the Deployment as read; the object it returns (what was read plus
    the record) is what the apply that follows is conditional on."""
    if recorded_owner(target.deployment) == p.ref.name:
        return True
    try:
        target.deployment = p.kube.patch_metadata(
            target.kind,
            p.namespace,
            target.name,
            workload_apply.owner_patch(target.deployment, p.ref.name),
        )
    except ApiException as exc:
        if exc.status == 409:
            return False
        raise
    return True


def _apply(p: RolloutPass, target: Target, table: EligibleTable) -> bool | None:
    """Make the template serve `table`; True once it does and the rollout completed, None
    when the Deployment changed since this pass read it (the apply carries the args as
    read, so it is refused rather than written over a newer edit; the next pass, woken by
    that change, starts from it)."""
    rollout = p.spec.rollout
    container = target.container or {}
    if rollout.mode == RolloutMode.INJECT:
        serving = inject_serves(target, table.ref, rollout.table_path)
        body = workload_apply.inject_apply(
            target.deployment,
            str(container.get("name")),
            table.ref.config_map,
            table.ref.hash,
            rollout.table_path,
            [str(a) for a in container.get("args") or []],
        )
    else:
        serving = _stable_holds(p, table.ref.hash) and target.running_hash == table.ref.hash
        if not _write_stable(p, table.text, table.ref.hash, placeholder=False):
            return False  # the pods restart only once the stable ConfigMap holds the table
        body = workload_apply.annotate_apply(
            target.deployment, table.ref.config_map, table.ref.hash
        )
    if serving:
        return deployment_rolled_out(target.deployment)
    if target.running_hash != table.ref.hash or rollout.mode == RolloutMode.INJECT:
        try:
            p.kube.apply(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            p.wake_within(RETRY_AFTER_CONFLICT_SECONDS)
            return None
        p.metrics.rollout(p.ref, str(rollout.mode))
        p.event(
            "Normal",
            ROLLOUT_APPLIED,
            f"{target.kind} {target.name} now runs table {table.ref.config_map} ({rollout.mode})",
        )
    return False


# --------------------------------------------------------------------------- AnnotateOnly


def _stable_holds(p: RolloutPass, table_hash: str) -> bool:
    stable = p.snapshot.stable
    if stable is None:
        return False
    filename = posixpath.basename(p.spec.rollout.table_path)
    text = (stable.get("data") or {}).get(filename)
    annotations = stable["metadata"].get("annotations") or {}
    return (
        isinstance(text, str)
        and content_hash(text) == table_hash
        and annotations.get(L.ANNOTATION_TABLE_HASH) == table_hash
    )


def _claim_stable(p: RolloutPass) -> bool:
    """Record this profile as the stable ConfigMap's one writer (and take back one released
    by a deleted profile) before writing it: a merge patch with the resourceVersion the
    decision was made on, so two profiles deciding at once cannot both write."""
    stable = p.snapshot.stable
    if stable is None:
        return True  # created by this pass's apply; recorded at the next
    meta = stable["metadata"]
    released = L.LABEL_RELEASED in (meta.get("labels") or {})
    if recorded_owner(stable) == p.ref.name and not released:
        return True
    claim = {
        "metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "annotations": {L.ANNOTATION_OWNER: p.ref.name},
            "labels": {L.LABEL_RELEASED: None},
        }
    }
    try:
        p.kube.patch_metadata("ConfigMap", p.namespace, str(meta["name"]), claim)
    except ApiException as exc:
        if exc.status in (404, 409):
            return False  # changed or gone since it was read: decided again next pass
        raise
    return True


def _write_stable(p: RolloutPass, text: str, table_hash: str, placeholder: bool) -> bool:
    """Make the stable ConfigMap hold `text`; False when this pass may not write it."""
    if p.stable_conflict is not None or not _claim_stable(p):
        return False
    if _stable_holds(p, table_hash):
        return True
    # Writing the same table again means something undid the last write (replaced the
    # ConfigMap without the operator's annotation, deleted it): back off, and say so.
    name = str(p.spec.rollout.table_config_map)
    key = ("stable", p.namespace, name)
    wait, count = p.rewrites.wait(key, table_hash, p.now)
    if wait > 0 and count <= 1:
        return True  # written a moment ago: the cache may not show it yet
    if wait > 0:
        p.wake_within(wait)
        p.contested.append((STABLE_TABLE_CONTESTED, _stable_rewritten(name, count, wait)))
        return False
    p.kube.apply(
        table_objects.stable_table_apply(
            p.ref,
            name,
            text,
            table_hash,
            posixpath.basename(p.spec.rollout.table_path),
            placeholder,
        )
    )
    count = p.rewrites.wrote(key, table_hash, p.now)
    if count > 1:
        message = _stable_rewritten(name, count, p.rewrites.wait(key, table_hash, p.now)[0])
        p.event("Warning", STABLE_TABLE_CONTESTED, message)
        p.contested.append((STABLE_TABLE_CONTESTED, message))
    return True


def _stable_rewritten(name: str, count: int, wait: float) -> str:
    return (
        f"ConfigMap {name} lost the table the operator wrote there, {count} times in a row "
        "(replaced without the operator's annotation, or deleted); it is written back with a "
        f"backoff (next in {wait:.0f} s, at most every {MAX_REWRITE_SECONDS:.0f} s). Name a "
        "ConfigMap only the operator writes in spec.rollout.tableConfigMap, or stop the other "
        "writer"
    )


def _annotate_only_preflight(p: RolloutPass) -> None:
    """The stable ConfigMap exists from day one, holding SGLang's "no table", so the
    Deployment in Git can start before the first profile."""
    if p.snapshot.stable is None and p.stable_conflict is None:
        key = ("stable", p.namespace, str(p.spec.rollout.table_config_map))
        if p.rewrites.last_written(key, p.now) not in (None, PLACEHOLDER_HASH):
            return  # deleted after the operator wrote a table there: the rollout writes it back
        if not _write_stable(p, PLACEHOLDER_JSON, PLACEHOLDER_HASH, placeholder=True):
            return
        p.event(
            "Normal",
            PLACEHOLDER_TABLE,
            f"created ConfigMap {p.spec.rollout.table_config_map} with SGLang's uninitialized "
            "table (verify-all) until the first table is measured",
        )


# --------------------------------------------------------------------------- rollback


# A run name the operator derives (a DNS label); anything else in a table's meta is not one.
_RUN_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _stored_ref(
    p: RolloutPass, name: str, recorded_hash: str | None, like: TableRef, target: Target
) -> TableRef | None:
    """A reference to the table ConfigMap `name` (one `like` replaced: same GPU product,
    fingerprint and kind) under the hash the operator recorded for it when it published
    it (`recorded_hash`, from status): eligible_table then checks the ConfigMap's bytes
    against that hash, never against the ConfigMap's own labels. Its provenance for
    status (when, which run) is read from its meta through the bounded parser, kept only
    when it has the form the operator writes."""
    cm = p.config_map(name)
    if cm is None or not recorded_hash:
        return None
    labels = cm["metadata"].get("labels") or {}
    meta = read_json_object((cm.get("data") or {}).get(L.META_KEY), max_bytes=L.MAX_META_BYTES)
    meta = meta if readable(meta) else {}
    stamp = meta.get("profiledAt")
    profiled = parse_rfc3339(stamp) if isinstance(stamp, str) and len(stamp) < 64 else None
    profiled = profiled if profiled is not None and profiled.tzinfo is not None else None
    run = meta.get("run")
    # A table with a version-1 label (re-keyed by an upgrade, or labelled so for 0.1.0
    # when measured): it must still be this server's version-1 fingerprint.
    label = labels.get(L.LABEL_FINGERPRINT)
    adopted = label if is_v1(label or "") and label == target.legacy_fingerprint else None
    return TableRef(
        gpu_product=like.gpu_product,
        fingerprint=like.fingerprint,
        kind=like.kind,
        config_map=name,
        hash=recorded_hash,
        profiled_at=cond.rfc3339(profiled) if profiled else None,
        run=run if isinstance(run, str) and _RUN_NAME.match(run) else None,
        adopted_from=adopted,
    )


def _roll_back(p: RolloutPass, target: Target, failed: TableRef) -> EligibleTable | None:
    """Return to the table `failed` replaced (same server, so still eligible); keep
    `failed` for inspection, say so, and do not profile again for the same trigger."""
    st = p.status
    message = (
        f"{target.kind} {target.name} did not become available with table "
        f"{failed.config_map} ("
        + (
            "ProgressDeadlineExceeded"
            if target.kind == workloads.DEPLOYMENT
            else "not rolled out within the operator's progress bound"
        )
        + ")"
    )
    ref = (
        _stored_ref(p, failed.previous, failed.previous_hash, failed, target)
        if failed.previous
        else None
    )
    restored: EligibleTable | None = None
    refused: NotEligible | None = None
    if ref is not None:
        candidate = eligible_table(p, target, ref)
        if isinstance(candidate, EligibleTable):
            restored = candidate
        else:
            refused = candidate
    said = st.last_failure
    already = said is not None and (said.reason, said.run) == (ROLLOUT_FAILED, failed.run or "")
    if restored is None and already:
        return None  # nothing to return to, and already said (not once per pass)
    if refused is not None:
        # Never back onto bytes the operator did not publish: the failed table's pods keep
        # trying, and status says why there is no way back.
        message += f"; not rolled back to {failed.previous}: {refused.message}"
        if refused.reason == TABLE_MODIFIED:
            p.event("Warning", TABLE_MODIFIED, refused.message)
    elif restored is None and failed.previous:
        message += (
            f"; not rolled back to {failed.previous}: it is gone, or its hash was not "
            "recorded when it was replaced (published before this operator version)"
        )
    st.last_failure = FailureRecord(
        run=failed.run or "",
        reason=ROLLOUT_FAILED,
        message=message + (f"; rolled back to {failed.previous}" if restored else ""),
        at=cond.rfc3339(p.now),
        gpu_product=failed.gpu_product,
        fingerprint=failed.fingerprint,
        trigger_key=refresh_trigger_key(failed.gpu_product, failed.fingerprint, st.refresh_count),
        retryable=False,
        spec_hash=run_spec_hash(p.spec),
    )
    p.event("Warning", ROLLOUT_FAILED, st.last_failure.message)
    if restored is None:
        return None
    st.rejected_table = failed.model_copy(update={"message": message})
    st.tables = [t for t in st.tables if t is not failed] + [restored.ref]
    return restored
