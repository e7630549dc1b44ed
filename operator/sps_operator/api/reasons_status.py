"""The registry's entries for the reasons of a profile's own state (pure): all is well, work
in progress, nothing to do by design, and why a run started. Each says what it means, its
kind (which sets its health: api/reason_registry.py) and the next step `kubectl sps
explain` gives when a condition carries it ({name}: the profile)."""

from __future__ import annotations

from sps_operator.api import reasons as R
from sps_operator.api.reasons import Kind, Reason

STATUS_REASONS: dict[str, Reason] = {
    R.TABLE_LIVE: Reason(
        Kind.LIVE,
        "every target runs a table measured for it",
        advice="Nothing to do: every Deployment runs a table measured for it.",
    ),
    R.ROLLED_OUT: Reason(
        Kind.LIVE,
        "every target's Deployment serves its table",
        advice="Nothing to do: every target's Deployment serves its table.",
    ),
    R.AS_EXPECTED: Reason(
        Kind.INFO,
        "Degraded=False: nothing needs attention",
        advice="Nothing to do.",
    ),
    R.IDLE: Reason(
        Kind.INFO,
        "Profiling=False: no run in progress",
        advice=(
            "Nothing to do: a run starts by itself when a table is missing or stale; `kubectl sps "
            "reprofile {name}` starts one now."
        ),
    ),
    R.CURRENT: Reason(
        Kind.INFO,
        "Stale=False: every table in use matches its server",
        advice="Nothing to do.",
    ),
    R.ROLLOUT_DISABLED: Reason(
        Kind.INFO,
        "spec.rollout.mode is Disabled: tables are published only",
        advice=(
            "Tables are published, not put onto servers: mount them yourself, or set "
            "spec.rollout.mode to Inject or AnnotateOnly."
        ),
    ),
    R.ROLLOUT_HELD: Reason(
        Kind.INFO,
        "RolledOut=False: a newer table waits for the minimum rollout interval",
        advice=(
            "Nothing to do: the newer table (from a scheduled refresh) is rolled by itself once "
            "the minimum interval between rollouts has passed (spec.refresh.minIntervalSeconds, "
            "or the chart value refresh.minIntervalSeconds, whichever is longer). To roll it "
            "sooner, ask for a table: `kubectl sps reprofile {name}` (rolls once measured)."
        ),
    ),
    R.PROFILING: Reason(
        Kind.PROGRESSING,
        "a run is measuring the table",
        advice="Wait for the run: `kubectl sps get {name}` shows its progress.",
    ),
    R.NO_TABLE: Reason(
        Kind.PROGRESSING,
        "a target has no table for its server yet (a run starts or runs)",
        advice="Wait: a run measures the table (`kubectl sps get {name}` shows its progress).",
    ),
    R.WAITING: Reason(
        Kind.PROGRESSING,
        "a target's GPU product is not settled yet (pods moving or pending)",
        advice=(
            "Wait until the Deployment's pods settle on one GPU product; if they stay pending, fix "
            "their scheduling (`kubectl describe pod`)."
        ),
    ),
    R.ROLLOUT_PENDING: Reason(
        Kind.PROGRESSING,
        "a Deployment is rolling onto its new table",
        advice="Wait for the rollout: `kubectl rollout status deployment/<name>`.",
    ),
    R.ROLLOUT_QUEUED: Reason(
        Kind.PROGRESSING,
        "a Deployment waits for its turn: rollout.maxConcurrent of the profile's targets roll",
        advice=(
            "Nothing to do: it rolls once one of the rolling targets is live (or its rollout "
            "failed). To roll more at once raise spec.rollout.maxConcurrent (a count or a "
            "percentage), up to the operator's ceiling (chart value rollout.maxConcurrent)."
        ),
    ),
    R.SUSPENDED: Reason(
        Kind.SUSPENDED,
        "spec.suspend is true",
        advice="Set spec.suspend to false to resume profiling and rollouts.",
    ),
    R.NO_TARGETS: Reason(
        Kind.SUSPENDED,
        "the selector matches no Deployment in the namespace",
        advice="Label the SGLang Deployment(s) in this namespace to match spec.selector.",
    ),
    R.GPU_CHANGED: Reason(
        Kind.TRIGGER,
        "a target moved to a GPU product without a table",
        advice="Nothing to do: a run measures the table for the new GPU product.",
    ),
    R.SERVER_CHANGED: Reason(
        Kind.TRIGGER,
        "a target's server changed (image, model, flags)",
        advice=(
            "Nothing to do: a run measures the table for the changed server "
            "(status.currentRun.changes says what changed)."
        ),
    ),
    R.REFRESH_TOKEN: Reason(
        Kind.TRIGGER,
        "spec.refresh.token changed",
        advice="Nothing to do: a run measures the table again.",
    ),
    R.REPROFILE_REQUESTED: Reason(
        Kind.TRIGGER,
        "the sps.dev/reprofile annotation changed",
        advice="Nothing to do: a run measures the table again.",
    ),
    R.SCHEDULE: Reason(
        Kind.TRIGGER,
        "spec.refresh.schedule fired",
        advice="Nothing to do: a run measures the table again.",
    ),
    R.REFRESH_REQUESTED: Reason(
        Kind.TRIGGER,
        "a refresh was requested (its kind unrecorded)",
        advice="Nothing to do: a run measures the table again.",
    ),
}
