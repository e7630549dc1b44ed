"""The headless Service of a multi-node clone's Job (`kube/group_clone.py`): its pods'
DNS names. The Job owns it, so the garbage collector deletes it with the Job, however the
Job goes (the next run's cleanup, a user, the profile's deletion), the operator up or not.

It needs the Job's UID, so it is created right after the Job (its pods look the leader up
only once they run); its name is checked free before the Job, so that nothing runs without
its Service, and a Job whose Service could not be made is deleted at once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sps_operator.controller.kube import builders, group_clone, names
from sps_operator.controller.passes.state import belongs_to
from sps_operator.controller.profiling.outcome import NameTaken
from sps_operator.controller.profiling.state import ProfilingPass

log = logging.getLogger(__name__)


def service_refusal(
    existing: Mapping[str, Any], built: Mapping[str, Any], p: ProfilingPass, job_uid: str | None
) -> str | None:
    """Why `existing`, found under the name of the group's Service `built`, is not the run's
    own (None: adopt it). Its own: owned by the run's Job (of that UID once it is known) or,
    made by an operator before the Job owned it, by the profile; and the group's Service."""
    if not belongs_to(existing, p.ref):
        owner = group_clone.owned_by_job(existing, _job(built))
        if owner is None:
            return "its controller ownerReference is neither the profile nor the run's Job"
        if job_uid is not None and owner != job_uid:
            return "it belongs to an earlier Job of that name (the garbage collector deletes it)"
    spec, want = existing.get("spec"), built["spec"]
    if not isinstance(spec, Mapping) or any(spec.get(k) != v for k, v in want.items()):
        return "it is not the group's headless Service (its selector, clusterIP or DNS)"
    return None


def _job(service: Mapping[str, Any]) -> str:
    return str(service["spec"]["selector"][group_clone.JOB_NAME_LABEL])


def _name_taken(p: ProfilingPass, name: str, refusal: str) -> NameTaken:
    return NameTaken(
        f"a Service named {name} already exists and does not belong to SpsProfile "
        f"{p.ref.name} or its run's Job ({refusal}): the operator never adopts an object it "
        f"did not create; delete it (kubectl delete service {name} -n {p.namespace}) and "
        "find who created it"
    )


def check_name_free(p: ProfilingPass, plan: builders.RunPlan) -> None:
    """Before the group's Job: NameTaken when a Service under its Service's name is not
    the run's own (so no Job runs without its Service)."""
    built = builders.group_service(plan, job_uid="")
    name = built["metadata"]["name"]
    existing = p.kube.get("Service", p.namespace, name)
    refusal = service_refusal(existing, built, p, None) if existing is not None else None
    if refusal is not None:
        raise _name_taken(p, name, refusal)


def create(p: ProfilingPass, plan: builders.RunPlan, job_uid: str) -> None:
    """Create the group's Service, owned by its Job (or adopt the run's own); when that
    fails, the Job just created is deleted (a group without its Service never forms, its
    pods would hold their GPUs until the run's deadline) and the error raised."""
    try:
        if not job_uid:
            raise RuntimeError(f"Job {plan.job_name} has no UID to own its Service")
        built = builders.group_service(plan, job_uid)
        if p.kube.create(built) is None:
            name = built["metadata"]["name"]
            existing = p.kube.get("Service", p.namespace, name)
            if existing is None:  # deleted in between: the next pass makes it
                raise NameTaken(f"Service {name} was deleted while being created")
            refusal = service_refusal(existing, built, p, job_uid)
            if refusal is not None:
                raise _name_taken(p, name, refusal)
    except Exception:
        if job_uid:
            try:
                p.kube.delete("Job", p.namespace, plan.job_name, uid=job_uid)
            except Exception as exc:  # the next run's start deletes it (cleanup_runs)
                log.warning("could not delete Job %s: %s", plan.job_name, exc)
        raise


def delete_profile_owned(p: ProfilingPass, job: str) -> None:
    """The group Service of a Job being deleted, when the profile owns it (an operator
    before the Job owned it made it so; the garbage collector takes a Job's own)."""
    service = p.kube.get("Service", p.namespace, names.group_service(job))
    if service is not None and belongs_to(service, p.ref):
        p.delete_own("Service", service)
