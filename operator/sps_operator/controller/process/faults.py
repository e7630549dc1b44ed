"""Test-only fault injection: stop the operator at a chosen write, so a test can kill it
there (docs/reliability.md, "Crash points"). Off unless `--pause-before-write` is given;
never set it in production.

Every write of a pass goes through `KubeApi`; `pause_before_write` wraps those methods of
one client. Each write has a kind (`write_kind`); the point `KIND` names the first write
of that kind, `KIND@AFTER` the first one after a write of kind AFTER went through (in this
process: `status@borrow-record` is the status write that follows a borrow). When the point is
reached, before the write is sent, the process logs `FAULT INJECTION: paused before write
...` and from then on every write of that client blocks forever (reads go on), so nothing
it does afterwards can blur the crash the test then causes (SIGKILL).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from sps_operator.api import labels as L

log = logging.getLogger("sps_operator.faults")
MARKER = "FAULT INJECTION: paused before write"
WRITES = (
    "create", "delete", "apply", "patch_metadata", "patch_lender", "patch_status", "event",
)  # fmt: skip
# The kinds a point may name (the `<kind>` ones for every object kind the operator writes).
KINDS = (
    "borrow-record",  # a Deployment's sps.dev/borrowed annotation set (and its replicas)
    "borrow-return",  # ... removed (and the replica given back)
    "claim",  # a Deployment's sps.dev/owner annotation set
    "unclaim",
    "status",
    "event",
    "apply-deployment",
    "apply-configmap",
    "patch-deployment",
    "patch-configmap",
    *(f"{verb}-{kind}" for verb in ("create", "delete") for kind in
      ("job", "configmap", "serviceaccount", "role", "rolebinding", "lease")),
)  # fmt: skip


def write_kind(method: str, args: tuple[Any, ...]) -> str:
    """The kind of the write `method(*args)` of `KubeApi`."""
    if method == "patch_lender":  # BorrowReplica: the record and the scale in one write
        method, args = "patch_metadata", ("Deployment", *args[:3])  # (any kind lends)
    if method == "patch_metadata":
        kind, _namespace, _name, patch = args
        annotations = (patch.get("metadata") or {}).get("annotations") or {}
        for key, set_, removed in (
            (L.ANNOTATION_BORROWED, "borrow-record", "borrow-return"),
            (L.ANNOTATION_OWNER, "claim", "unclaim"),
        ):
            if key in annotations:
                return set_ if annotations[key] is not None else removed
        return f"patch-{str(kind).lower()}"
    if method in ("apply", "create"):
        return f"{method}-{str(args[0]['kind']).lower()}"
    if method == "delete":
        return f"delete-{str(args[0]).lower()}"
    if method == "patch_status":
        return "status"
    return method


def parse_point(point: str) -> tuple[str, str | None]:
    """`KIND` or `KIND@AFTER` as (kind, after); ValueError naming the known kinds."""
    kind, _, after = point.partition("@")
    for name in (kind, after) if after else (kind,):
        if name not in KINDS:
            raise ValueError(f"unknown write {name!r} in {point!r}; known: {', '.join(KINDS)}")
    return kind, after or None


def _forever() -> None:
    threading.Event().wait()


class WritePause:
    """Decides, before each write, whether this is the point; once it was, blocks."""

    def __init__(self, point: str, block: Callable[[], None] = _forever) -> None:
        self.point = point
        self.kind, self.after = parse_point(point)
        self.block = block
        self.paused = False
        self.done: set[str] = set()
        self._lock = threading.Lock()

    def before(self, kind: str, detail: str) -> None:
        with self._lock:
            if (
                not self.paused
                and kind == self.kind
                and (self.after is None or self.after in self.done)
            ):
                self.paused = True
                log.warning("%s %s (%s); every write blocks from now on", MARKER, self.point,
                            detail)  # fmt: skip
        if self.paused:
            self.block()

    def after_write(self, kind: str) -> None:
        with self._lock:
            self.done.add(kind)


def pause_before_write(kube: Any, point: str, block: Callable[[], None] = _forever) -> WritePause:
    """Wrap the write methods of `kube` (a `KubeApi`) in place; returns the pause."""
    pause = WritePause(point, block)
    for method in WRITES:
        original = getattr(kube, method)
        setattr(kube, method, _wrapped(pause, method, original))
    return pause


def _wrapped(pause: WritePause, method: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def write(*args: Any, **kwargs: Any) -> Any:
        kind = write_kind(method, args)
        pause.before(kind, _detail(method, args))
        result = original(*args, **kwargs)
        pause.after_write(kind)
        return result

    return write


def _detail(method: str, args: tuple[Any, ...]) -> str:
    """What the write is about, for the marker line: kind and namespace/name."""
    first = args[0] if args else None
    if isinstance(first, Mapping):  # create, apply: the object
        meta = first.get("metadata") or {}
        return f"{method} {first.get('kind')} {meta.get('namespace')}/{meta.get('name')}"
    return f"{method} {' '.join(str(a) for a in args[:3] if isinstance(a, str))}"
