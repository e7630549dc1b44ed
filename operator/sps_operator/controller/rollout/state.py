"""The rollout reconciler's pass state: the shared pass (`passes.state.Pass`) as the
rollout steps see it."""

from __future__ import annotations

from dataclasses import dataclass, field

from sps_operator.controller.kube.serverinfo import ServerReads
from sps_operator.controller.passes.state import Pass
from sps_operator.controller.policies.confirm import READS_PER_PASS, WAIT_PER_PASS_SECONDS


@dataclass
class RolloutPass(Pass):
    """A pass as the rollout steps see it: they read `status.tables` (the profiling
    reconciler's hand-off) and own `status.targets`, the tables mounted on servers and
    their holders, a rollout's borrowed replica (through `capacity`)."""

    # The serving servers' /server_info answers, process-wide (off unless the operator
    # was started with --confirm-servers), how many servers this pass may still ask, and
    # how long it may still wait for their answers.
    servers: ServerReads = field(default_factory=ServerReads)
    server_reads_left: int = READS_PER_PASS
    server_wait_left: float = WAIT_PER_PASS_SECONDS
