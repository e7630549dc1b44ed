"""The profiling reconciler's pass state: the shared pass (`passes.state.Pass`) and what
only getting a table does, deleting the profile's own objects (a finished run's Job and
RBAC, a table ConfigMap replaced or trimmed from history)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sps_operator.controller.passes.state import Pass, belongs_to


@dataclass
class ProfilingPass(Pass):
    """A pass as the profiling steps see it: they own `status.currentRun`, the run's
    failures and `status.tables` (published, trimmed), and borrow GPUs for a run through
    `capacity`."""

    def delete_own(self, kind: str, obj: Mapping[str, Any]) -> None:
        """Delete one of this profile's objects: exactly the one read (its UID is the
        delete's precondition), in its own namespace, and only if it `belongs_to` it."""
        meta = obj.get("metadata") or {}
        if not belongs_to(obj, self.ref):
            raise RuntimeError(
                f"refused to delete {kind} {meta.get('namespace')}/{meta.get('name')}: "
                f"it does not belong to SpsProfile {self.ref.name}"
            )
        self.kube.delete(kind, self.namespace, str(meta["name"]), uid=meta.get("uid"))
