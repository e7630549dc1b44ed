"""`kubectl sps explain`: why the last run failed (or why nothing happens), and what to do.

Pure: it reads the SpsProfile, the current run's Job and pods, and the profile's
events as the API returns them, and returns findings, each with a next step. The findings
come from a table of small functions, one per topic (_TOPICS), in the order they are shown;
the fallbacks (_FALLBACKS) speak only when no topic found anything, so "nothing is wrong"
is said only when nothing is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sps_operator.api import reasons as R
from sps_operator.api.reason_registry import GATE_FAILURES, REASONS, TARGET_ADVICE, fill
from sps_operator.api.result import clean_text
from sps_operator.plugin.explain_findings import (
    MAX_EVIDENCE,
    Finding,
    failure_finding,
    gate_finding,
    pod_findings,
    rollout_findings,
    schedule_and_clock_findings,
    target_label,
    waiting_finding,
)
from sps_operator.plugin.view import age, conditions_by_type, profile_state


def _run_line(run: Mapping[str, Any], now: datetime) -> dict[str, str] | None:
    """The current run in one line: what it does, how long it has waited, what it borrowed."""
    if not run:
        return None
    line = {"name": str(run.get("name") or "?"), "phase": str(run.get("phase") or "?")}
    waiting = run.get("waiting") or {}
    if waiting.get("reason"):
        line["waiting"] = str(waiting["reason"])
        line["waitingFor"] = age(waiting.get("since"), now)
        line["waitingSince"] = str(waiting.get("since") or "")
    borrow = run.get("borrow") or {}
    if borrow.get("deployment"):
        line["borrowed"] = (
            f"1 of {borrow.get('replicas', '?')} replicas of {borrow['deployment']} "
            f"for {age(borrow.get('at'), now)}"
        )
    changes = [str(c) for c in run.get("changes") or []]
    if changes:
        line["trigger"] = str(run.get("trigger") or "")
        line["changes"] = "; ".join(changes)
    return line


@dataclass(frozen=True)
class _Profile:
    """What the topics read: the profile as the API returned it, and the run's objects."""

    name: str
    meta: Mapping[str, Any]
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    conds: Mapping[str, Mapping[str, Any]]
    job: Mapping[str, Any] | None
    pods: Sequence[Mapping[str, Any]]
    events: Sequence[Mapping[str, Any]]
    now: datetime


def _processing_findings(p: _Profile) -> list[Finding]:
    """The operator has not processed the profile, or not its latest spec."""
    generation = p.meta.get("generation")
    observed = p.status.get("observedGeneration")
    if not p.status:
        return [
            Finding(
                what="The operator has not processed this profile yet",
                why="the profile has no status",
                next=(
                    "Check the operator runs and serves this namespace: "
                    "`kubectl -n sps-system logs deploy/sps-operator` (watch.mode/namespaces "
                    "in the chart's values)."
                ),
            )
        ]
    if generation is not None and observed is not None and observed < generation:
        return [
            Finding(
                what="The operator has not seen the latest spec yet",
                why=f"observedGeneration {observed} < generation {generation}",
                next="Wait a few seconds; if it persists, check the operator's log.",
            )
        ]
    return []


def _mixed_gpu_findings(p: _Profile) -> list[Finding]:
    gpu = str(p.status.get("gpuProduct") or "")
    mixed_evidence = [
        f"{c.get('reason', '')}: {c.get('message', '')}"
        for c in (p.conds.get(R.DEGRADED), p.conds.get(R.READY))
        if c and c.get("status") in ("True", "False") and c.get("reason") == R.MIXED_GPU_PRODUCTS
    ] + [
        f"{target_label(t)}: {t.get('message')}"
        for t in p.status.get("targets") or []
        if t.get("reason") == R.MIXED_GPU_PRODUCTS
    ]
    if "," not in gpu and not mixed_evidence:
        return []
    return [
        Finding(
            what="The targets run on several GPU products",
            why="; ".join(mixed_evidence) or f"GPU products: {gpu}",
            next=fill(REASONS[R.MIXED_GPU_PRODUCTS].advice, name=p.name),
        )
    ]


def _refused_target_findings(p: _Profile) -> list[Finding]:
    findings = []
    for target in p.status.get("targets") or []:
        reason = str(target.get("reason") or "")
        if target.get("state") == "Refused" and reason in TARGET_ADVICE:
            advice = TARGET_ADVICE[reason]
            findings.append(
                Finding(
                    what=f"{advice.what} ({target_label(target)})",
                    why=f"{reason}: {target.get('message') or ''}",
                    next=fill(advice.next, name=p.name),
                )
            )
    return findings


def _unfingerprinted_findings(p: _Profile) -> list[Finding]:
    findings = []
    for target in p.status.get("targets") or []:
        unseen = [str(u) for u in target.get("unfingerprinted") or []]
        if unseen:
            findings.append(
                Finding(
                    what="Inputs that look like cost inputs are not in the fingerprint "
                    f"({target_label(target)})",
                    why="; ".join(unseen),
                    next=(
                        "A change of these reprofiles nothing, so a table could outlive the "
                        "cost it measured. Pin the image by digest or release tag; write "
                        "cost flags in args, not in a Secret; after changing one of the "
                        f"others, `kubectl sps reprofile {p.name}`. docs/fingerprint.md lists "
                        "what is fingerprinted."
                    ),
                )
            )
    return findings


def _unconfirmed_findings(p: _Profile) -> list[Finding]:
    """Live targets whose servers did not confirm their table: not an error, but what
    "Live" then rests on (the pods alone) is worth saying."""
    findings = []
    for target in p.status.get("targets") or []:
        servers = str(target.get("servers") or "")
        if target.get("state") == "Live" and "could not confirm" in servers:
            findings.append(
                Finding(
                    what="Live by its pods; its servers did not confirm the table "
                    f"(Deployment {target.get('deployment')})",
                    why=servers,
                    next=(
                        "Not an error: the pods carry the table and the rollout completed. For "
                        "the servers' word, let the operator's pods reach the server port (a "
                        "namespace that denies ingress must allow them), and run an SGLang "
                        "that reports its table path in /server_info (docs/operator.md, Live, "
                        "confirmed by the servers)."
                    ),
                )
            )
    return findings


def _last_failure_findings(p: _Profile) -> list[Finding]:
    failure = p.status.get("lastFailure")
    return [failure_finding(p.name, failure)] if failure else []


def _rejected_table_findings(p: _Profile) -> list[Finding]:
    rejected = p.status.get("rejectedTable")
    failure = p.status.get("lastFailure") or {}
    if not rejected or failure.get("reason") in GATE_FAILURES:  # said once
        return []
    tr = p.conds.get(R.TABLE_READY) or {}
    return [
        gate_finding(
            p.name,
            f"rejected table {rejected.get('configMap', '?')}: "
            f"{tr.get('reason', '')}: {tr.get('message', '')}",
        )
    ]


def _stale_findings(p: _Profile) -> list[Finding]:
    stale = p.conds.get(R.STALE) or {}
    after = "; the last attempt failed ("
    stale_message = str(stale.get("message") or "")
    if stale.get("status") != "True" or after not in stale_message:
        return []
    head, _, tail = stale_message.partition(after)
    reason, _, next_step = tail.partition("): ")
    return [
        Finding(
            what="A refresh is pending and its last attempt failed",
            why=f"{stale.get('reason', '')}: {head} (last attempt: {reason})",
            next=next_step or "See status.lastFailure.",
        )
    ]


def _rollout_findings(p: _Profile) -> list[Finding]:
    return rollout_findings(p.status)


def _schedule_and_clock_findings(p: _Profile) -> list[Finding]:
    return schedule_and_clock_findings(p.status, p.events)


def _current_run_findings(p: _Profile) -> list[Finding]:
    """Why the run's Job waits, then its pods' problems (the scheduler's words only once)."""
    waiting = waiting_finding(p.name, p.spec, p.status.get("currentRun") or {}, p.now)
    findings = [waiting] if waiting is not None else []
    if p.job is not None:
        findings.extend(pod_findings(p.name, p.pods, scheduling=waiting is None))
    return findings


def _warning_event_findings(p: _Profile) -> list[Finding]:
    # The newest about this very profile: events are listed by name, oldest first, and
    # outlive a profile deleted and created again under its name.
    uid = p.meta.get("uid")
    for event in reversed(p.events):
        about = (event.get("involvedObject") or event.get("regarding") or {}).get("uid")
        if uid and about and about != uid:
            continue
        if event.get("type") == "Warning":
            return [
                Finding(
                    what=f"Warning event {event.get('reason', '')}",
                    why=str(event.get("message") or event.get("note") or ""),
                    next="See `kubectl describe sps " + p.name + "`.",
                )
            ]
    return []


def _no_target_findings(p: _Profile) -> list[Finding]:
    if not p.status or p.status.get("targets") != []:
        return []
    return [
        Finding(
            what="No Deployment matches the selector",
            why=f"spec.selector = {p.spec.get('selector')}",
            next=fill(REASONS[R.NO_TARGETS].advice, name=p.name),
        )
    ]


def _not_ready_findings(p: _Profile) -> list[Finding]:
    # Never "nothing is wrong" while the profile is not ready.
    ready = p.conds.get(R.READY) or {}
    if not p.status or ready.get("status") == "True" or p.status.get("currentRun"):
        return []
    known = REASONS.get(str(ready.get("reason") or ""))
    # Without advice of its own (a refused target's reason): where each Deployment's is.
    advice = (known.advice if known is not None else "") or REASONS[R.TARGET_PROBLEM].advice
    run = (p.status.get("lastFailure") or {}).get("run")
    return [
        Finding(
            what="The profile is not ready",
            why=f"{ready.get('reason', 'Unknown')}: {ready.get('message', '')}",
            next=fill(advice, name=p.name, run=run or "<job>"),
        )
    ]


_Topic = Callable[[_Profile], list[Finding]]

# Every topic, in the order its findings are shown.
_TOPICS: tuple[_Topic, ...] = (
    _processing_findings,
    _mixed_gpu_findings,
    _refused_target_findings,
    _unfingerprinted_findings,
    _unconfirmed_findings,
    _last_failure_findings,
    _rejected_table_findings,
    _stale_findings,
    _rollout_findings,
    _schedule_and_clock_findings,
    _current_run_findings,
)

# When no topic found anything: the first of these that says something.
_FALLBACKS: tuple[_Topic, ...] = (
    _warning_event_findings,
    _no_target_findings,
    _not_ready_findings,
)


def explain(
    profile: Mapping[str, Any],
    job: Mapping[str, Any] | None = None,
    pods: Sequence[Mapping[str, Any]] = (),
    events: Sequence[Mapping[str, Any]] = (),
    now: datetime | None = None,
) -> dict[str, Any]:
    meta = profile.get("metadata") or {}
    status = profile.get("status") or {}
    conds = conditions_by_type(profile)
    p = _Profile(
        name=str(meta.get("name", "?")),
        meta=meta,
        spec=profile.get("spec") or {},
        status=status,
        conds=conds,
        job=job,
        pods=pods,
        events=events,
        now=now or datetime.now(UTC),
    )
    findings = [f for topic in _TOPICS for f in topic(p)]
    for fallback in _FALLBACKS:
        if findings:
            break
        findings = fallback(p)
    return {
        "name": p.name,
        "namespace": meta.get("namespace"),
        "state": profile_state(profile),
        "conditions": [
            {
                k: clean_text(c.get(k) or "", MAX_EVIDENCE)
                for k in ("type", "status", "reason", "message")
            }
            for c in conds.values()
        ],
        "run": _run_line(status.get("currentRun") or {}, p.now),
        "targets": [
            clean_text(
                f"{target_label(t)}: {t.get('state') or '?'}"
                + (f" ({t['table']})" if t.get("table") else ""),
                MAX_EVIDENCE,
            )
            for t in status.get("targets") or []
        ],
        "findings": [f.to_dict() for f in findings],
    }


def render_explain(report: Mapping[str, Any]) -> str:
    lines = [f"SpsProfile {report.get('namespace')}/{report['name']}: {report['state']}"]
    for cond in report.get("conditions") or []:
        lines.append(
            f"  {cond['type']:<11} {cond['status']:<7} {cond.get('reason') or ''}"
            + (f" - {cond['message']}" if cond.get("message") else "")
        )
    run = report.get("run")
    if run:
        text = f"  Run {run['name']} ({run['phase']})"
        if run.get("waiting"):
            text += f": {run['waiting']} for {run['waitingFor']} (since {run['waitingSince']})"
        if run.get("borrowed"):
            text += f"; borrowed {run['borrowed']}"
        lines.append(clean_text(text, MAX_EVIDENCE))
        if run.get("changes"):
            trigger = run.get("trigger") or R.SERVER_CHANGED
            why = f"  {trigger}: the server changed: {run['changes']}"
            lines.append(clean_text(why, MAX_EVIDENCE))
    lines += [f"  Target {t}" for t in report.get("targets") or []]
    findings = report.get("findings") or []
    if not findings:
        lines.append(
            "\nNothing is wrong: every Deployment runs a table measured for it"
            if report.get("state") == R.READY
            else "\nNothing is wrong: a run is in progress."
        )
        return "\n".join(lines)
    for i, finding in enumerate(findings, 1):
        lines += [
            "",
            f"{i}. {finding['what']}",
            f"   Why:  {finding['why']}",
            f"   Next: {finding['next']}",
        ]
    return "\n".join(lines)
