"""The rollout reconciler: putting tables on servers. Its steps, in order: for each
selected Deployment, the table `status.tables` holds for its GPU product and server
(the profiling reconciler's hand-off), rolled on (Inject or AnnotateOnly) or back, held
by the Deployments that mount it, reported Live once every ready pod runs it; then the
replica a run borrowed and kept for this rollout goes back through `p.capacity`."""

from __future__ import annotations

from sps_operator.controller.rollout.apply import rollout
from sps_operator.controller.rollout.state import RolloutPass


def put_tables(p: RolloutPass) -> None:
    p.step = "rollout"
    rollout(p)
    p.capacity.follow_rollout_borrow(p, p.status.targets)
