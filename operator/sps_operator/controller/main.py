"""`sps-operator run`: the operator process (kopf, standalone)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sps_operator.constants import IMAGE


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="sps-operator run",
        description="Run the SpsProfile operator (kopf, standalone: one replica).",
    )
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        help="watch this namespace (repeatable); default: all namespaces",
    )
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace")
    parser.add_argument("--liveness", default=None, help="kopf liveness endpoint URL")
    parser.add_argument("--metrics-port", type=int, default=9090, help="0 disables /metrics")
    parser.add_argument("--resync-seconds", type=float, default=10.0)
    parser.add_argument("--gpu-debounce-seconds", type=float, default=30.0)
    parser.add_argument("--profiler-image", default=IMAGE)
    parser.add_argument(
        "--allow-job-image",
        action="append",
        default=[],
        metavar="PATTERN",
        help="allow spec.job.image values matching this fnmatch pattern (repeatable; default: "
        "none, profiling Jobs run --profiler-image)",
    )
    parser.add_argument(
        "--allow-service-account",
        action="append",
        default=[],
        metavar="PATTERN",
        help="allow spec.job.serviceAccountName values matching this pattern (repeatable; "
        "default: none, each run gets its own ServiceAccount)",
    )
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--debug", action="store_true")
    parser.add_argument("--log-format", choices=["plain", "full", "json"], default="full")
    parser.add_argument(
        "--clock-offset-file",
        type=Path,
        default=None,
        help="testing: seconds to add to the wall clock, re-read on every pass",
    )
    return parser.parse_args(argv)


def make_clock(offset_file: Path | None) -> Callable[[], datetime]:
    def clock() -> datetime:
        now = datetime.now(UTC)
        if offset_file is not None and offset_file.exists():
            text = offset_file.read_text().strip()
            if text:
                now += timedelta(seconds=float(text))
        return now

    return clock


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import kopf
    from kubernetes import config

    from sps_operator.controller.handlers import register
    from sps_operator.controller.kube import Kube
    from sps_operator.controller.metrics import Metrics
    from sps_operator.controller.reconcile import Reconciler
    from sps_operator.controller.state import Settings

    level = logging.DEBUG if args.debug else (logging.INFO if args.verbose else logging.WARNING)
    kopf.configure(
        debug=args.debug,
        verbose=args.verbose,
        log_format={
            "plain": kopf.LogFormat.PLAIN,
            "full": kopf.LogFormat.FULL,
            "json": kopf.LogFormat.JSON,
        }[args.log_format],
    )
    logging.getLogger("sps_operator").setLevel(min(level, logging.INFO))
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        config.load_incluster_config()
    else:
        config.load_kube_config()

    metrics = Metrics()
    if args.metrics_port:
        metrics.serve(args.metrics_port)
    reconciler = Reconciler(
        Kube(),
        Settings(
            profiler_image=args.profiler_image,
            gpu_debounce_seconds=args.gpu_debounce_seconds,
            allowed_job_images=tuple(args.allow_job_image),
            allowed_service_accounts=tuple(args.allow_service_account),
        ),
        clock=make_clock(args.clock_offset_file),
        metrics=metrics,
    )
    registry = kopf.OperatorRegistry()
    register(registry, reconciler, args.resync_seconds)

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # A custom registry has no default login handlers: use the kubernetes client's
        # configuration (kubeconfig or in-cluster), loaded above.
        return kopf.login_via_client(**kwargs)

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: object) -> None:
        settings.persistence.finalizer = "sps.dev/finalizer"
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="sps.dev")
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix="sps.dev", key="last-handled-configuration"
        )
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 60
        settings.execution.max_workers = 8

    namespaces = list(args.namespace)
    asyncio.run(
        kopf.operator(
            registry=registry,
            standalone=True,
            clusterwide=not namespaces,
            namespaces=namespaces,
            liveness_endpoint=args.liveness,
        )
    )
    return 0
