"""Leader election on a coordination.k8s.io Lease, as client-go's leaderelection does it.

Several replicas run; one holds the Lease and runs the operator, the others wait. The
holder renews the Lease every `retry_period`; a candidate takes it over once it has seen
the same Lease record, unrenewed, for `lease_duration` by its own clock (no comparison of
clocks across machines). A holder that cannot renew within `renew_deadline` stops
leading at once, before any candidate may take over: there is never a moment with two
leaders acting, short of a clock that runs `lease_duration - renew_deadline` slow.

`decide` is the pure rule; `LeaseElector` does the I/O (the synchronous client's bare
`ApiClient`, its own: never the reconcile passes' rate-limited one; run in a thread) and
the timing. Its requests are bounded (`Timing.request_timeout`), and leadership lapses by
the clock whatever a round waits for (`main._renew` checks it while the round runs).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from sps_operator.controller.kube.rest import RESOURCES, request

log = logging.getLogger(__name__)
# Answers that say "not now" rather than "never": throttled, or the server in trouble.
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Timing:
    lease_duration: float = 10.0  # a candidate waits this long on an unrenewed Lease
    renew_deadline: float = 7.0  # a leader that cannot renew for this long steps down
    retry_period: float = 2.0  # how often the leader renews and candidates look
    # A replica refused the Lease (403, 404: not a lost race) this long fails its liveness
    # probe: a standby that can never lead is misconfigured, not healthy.
    refused_unhealthy_after: float = 60.0

    @property
    def request_timeout(self) -> tuple[float, float]:
        """(connect, read) of each Lease request; their sum, `renew_deadline`, bounds its
        whole answer. Not what keeps two leaders apart: leadership lapses by the clock
        (`is_leader`), and the renewing task checks it while a round waits
        (`main._renew`). This bound frees the round's thread from an API server that never
        answers, and is generous: a loaded API server that takes seconds to answer a Lease
        request must not cost a healthy leader its Lease."""
        connect = min(2.0, self.renew_deadline / 4)
        return connect, self.renew_deadline - connect


@dataclass(frozen=True)
class Observed:
    """A Lease record, and when this process first saw it (its own monotonic clock)."""

    holder: str | None
    version: str  # resourceVersion, the record's identity
    seen_at: float


def decide(me: str, lease: Mapping[str, Any] | None, last: Observed | None, now: float,
           timing: Timing) -> tuple[bool, Observed | None]:  # fmt: skip
    """Whether to (try to) hold the Lease now, and the observation to keep.

    Take it when there is none, when it is ours, when its holder released it, or when its
    record has not changed for a whole lease duration."""
    if lease is None:
        return True, None
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity") or None
    version = str((lease.get("metadata") or {}).get("resourceVersion") or "")
    if last is None or last.version != version:
        last = Observed(holder, version, now)
    if holder in (None, me):
        return True, last
    return now - last.seen_at >= timing.lease_duration, last


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """Acquire and renew one Lease; `is_leader()` says whether this process may act."""

    def __init__(
        self,
        name: str,
        namespace: str,
        identity: str,
        api: ApiClient | None = None,
        timing: Timing = Timing(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name, self.namespace, self.identity = name, namespace, identity
        self.api = api or ApiClient()
        self.timing, self.clock = timing, clock
        self._observed: Observed | None = None
        self._renewed_at: float | None = None
        self._last_error: int | None = None
        self._refused_since: float | None = None  # first of the refusals in a row
        self._refusal = ""

    def holder(self) -> str | None:
        """The holder of the Lease as last read (None before a read, or when released)."""
        return self._observed.holder if self._observed is not None else None

    def is_leader(self) -> bool:
        renewed = self._renewed_at
        return renewed is not None and self.clock() - renewed < self.timing.renew_deadline

    def try_once(self) -> bool:
        """One round of acquire-or-renew; True when this process holds the Lease now."""
        now = self.clock()
        try:
            lease = self._get()
            take, self._observed = decide(self.identity, lease, self._observed, now, self.timing)
            if not take:
                self._answered()
                return self.is_leader()
            if lease is None:
                self._create()
            else:
                self._update(lease)
            self._renewed_at = now
        except ApiException as exc:
            # 409: another candidate won this round (normal). Anything else (403 above all:
            # the Lease's namespace has no Role for us) would keep this replica a silent
            # standby forever, so it is said once per distinct cause, with what to fix.
            if exc.status == 409:
                log.debug("lease %s/%s: %s", self.namespace, self.name, exc.reason)
                self._refused_since = None
            else:
                if self._refused_since is None:
                    self._refused_since = now
                self._refusal = f"HTTP {exc.status} {exc.reason}"
            if exc.status in RETRIED_STATUSES or not exc.status:
                # Throttling (429, common at start-up) or a server in trouble: the next
                # round asks again. Retried, so never an ERROR (ERROR is worth paging on).
                if exc.status != self._last_error:
                    log.warning(
                        "lease %s/%s: HTTP %s %s; asking again in %.0f s",
                        self.namespace,
                        self.name,
                        exc.status,
                        exc.reason,
                        self.timing.retry_period,
                    )
            elif exc.status != 409 and exc.status != self._last_error:
                log.error(
                    "cannot hold the Lease %s/%s (HTTP %s %s); this replica stays standby. "
                    "Check --lease-namespace (default $POD_NAMESPACE) and that the operator's "
                    "Role there grants get/create/update on leases.",
                    self.namespace,
                    self.name,
                    exc.status,
                    exc.reason,
                )
            self._last_error = exc.status
            return self.is_leader()
        except (HTTPError, OSError) as exc:
            # No answer in time, or no connection (urllib3's timeouts, `AnswerTooSlow`): the
            # next round asks again. Raised, it would end the renewing task and leave a
            # leader acting unrenewed.
            if self._last_error != 0:
                log.warning(
                    "lease %s/%s: no answer (%s: %s); asking again in %.0f s",
                    self.namespace, self.name, type(exc).__name__, exc, self.timing.retry_period,
                )  # fmt: skip
            self._last_error = 0
            return self.is_leader()
        self._answered()
        return self.is_leader()

    def _answered(self) -> None:
        """The API server let this round through: no refusal in a row any more."""
        self._last_error = None
        self._refused_since = None

    def problem(self) -> str | None:
        """Why this replica cannot work, once the Lease has been refused (not lost to
        another candidate) for `refused_unhealthy_after` seconds in a row; else None."""
        since = self._refused_since
        if since is None or self.clock() - since < self.timing.refused_unhealthy_after:
            return None
        return (
            f"the Lease {self.namespace}/{self.name} has been refused for "
            f"{self.clock() - since:.0f} s ({self._refusal}): this replica can never lead. "
            "Check --lease-namespace (default $POD_NAMESPACE) and that the operator's Role "
            "there grants get/create/update on leases."
        )

    def release(self) -> None:
        """Hand the Lease over at shutdown, so a candidate need not wait it out."""
        if not self.is_leader():
            return
        try:
            lease = self._get()
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                self._replace(lease)
        except (ApiException, HTTPError, OSError) as exc:
            log.warning("could not release lease %s/%s: %s", self.namespace, self.name, exc)
        self._renewed_at = None

    # ---- I/O

    def _get(self) -> dict[str, Any] | None:
        try:
            path = RESOURCES["Lease"].object(self.namespace, self.name)
            return request(self.api, "GET", path, timeout=self.timing.request_timeout)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _spec(self, previous: Mapping[str, Any] | None) -> dict[str, Any]:
        spec = dict((previous or {}).get("spec") or {})
        stamp = _micro_time()
        if spec.get("holderIdentity") != self.identity:
            spec["acquireTime"] = stamp
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (
                1 if previous else 0
            )
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=int(self.timing.lease_duration),
            renewTime=stamp,
        )
        return spec

    def _create(self) -> None:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": self._spec(None),
        }
        path = RESOURCES["Lease"].collection(self.namespace)
        request(self.api, "POST", path, body=body, timeout=self.timing.request_timeout)

    def _update(self, lease: dict[str, Any]) -> None:
        # A replace carries the resourceVersion read: a concurrent taker makes it a 409.
        self._replace({**lease, "spec": self._spec(lease)})

    def _replace(self, lease: Mapping[str, Any]) -> None:
        path = RESOURCES["Lease"].object(self.namespace, self.name)
        request(self.api, "PUT", path, body=dict(lease), timeout=self.timing.request_timeout)
