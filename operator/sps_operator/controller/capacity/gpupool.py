"""The GPU pool record: one borrow at a time per GPU product (the capacity service).

A run that borrows a replica first takes its GPU product's pool Lease (in the operator's
pool namespace); giving back deletes it. A Lease whose run is over, or whose profile is
gone, is swept: its borrow given back and the Lease deleted. The decisions and the Lease's
shape are in `borrow.py`; this module reads and writes through `KubeApi`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from kubernetes.client.rest import ApiException

from sps_operator.api import labels as L
from sps_operator.api.reasons import REPLICA_RETURNED
from sps_operator.controller.kube.ratelimit import Periodic
from sps_operator.controller.passes.state import Pass
from sps_operator.controller.policies.borrow import (
    ANNOTATION_CLAIM,
    COMPONENT_POOL,
    BorrowTag,
    PoolClaim,
    borrow_patch,
    borrowing_seen_from,
    claim_annotation,
    confirmed_tag,
    give_back,
    holder_seen_from,
    pool_lease,
    pool_lease_name,
    read_claim,
    read_tag,
    same_run,
)
from sps_operator.controller.policies.clocks import trusted

log = logging.getLogger(__name__)

# A borrow record (or pool Lease) whose run is over, or whose profile is gone, is given
# back after this long: a run that borrowed a moment ago may not be in every cache yet.
ORPHAN_GRACE = timedelta(minutes=5)


def older_than(stamp: str | None, now: datetime, limit: timedelta) -> bool:
    """`stamp` lies at least `limit` in the past; a time that cannot be trusted (ahead of
    this clock beyond the skew bound, unreadable) counts as old: it must not keep an
    orphan alive."""
    when = trusted(stamp, now)
    return when is None or now - when >= limit


def pool_claim(p: Pass, product: str) -> PoolClaim | None:
    """What the GPU product's pool Lease records now (None: no borrow, or unreadable); read
    once per pass until this pass writes it."""
    if not product:
        return None
    if product not in p.pool_reads:
        lease = p.kube.get("Lease", p.settings.pool_namespace, pool_lease_name(product))
        p.pool_reads[product] = read_claim(lease)
    return p.pool_reads[product]


def lent_by(p: Pass, deployment: Mapping[str, Any] | None) -> BorrowTag | None:
    """The borrow of a replica of `deployment` as its pool Lease records it: the copy on
    the Deployment only says which Lease to read (`confirmed_tag`)."""
    hint = read_tag(deployment) if deployment is not None else None
    return confirmed_tag(pool_claim(p, hint.product), deployment) if hint is not None else None


def hold_pool(p: Pass, product: str, uid: str, run: str, table: str) -> bool:
    """Record on the pool Lease of `run` that the slot stays lent for the rollout of
    `table`; False when the Lease is not that run's now."""
    lease = p.kube.get("Lease", p.settings.pool_namespace, pool_lease_name(product))
    claim = read_claim(lease)
    if lease is None or claim is None or not same_run(claim, uid, run):
        return False
    return _write_claim(p, lease, replace(claim, hold=table))


def _write_claim(p: Pass, lease: Mapping[str, Any], claim: PoolClaim) -> bool:
    """Rewrite the record of the pool Lease `lease`, conditional on it as read; False when
    it changed or went since."""
    meta = lease.get("metadata") or {}
    patch = {"metadata": {"resourceVersion": meta.get("resourceVersion"),
                          "annotations": {ANNOTATION_CLAIM: claim_annotation(claim)}}}  # fmt: skip
    p.pool_reads.pop(claim.product, None)
    try:
        p.kube.patch_metadata("Lease", p.settings.pool_namespace, str(meta.get("name")), patch)
    except ApiException as exc:
        if exc.status in (404, 409):
            return False
        raise
    return True


def claim_pool(p: Pass, claim: PoolClaim) -> str | None:
    """Take the GPU product's pool Lease for `claim` (None), or say who holds it."""
    namespace = p.settings.pool_namespace
    p.pool_reads.pop(claim.product, None)
    for _ in range(2):
        if p.kube.create(pool_lease(claim, namespace)) is not None:
            return None
        lease = p.kube.get("Lease", namespace, pool_lease_name(claim.product))
        if lease is None:
            continue  # released in between: try once more
        holder = read_claim(lease)
        if holder is not None and same_run(holder, claim.profile_uid, claim.run):
            # Ours already (taken before a crash, or a 409 retried): it records what this
            # decision read (the replicas may have changed since).
            if holder == claim or _write_claim(p, lease, claim):
                return None
            continue
        if holder is None:
            return (
                f"the pool record Lease {namespace}/{lease['metadata']['name']} for GPU product "
                f"{claim.product} is unreadable; ask the cluster admin to delete it"
            )
        orphaned = _orphaned(p, holder)
        if orphaned is None:
            return f"{borrowing_seen_from(holder, p.namespace)}; one borrow at a time per product"
        if not _sweep_one(p, lease, holder, orphaned):
            who = holder_seen_from(holder.holder, p.namespace)
            return f"the borrow of {who} on {holder.product} is being given back"
    return f"the pool record for GPU product {claim.product} keeps changing; trying again"


def release_pool(p: Pass, product: str, uid: str, run: str) -> None:
    """Delete the pool Lease of `product` if it is `run`'s (a run of this pass's namespace:
    a pass never frees another namespace's pool, whatever a record there says)."""
    if not product:
        return
    namespace = p.settings.pool_namespace
    lease = p.kube.get("Lease", namespace, pool_lease_name(product))
    claim = read_claim(lease)
    if lease is None or claim is None or not same_run(claim, uid, run):
        return
    if claim.namespace != p.namespace:
        return
    p.pool_reads.pop(product, None)
    try:
        p.kube.delete(
            "Lease", namespace, lease["metadata"]["name"], uid=lease["metadata"].get("uid")
        )
    except ApiException as exc:
        if exc.status != 409:  # replaced in between: not ours any more
            raise


def _alive_runs(status: Mapping[str, Any]) -> set[str]:
    runs = {((status.get("currentRun") or {}).get("name"))}
    runs.add((status.get("rolloutBorrow") or {}).get("run"))
    return {r for r in runs if r}


def _orphaned(p: Pass, claim: PoolClaim) -> str | None:
    """Why the pool Lease's borrow is over although the Lease remains (None: it is not)."""
    if claim.profile_uid == p.ref.uid:
        st = p.status
        mine = {st.current_run.name if st.current_run else None}
        mine.add(st.rollout_borrow.run if st.rollout_borrow else None)
        return None if claim.run in mine else f"run {claim.run} of {claim.holder} is over"
    try:
        body = p.kube.get("SpsProfile", claim.namespace, claim.profile)
    except ApiException as exc:
        if exc.status != 403:
            raise
        # Not a namespace this operator serves (its Roles are in the ones it watches): a
        # borrow there is no run of this operator's.
        return f"SpsProfile {claim.holder} is in a namespace this operator does not serve"
    if body is None or (body.get("metadata") or {}).get("uid") != claim.profile_uid:
        return f"SpsProfile {claim.holder} (uid {claim.profile_uid}) no longer exists"
    if claim.run in _alive_runs(body.get("status") or {}):
        return None
    if older_than(claim.at, p.now, ORPHAN_GRACE):
        return f"run {claim.run} of {claim.holder} ended without giving back"
    return None


def _sweep_one(p: Pass, lease: Mapping[str, Any], claim: PoolClaim, why: str) -> bool:
    """Give back an orphaned borrow (the Deployment's record must be the operator's and
    name the same run) and delete its pool Lease; False when the Deployment changed since
    it was read."""
    try:
        dep = p.kube.get(claim.kind, claim.namespace, claim.deployment)
    except ApiException as exc:
        if exc.status != 403:
            raise
        dep = None  # not ours to give back: only the record goes
    tag = confirmed_tag(claim, dep)
    if tag is not None:
        assert dep is not None
        action = give_back(dep, tag)
        try:
            p.kube.patch_lender(claim.namespace, claim.deployment,
                                borrow_patch(dep, None, action.replicas),
                                kind=claim.kind)  # fmt: skip
        except ApiException as exc:
            if exc.status == 409:
                return False
            if exc.status != 404:
                raise
        p.kube.event(dep, "Normal", REPLICA_RETURNED, f"{action.note} ({why})", p.now)
    meta = lease.get("metadata") or {}
    p.pool_reads.pop(claim.product, None)
    try:
        p.kube.delete(
            "Lease", p.settings.pool_namespace, str(meta.get("name")), uid=meta.get("uid")
        )
    except ApiException as exc:
        if exc.status != 409:
            raise
    log.warning("gave back the orphaned borrow of %s on %s: %s", claim.holder, claim.product, why)
    return True


def sweep_pools(p: Pass, period: Periodic) -> None:
    """Orphaned pool Leases (their profile deleted without its finalizer, a run that ended
    in a crash): give back and delete, at most once per interval for the whole operator.
    A failure here is logged and tried again next time; it never fails the pass."""
    if not period.due():
        return
    try:
        leases = p.kube.list_leases(
            p.settings.pool_namespace, f"{L.LABEL_COMPONENT}={COMPONENT_POOL}"
        )
        for lease in leases:
            claim = read_claim(lease)
            why = _orphaned(p, claim) if claim is not None else None
            if claim is not None and why is not None:
                _sweep_one(p, lease, claim, why)
    except Exception as exc:  # a background sweep: never the pass's failure
        log.warning("sweep for orphaned borrows failed: %s", exc)
