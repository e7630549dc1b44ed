"""`sps-operator run`: the operator process (kopf, standalone)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import functools
import logging
import math
import os
import signal
import socket
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sps_operator import __version__
from sps_operator.constants import IMAGE
from sps_operator.controller.policies.job_policy import BORROW_BOUNDS, JobPolicy, NameRule
from sps_operator.controller.policies.kueue import KUEUE_RECHECK_SECONDS
from sps_operator.controller.policies.pace import DEFAULT_CEILING

if TYPE_CHECKING:
    from sps_operator.controller.process.leader import LeaseElector
    from sps_operator.controller.process.metrics import Metrics

log = logging.getLogger("sps_operator.main")


def parse_args(argv: list[str] | None, *, testing: bool = False) -> argparse.Namespace:
    """`sps-operator run`'s flags; the test-only hooks only with `testing` (the test entry
    point, controller/testing_main.py): the production command refuses them."""
    parser = argparse.ArgumentParser(
        prog="sps-operator run",
        description="Run the SpsProfile operator (kopf, standalone: one replica).",
    )
    _add_watch_args(parser)
    _add_job_default_args(parser)
    parser.add_argument(
        "--kube-qps",
        type=float,
        default=20.0,
        help="client-side limit of API requests per second (reads and writes)",
    )
    parser.add_argument(
        "--kube-burst", type=int, default=40, help="requests allowed at once above --kube-qps"
    )
    _add_job_policy_args(parser)
    _add_log_args(parser)
    if testing:
        _add_testing_hooks(parser)
    else:
        parser.set_defaults(
            pause_before_write=None,
            clock_offset_file=None,
            kueue_recheck_seconds=KUEUE_RECHECK_SECONDS,
        )
    args = parser.parse_args(argv)
    if args.pause_before_write:
        from sps_operator.controller.process.faults import parse_point

        try:
            parse_point(args.pause_before_write)
        except ValueError as exc:
            parser.error(f"--pause-before-write: {exc}")
    return args


def _add_watch_args(parser: argparse.ArgumentParser) -> None:
    """What the operator watches, how often, and how its replicas share the work."""
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        help="watch this namespace (repeatable); default: all namespaces",
    )
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace")
    parser.add_argument(
        "--liveness",
        default=None,
        help="health endpoint URL, e.g. http://0.0.0.0:8080/healthz (200 while this process "
        "works: leading and reconciling, or standing by for the leader's Lease)",
    )
    parser.add_argument(
        "--leader-election",
        action="store_true",
        help="run several replicas: the one holding the Lease --lease-name acts, the others "
        "stand by and take over within ~12 s",
    )
    parser.add_argument("--lease-name", default="sps-operator")
    parser.add_argument(
        "--lease-namespace",
        default=os.environ.get("POD_NAMESPACE") or "default",
        help="default: $POD_NAMESPACE",
    )
    parser.add_argument("--metrics-port", type=int, default=9090, help="0 disables /metrics")
    parser.add_argument(
        "--resync-seconds",
        type=float,
        default=300.0,
        help="a pass per profile at least this often (±20 %%), as a safety net: watch events "
        "wake the profiles they concern at once",
    )
    parser.add_argument(
        "--workers", type=int, default=8, help="passes running at once, across profiles"
    )
    parser.add_argument("--gpu-debounce-seconds", type=float, default=30.0)
    parser.add_argument(
        "--min-refresh-interval-seconds",
        type=float,
        default=3600.0,
        help="minimum seconds between two scheduled runs of a profile, and between two "
        "rollouts of a new table onto a Deployment that already runs one measured for it (a "
        "profile's spec.refresh.minIntervalSeconds may only lengthen it)",
    )
    parser.add_argument(
        "--max-concurrent-rollouts",
        type=int,
        default=DEFAULT_CEILING,
        help="the most targets of one profile mid-rollout at once, whatever its "
        "spec.rollout.maxConcurrent asks (0: no ceiling)",
    )
    parser.add_argument(
        "--workload-progress-seconds",
        type=float,
        default=600.0,
        help="how long a rollout onto a StatefulSet or LeaderWorkerSet may take before it "
        "counts as failed and goes back to the previous table (those kinds have no "
        "progressDeadlineSeconds; a Deployment's own counts for it)",
    )
    parser.add_argument(
        "--confirm-servers",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="confirm Live by what the serving servers report (a bounded GET /server_info "
        "per serving pod, each pod once); --no-confirm-servers: never call serving pods",
    )


def _add_job_default_args(parser: argparse.ArgumentParser) -> None:
    """What every profiling Job gets unless its profile says otherwise."""
    parser.add_argument("--profiler-image", default=IMAGE)
    parser.add_argument(
        "--job-label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a label for every profiling Job and its pod (repeatable; a profile's "
        "spec.job.labels wins), e.g. kueue.x-k8s.io/queue-name=gpu-profiling",
    )
    parser.add_argument(
        "--job-annotation",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an annotation for every profiling Job and its pod (repeatable)",
    )
    parser.add_argument(
        "--job-priority-class",
        default=None,
        help="PriorityClass of every profiling Job's pod (a profile's spec.job wins)",
    )


def _add_job_policy_args(parser: argparse.ArgumentParser) -> None:
    """What a profile may ask of its Job (the cluster admin's bounds)."""
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
    parser.add_argument(
        "--allow-queue",
        action="append",
        default=[],
        metavar="PATTERN",
        help="Kueue queues a profiling Job may name (repeatable); a Job naming none of them, "
        "or no queue, is refused. Default: the queue of --job-label "
        "kueue.x-k8s.io/queue-name, if given, is required",
    )
    policy = JobPolicy()
    lists = (
        ("--allowed-priority-classes", policy.priority_classes.allowed,
         "PriorityClasses (and Kueue WorkloadPriorityClasses) a Job may use"),
        ("--reserved-priority-classes", policy.priority_classes.reserved,
         "PriorityClasses refused unless an allowed pattern inside them names them"),
        ("--allowed-label-keys", policy.label_keys.allowed, "keys spec.job.labels may set"),
        ("--reserved-label-keys", policy.label_keys.reserved,
         "label keys refused unless an allowed pattern inside them names them"),
        ("--allowed-annotation-keys", policy.annotation_keys.allowed,
         "keys spec.job.annotations may set"),
        ("--reserved-annotation-keys", policy.annotation_keys.reserved,
         "annotation keys refused unless an allowed pattern inside them names them"),
        ("--allowed-server-hosts", policy.allowed_server_hosts,
         "hosts an External spec.server.url may name (* is one DNS label, {namespace} the "
         "profile's namespace)"),
    )  # fmt: skip
    for flag, default, what in lists:
        parser.add_argument(
            flag,
            type=pattern_list,
            default=default,
            metavar="PATTERN,...",
            help=f"{what} (comma-separated fnmatch patterns, empty for none; default: "
            f"{','.join(default) or 'none'})",
        )
    bounds = BORROW_BOUNDS
    for bound_flag, seconds, about in (
        ("--max-lent-seconds", bounds.max_lent_seconds,
         "the longest a replica stays lent to a run (capacity.mode BorrowReplica), from the "
         "borrow: past it the run ends and the replica goes back"),
        ("--max-rollout-hold-seconds", bounds.max_rollout_hold_seconds,
         "the longest a lent replica is kept for the rollout of the run's table (never "
         "longer than the Deployment's progressDeadlineSeconds and a minute)"),
        ("--max-pool-turn-seconds", bounds.max_pool_turn_seconds,
         "how long the first run in line to borrow on a GPU product may leave the free pool "
         "unused before it goes after the others (a run waiting while others hold the pool "
         "keeps its place)"),
    ):  # fmt: skip
        parser.add_argument(
            bound_flag, type=bound_seconds, default=seconds,
            help=f"{about} (default {seconds:.0f})",
        )  # fmt: skip
    parser.add_argument(
        "--max-active-deadline-seconds",
        type=int,
        default=policy.max_active_deadline_seconds,
        help="the largest spec.job.activeDeadlineSeconds a profile may ask for",
    )
    parser.add_argument(
        "--max-run-pods",
        type=int,
        default=policy.max_run_pods,
        help="the most pods one profiling run may hold at once (a multi-node clone runs one "
        "per node of the target's --nnodes)",
    )
    parser.add_argument(
        "--max-gpus-per-pod",
        type=int,
        default=policy.max_gpus_per_pod,
        help="the most GPUs one profiling pod may hold (the target's request, cloned)",
    )


def _add_log_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--debug", action="store_true")
    parser.add_argument("--log-format", choices=["plain", "full", "json"], default="full")


def _add_testing_hooks(parser: argparse.ArgumentParser) -> None:
    """Hooks that only the bed's tests use; absent from `sps-operator run`."""
    parser.add_argument(
        "--clock-offset-file",
        type=Path,
        default=None,
        help="testing: seconds to add to the wall clock, re-read on every pass",
    )
    parser.add_argument(
        "--pause-before-write",
        default=None,
        metavar="KIND[@AFTER]",
        help="testing only (crash-point tests): when the first write of KIND (after one of "
        "AFTER) is about to be sent, log a marker line and block every write from then on "
        "(controller/process/faults.py)",
    )
    # A production operator has no reason to ask Kueue more often than every 30 s; the bed's
    # Kueue scenarios would each wait out one such recheck per step.
    parser.add_argument(
        "--kueue-recheck-seconds",
        type=positive_seconds,
        default=KUEUE_RECHECK_SECONDS,
        help="testing: how often a run queued in Kueue looks at Kueue's words again (a "
        "Workload is read at most half as often)",
    )


def positive_seconds(text: str) -> float:
    """A finite number of seconds above zero (zero would be a pass loop)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def bound_seconds(text: str) -> float:
    """An admin's bound of a hold: positive seconds, at most a year (a longer one is no
    bound, and a date that far away cannot be computed)."""
    value = positive_seconds(text)
    if value > 365 * 24 * 3600:
        raise argparse.ArgumentTypeError(f"{text!r} is more than a year")
    return value


def pattern_list(text: str) -> tuple[str, ...]:
    """A comma-separated list of patterns ("" is the empty list)."""
    return tuple(p.strip() for p in text.split(",") if p.strip())


def job_policy(args: argparse.Namespace) -> JobPolicy:
    """The admin's policy for profiling Jobs, from the flags."""
    return JobPolicy(
        allowed_images=tuple(args.allow_job_image),
        allowed_service_accounts=tuple(args.allow_service_account),
        allowed_queues=tuple(args.allow_queue),
        priority_classes=NameRule(args.allowed_priority_classes, args.reserved_priority_classes),
        label_keys=NameRule(args.allowed_label_keys, args.reserved_label_keys),
        annotation_keys=NameRule(args.allowed_annotation_keys, args.reserved_annotation_keys),
        max_active_deadline_seconds=args.max_active_deadline_seconds,
        max_run_pods=args.max_run_pods,
        max_gpus_per_pod=args.max_gpus_per_pod,
        allowed_server_hosts=args.allowed_server_hosts,
    )


def key_values(items: list[str], flag: str) -> dict[str, str]:
    """KEY=VALUE arguments as a dict; a malformed one is a usage error."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"sps-operator run: {flag} needs KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def make_clock(offset_file: Path | None) -> Callable[[], datetime]:
    def clock() -> datetime:
        now = datetime.now(UTC)
        if offset_file is not None and offset_file.exists():
            text = offset_file.read_text().strip()
            if text:
                now += timedelta(seconds=float(text))
        return now

    return clock


def main(argv: list[str] | None = None, *, testing: bool = False) -> int:
    args = parse_args(argv, testing=testing)
    # `kill -USR1 <pid>` prints every thread's stack to stderr: a stuck pass says where.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    import kopf
    from kubernetes import config

    from sps_operator.controller.handlers import Runtime, register
    from sps_operator.controller.kube.builders import JobDefaults
    from sps_operator.controller.kube.client import Kube
    from sps_operator.controller.kube.ratelimit import TokenBucket
    from sps_operator.controller.passes.state import Settings
    from sps_operator.controller.process.metrics import Metrics
    from sps_operator.controller.reconcile.reconciler import Reconciler

    configure_logging(debug=args.debug, verbose=args.verbose, log_format=args.log_format)
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        config.load_incluster_config()
    else:
        config.load_kube_config()

    metrics = Metrics()
    if args.metrics_port:
        metrics.serve(args.metrics_port)
    kube = Kube(limit=TokenBucket(args.kube_qps, args.kube_burst))
    if args.pause_before_write:
        from sps_operator.controller.process.faults import pause_before_write

        pause_before_write(kube, args.pause_before_write)
        log.warning("testing: will pause before write %s", args.pause_before_write)
    reconciler = Reconciler(
        kube,
        Settings(
            profiler_image=args.profiler_image,
            gpu_debounce_seconds=args.gpu_debounce_seconds,
            policy=job_policy(args),
            min_refresh_interval_seconds=args.min_refresh_interval_seconds,
            max_concurrent_rollouts=max(args.max_concurrent_rollouts, 0),
            workload_progress_seconds=args.workload_progress_seconds,
            confirm_servers=args.confirm_servers,
            pool_namespace=args.lease_namespace,
            max_lent_seconds=args.max_lent_seconds,
            max_rollout_hold_seconds=args.max_rollout_hold_seconds,
            max_pool_turn_seconds=args.max_pool_turn_seconds,
            kueue_recheck_seconds=args.kueue_recheck_seconds,
            job_defaults=JobDefaults(
                labels=key_values(args.job_label, "--job-label"),
                annotations=key_values(args.job_annotation, "--job-annotation"),
                priority_class=args.job_priority_class,
            ),
        ),
        clock=make_clock(args.clock_offset_file),
        metrics=metrics,
    )
    registry = kopf.OperatorRegistry()
    register(registry, reconciler, Runtime(args.resync_seconds, args.workers))

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
    operator = functools.partial(
        kopf.operator,
        registry=registry,
        standalone=True,
        clusterwide=not namespaces,
        namespaces=namespaces,
    )
    elector = None
    if args.leader_election:
        from sps_operator.controller.process.leader import LeaseElector

        identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
        elector = LeaseElector(args.lease_name, args.lease_namespace, identity)
    log.info("sps-operator %s", __version__)
    return asyncio.run(run(operator, elector, args.liveness, metrics))


class RetriedIsWarning(logging.Filter):
    """kopf logs at ERROR what it retries by itself: a request attempt it will repeat (an
    API server throttling the start-up's burst of LISTs with 429 above all), a watch
    stream whose 429 escalated (the stream is always restarted), a handler's temporary
    failure. Those become WARNING, so an ERROR line stays worth paging on: something
    nothing will retry. The wording is kopf's; a test pins it to the kopf installed."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.ERROR and retried_by_kopf(record):
            record.levelno, record.levelname = (
                logging.WARNING,
                logging.getLevelName(logging.WARNING),
            )
        return True


def retried_by_kopf(record: logging.LogRecord) -> bool:
    if not record.name.startswith("kopf"):
        return False
    message = record.getMessage()
    if " failed; will retry: " in message or " failed temporarily: " in message:
        return True
    # An escalated 429 of a watch stream's LIST or WATCH: kopf restarts the stream anyway.
    return record.name == KOPF_WATCHING_LOGGER and "APITooManyRequestsError" in message


KOPF_WATCHING_LOGGER = "kopf._cogs.clients.watching"


def configure_logging(*, debug: bool, verbose: bool, log_format: str) -> None:
    """kopf's loggers at WARNING by default (kopf's own default, INFO, is a line per
    handler run, i.e. per watch event); the operator's own at INFO or finer. What kopf
    retries by itself is logged as WARNING, not ERROR (`RetriedIsWarning`)."""
    import kopf

    level = logging.DEBUG if debug else (logging.INFO if verbose else logging.WARNING)
    kopf.configure(
        debug=debug,
        verbose=verbose,
        quiet=not (debug or verbose),
        log_format={
            "plain": kopf.LogFormat.PLAIN,
            "full": kopf.LogFormat.FULL,
            "json": kopf.LogFormat.JSON,
        }[log_format],
    )
    logging.getLogger("sps_operator").setLevel(min(level, logging.INFO))
    for handler in logging.getLogger().handlers:  # kopf's own: the one that prints
        kopfs = type(handler).__module__.startswith("kopf")
        if kopfs and not any(isinstance(f, RetriedIsWarning) for f in handler.filters):
            handler.addFilter(RetriedIsWarning())


async def run(
    operator: Callable[..., Coroutine[Any, Any, None]],
    elector: LeaseElector | None,
    liveness: str | None,
    metrics: Metrics | None = None,
) -> int:
    """The operator until SIGTERM/SIGINT; with an elector, only while leading. Exit 1 when
    leadership was lost (the pod restarts and stands by again)."""
    from sps_operator.controller.process.health import serve_health

    def leading(now: bool) -> None:
        state["leading"] = now
        if metrics is not None:
            metrics.leading(now)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    state = {"leading": False, "lost": False}
    leading(elector is None)
    problem = elector.problem if elector is not None else None
    health = await serve_health(liveness, problem) if liveness else None
    try:
        if elector is not None:
            if not await _acquire(elector, stop):
                return 0
            leading(True)
            renewing = asyncio.create_task(_renew(elector, stop, state))
        await operator(stop_flag=stop)
        if elector is not None:
            # The renewing task ends its round first (`_renew` returns once `stop` is set):
            # a renewal still in flight after the release would take the Lease again, and
            # the next leader would wait out a whole lease duration.
            stop.set()
            await asyncio.gather(renewing, return_exceptions=True)
            await asyncio.to_thread(elector.release)
    finally:
        leading(False)
        if health is not None:
            await health.cleanup()
    return 1 if state["lost"] else 0


async def _acquire(elector: LeaseElector, stop: asyncio.Event) -> bool:
    """Stand by until this process holds the Lease (True) or is told to stop (False)."""
    log.info("standing by for lease %s/%s", elector.namespace, elector.name)
    pointed_at: str | None = None
    while not stop.is_set():
        if await asyncio.to_thread(elector.try_once):
            log.warning("leading: holding lease %s/%s", elector.namespace, elector.name)
            return True
        holder = elector.holder()
        if holder is not None and holder != pointed_at:
            # `kubectl logs deploy/...` picks one pod: from a standby, say where the leader is.
            log.warning(leader_pointer(elector, holder))
            pointed_at = holder
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), elector.timing.retry_period)
    return False


def leader_pointer(elector: LeaseElector, holder: str) -> str:
    return (
        f"standing by; the leader is {holder} (Lease {elector.namespace}/{elector.name}): "
        f"kubectl -n {elector.namespace} logs pod/{holder}"
    )


# How often leadership is checked against the clock while a renewal round is under way.
LEADERSHIP_CHECK_S = 0.25


async def _renew(elector: LeaseElector, stop: asyncio.Event, state: dict[str, bool]) -> None:
    """Renew every `retry_period`; stop the operator once leadership lapses. Leadership
    lapses by the clock (`is_leader`: `renew_deadline` after the last renewal's start),
    checked while a round is still waiting for the API server too: a slow or hung Lease
    request never keeps a leader acting past its deadline (the round's thread is left to
    end at its own request timeout). Returns once `stop` is set and no round is under way."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), elector.timing.retry_period)
        if stop.is_set():
            return
        round_ = asyncio.ensure_future(asyncio.to_thread(elector.try_once))
        while not round_.done() and elector.is_leader():
            await asyncio.wait({round_}, timeout=LEADERSHIP_CHECK_S)
        if not elector.is_leader():
            log.error("lost lease %s/%s: stopping", elector.namespace, elector.name)
            state["lost"] = True
            stop.set()
