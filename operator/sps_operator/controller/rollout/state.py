"""The rollout reconciler's pass state: the shared pass (`passes.state.Pass`) as the
rollout steps see it."""

from __future__ import annotations

from dataclasses import dataclass

from sps_operator.controller.passes.state import Pass


@dataclass
class RolloutPass(Pass):
    """A pass as the rollout steps see it: they read `status.tables` (the profiling
    reconciler's hand-off) and own `status.targets`, the tables mounted on servers and
    their holders, a rollout's borrowed replica (through `capacity`)."""
