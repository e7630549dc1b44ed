"""Live, as the serving servers confirm it: the one place the rollout asks them.

Called once a target is Live by its pods (the template reads the table, the rollout
completed, every ready pod carries its hash). Its serving pods' servers are asked for
their `/server_info` (`kube/serverinfo.py`: bounded, kept by pod UID, a few per pass, a
pass waiting at most a second for them: a slower answer serves the next pass)
and judged (`policies/confirm.py`): a server that reports another table, or resolved a
cost setting otherwise than the clone that measured the table, makes the target not Live
with a reason; one that reports nothing or cannot be reached leaves it Live, and
`status.targets[].servers` says it could not confirm.
"""

from __future__ import annotations

import time

from sps_operator.api import labels as L
from sps_operator.api.reasons import SERVER_RESOLVED_DRIFT, SERVER_RUNS_OTHER_TABLE
from sps_operator.api.status import TableRef, TargetState, TargetStatus
from sps_operator.api.untrusted_json import read_json_object
from sps_operator.controller.passes.state import Target
from sps_operator.controller.policies import confirm as C
from sps_operator.controller.policies.deployments import target_pods
from sps_operator.controller.rollout.state import RolloutPass

REFUSALS = {C.OTHER_TABLE: SERVER_RUNS_OTHER_TABLE, C.DRIFT: SERVER_RESOLVED_DRIFT}


def confirm_live(p: RolloutPass, target: Target, ts: TargetStatus, table: TableRef) -> None:
    """Compare what the target's servers report with `table` (see the module doc)."""
    if not p.servers.enabled or target.config is None or ts.state != TargetState.LIVE:
        return
    pods, skipped = C.serving_pods(
        target_pods(target.deployment, p.snapshot.pods), table.hash, target.config.port
    )
    known = p.servers.known(pod.uid for pod in pods)
    asking = C.to_read(pods, known, p.servers.in_flight(), p.server_reads_left)
    if asking:
        p.server_reads_left -= len(asking)
        started = time.monotonic()
        p.servers.read(asking, p.server_wait_left, p.namespace)
        p.server_wait_left = max(p.server_wait_left - (time.monotonic() - started), 0.0)
        known = p.servers.known(pod.uid for pod in pods)
    cm = p.config_map(table.config_map)
    meta_text = ((cm or {}).get("data") or {}).get(L.META_KEY)
    recorded = C.recorded_resolved(read_json_object(meta_text, max_bytes=L.MAX_META_BYTES))
    verdicts = [
        C.judge_pod(pod.pod, known[pod.uid], p.spec.rollout.table_path, table.hash, recorded)
        for pod in pods
        if pod.uid in known
    ]
    summary = C.summarise(verdicts, skipped, len(pods) - len(verdicts))
    ts.servers = summary.line
    if summary.pending:
        p.wake_within(C.NEXT_READS_SECONDS)
    elif summary.retry:
        p.wake_within(C.RETRY_UNCONFIRMED_SECONDS)
    if summary.refusal is None:
        return
    outcome, words = summary.refusal
    ts.state, ts.reason = TargetState.REFUSED, REFUSALS[outcome]
    if outcome == C.OTHER_TABLE:
        ts.rolled_out = False
        ts.message = f"every ready pod carries table {table.config_map}, but {words}"
    else:
        ts.message = (
            f"table {table.config_map} runs, but its servers resolved a cost setting otherwise "
            f"than the clone that measured it: {words}"
        )
