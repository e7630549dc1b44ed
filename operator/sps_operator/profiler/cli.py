"""`sps-profiler run | fit | all`: SGLang's profiler flags, plus the operator's needs.

Exit status: 0 on success, 1 on any failure (after publishing status=failed and the
message when --publish-configmap is given), 2 on bad command-line usage.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sps_operator.api import limits
from sps_operator.api.kinds import TableKind
from sps_operator.profiler import sweep as sw

if TYPE_CHECKING:
    from sps_operator.tables.fit import FitResult

logger = logging.getLogger("sps_operator.profiler")


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        default=sw.DEFAULT_OUT,
        help="Table path; raw data lands next to it (.rounds.jsonl, .records.jsonl), plus "
        ".manifest.json and .plot.png.",
    )
    parser.add_argument("--log-level", default="info", help="Python logging level.")


def _add_run(parser: argparse.ArgumentParser) -> None:
    _add_sweep_args(parser)
    _add_round_args(parser)
    _add_run_control_args(parser)


def _add_sweep_args(parser: argparse.ArgumentParser) -> None:
    """Which server, and the grid of cells the sweep measures."""
    parser.add_argument("--base-url", default="", help="URL of a running DSpark server.")
    parser.add_argument(
        "--fracs",
        type=float,
        nargs="+",
        default=None,
        help="Off-diagonal budget fractions in (0, 1] (compact-mode server); gives an additive "
        "table. Without it: the diagonal (static) sweep.",
    )
    parser.add_argument(
        "--batch-size", type=int, nargs="+", default=None, help="Explicit per-DP-rank batches."
    )
    parser.add_argument(
        "--max-batch-size",
        type=int,
        default=sw.DEFAULT_MAX_BATCH_SIZE,
        help="Top of the tapered per-rank sweep (when --batch-size is not given).",
    )
    parser.add_argument(
        "--input-len",
        type=int,
        default=None,
        help="Prompt tokens per request (default: sized so each round's steady steps are "
        "centred on --context-len).",
    )
    parser.add_argument(
        "--context-len",
        type=int,
        default=limits.DEFAULT_CONTEXT_LEN,
        help="KV context per request the table describes (default %(default)s, where SGLang's "
        "profiler's median step sits); step times are measured out to it.",
    )
    parser.add_argument("--temperature", type=float, default=sw.DEFAULT_TEMPERATURE)


def _add_round_args(parser: argparse.ArgumentParser) -> None:
    """How one cell's round is measured, and when it stops."""
    parser.add_argument(
        "--min-steady-steps",
        type=int,
        default=None,
        help="Floor on steady steps per round (only when given; the CI rule decides otherwise).",
    )
    parser.add_argument(
        "--min-steady-seconds",
        type=float,
        default=None,
        help="Floor on steady wall seconds per round (only when given).",
    )
    parser.add_argument("--round-timeout", type=float, default=sw.DEFAULT_ROUND_TIMEOUT_SECONDS)
    parser.add_argument("--ramp-token-slack", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--local-tokenizer-path",
        default=None,
        help="Local tokenizer directory (config.json / tokenizer.json) for the vocabulary size.",
    )
    parser.add_argument(
        "--vocab-size", type=int, default=None, help="Vocabulary size for random prompts."
    )
    parser.add_argument(
        "--ci-rel-width",
        type=float,
        default=sw.DEFAULT_CI_REL_WIDTH,
        help="Stop a round when the 95%% CI of the median step time is narrower than this "
        "fraction of the median (default %(default)s).",
    )
    parser.add_argument(
        "--max-steady-steps",
        type=int,
        default=sw.DEFAULT_MAX_STEADY_STEPS,
        help="Stop a round after this many steady steps even if the CI is still wide.",
    )
    parser.add_argument(
        "--max-effective-steps",
        type=float,
        default=sw.DEFAULT_MAX_EFFECTIVE_STEPS,
        help="Stop a round whose CI is still wide once its window holds this many effective "
        "(independent) steps: steps divided by their autocorrelation time (default "
        "%(default)s; 0: no such cap, only --max-steady-steps).",
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=sw.DEFAULT_POLL_INTERVAL_SECONDS,
        help="Seconds between /server_info polls during a round.",
    )


def _add_run_control_args(parser: argparse.ArgumentParser) -> None:
    """Resuming, waiting, progress, and where results are published."""
    parser.add_argument(
        "--node-rank",
        type=int,
        default=None,
        help="This pod's rank in a multi-node profiling clone (one pod template for every "
        "rank): rank 0 profiles; any other rank holds its pod until the Job ends it.",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="Continue an interrupted sweep: keep the rounds in .rounds.jsonl and measure only "
        "the missing cells.",
    )
    parser.add_argument(
        "--wait-for-server",
        type=float,
        default=None,
        metavar="SECONDS",
        help="Poll /health until the server answers, up to SECONDS.",
    )
    parser.add_argument("--progress", action="store_true", help="Print cell k/n, elapsed, ETA.")
    parser.add_argument(
        "--no-preflight",
        dest="preflight",
        action="store_false",
        help="Skip the short pin probe before an off-diagonal sweep.",
    )
    parser.add_argument(
        "--publish-configmap",
        default=None,
        metavar="NAME",
        help="Write status, progress, manifest and rounds into this ConfigMap (in-cluster).",
    )
    parser.add_argument(
        "--publish-namespace",
        default=None,
        help="Namespace of --publish-configmap (default: the pod's namespace).",
    )
    parser.add_argument("--http-timeout", type=float, default=600.0, help=argparse.SUPPRESS)


def _add_fit(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-batch-tokens", type=int, default=None)
    parser.add_argument("--no-self-check", dest="self_check", action="store_false")
    parser.add_argument("--no-plot", dest="plot", action="store_false")
    parser.add_argument(
        "--kind",
        choices=("diagonal", "additive"),
        default=None,
        help="Table kind (default: additive when any round has a frac).",
    )
    parser.add_argument(
        "--diagonal-probes",
        choices=("tiers", "measured"),
        default="tiers",
        help="Diagonal table probes: a step per captured CUDA-graph tier between the measured "
        "ones (default), or only the measured probes (exactly the reference profiler's table).",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sps-profiler",
        description="Measure a DSpark server's SPS cost table: 'run' collects rounds, 'fit' "
        "builds the table from them (no server needed), 'all' does both.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="Collect rounds (one JSON line per cell).")
    _add_common(run)
    _add_run(run)
    fit = sub.add_parser("fit", help="Fit the table and plot from saved rounds.")
    _add_common(fit)
    _add_fit(fit)
    both = sub.add_parser("all", help="run, then fit.")
    _add_common(both)
    _add_run(both)
    _add_fit(both)
    return parser


def _within(flag: str, value: float | None, low: float, high: float) -> None:
    if value is not None and not low <= value <= high:
        raise ValueError(f"{flag} must be in [{low}, {high}], got {value}.")


def check_limits(args: argparse.Namespace) -> None:
    """Refuse what the SpsProfile API refuses, with the same bounds (api/limits.py).

    One exception: `run` may measure a single batch size (debugging, --resume); the API's
    two-probe minimum is for tables, which the fit enforces."""
    if args.command not in ("run", "all"):
        return
    if args.batch_size is not None:
        if len(args.batch_size) > limits.BATCH_SIZES_MAX_COUNT:
            raise ValueError(
                f"--batch-size takes at most {limits.BATCH_SIZES_MAX_COUNT} values, "
                f"got {len(args.batch_size)}."
            )
        for bs in args.batch_size:
            _within("--batch-size values", bs, limits.BATCH_SIZE_MIN, limits.BATCH_SIZE_MAX)
    _within("--max-batch-size", args.max_batch_size, limits.BATCH_SIZE_MIN, limits.BATCH_SIZE_MAX)
    if args.fracs is not None:
        if len(args.fracs) > limits.FRACS_MAX_COUNT:
            raise ValueError(
                f"--fracs takes at most {limits.FRACS_MAX_COUNT} values, got {len(args.fracs)}."
            )
        for frac in args.fracs:
            if not limits.FRAC_MIN_EXCLUSIVE < frac <= limits.FRAC_MAX:
                raise ValueError(f"--fracs values must be in (0, 1], got {frac}.")
    _within("--repeats", args.repeats, limits.REPEATS_MIN, limits.REPEATS_MAX)
    _within("--input-len", args.input_len, limits.INPUT_LEN_MIN, limits.INPUT_LEN_MAX)
    _within("--context-len", args.context_len, limits.CONTEXT_LEN_MIN, limits.CONTEXT_LEN_MAX)
    _within("--ci-rel-width", args.ci_rel_width, limits.CI_REL_WIDTH_MIN, limits.CI_REL_WIDTH_MAX)
    _within("--vocab-size", args.vocab_size, limits.VOCAB_SIZE_MIN, limits.VOCAB_SIZE_MAX)
    _within(
        "--min-steady-steps",
        args.min_steady_steps,
        limits.MIN_STEADY_STEPS_MIN,
        limits.MIN_STEADY_STEPS_MAX,
    )
    _within(
        "--min-steady-seconds",
        args.min_steady_seconds,
        limits.MIN_STEADY_SECONDS_MIN,
        limits.MIN_STEADY_SECONDS_MAX,
    )
    _within(
        "--round-timeout",
        args.round_timeout,
        limits.ROUND_TIMEOUT_SECONDS_MIN,
        limits.ROUND_TIMEOUT_SECONDS_MAX,
    )
    batches = (
        len(args.batch_size)
        if args.batch_size is not None
        else limits.tapered_sweep_size(args.max_batch_size)
    )
    cells = limits.sweep_cells(batches, len(args.fracs or []), args.repeats)
    if cells > limits.MAX_SWEEP_CELLS:
        raise ValueError(
            f"The sweep has {cells} cells (batch sizes x fracs x repeats), above "
            f"{limits.MAX_SWEEP_CELLS}: its rounds would not fit the result ConfigMap. "
            "Measure fewer batch sizes, fracs or repeats."
        )


def _settings(args: argparse.Namespace) -> sw.RoundSettings:
    return sw.RoundSettings(
        input_len=args.input_len,
        context_len=args.context_len,
        temperature=args.temperature,
        ci_rel_width=args.ci_rel_width,
        min_steady_steps=args.min_steady_steps,
        min_steady_seconds=args.min_steady_seconds,
        max_steady_steps=args.max_steady_steps,
        max_effective_steps=args.max_effective_steps or None,
        round_timeout_seconds=args.round_timeout,
        ramp_token_slack=args.ramp_token_slack,
        poll_interval_seconds=args.poll_interval,
    )


def _run_config(args: argparse.Namespace) -> Any:
    from sps_operator.profiler.runner import RunConfig

    batch_sizes = (
        sw.validate_batch_sizes(args.batch_size)
        if args.batch_size is not None
        else sw.build_request_count_sweep(args.max_batch_size)
    )
    if args.repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {args.repeats}.")
    return RunConfig(
        base_url=args.base_url,
        batch_sizes=batch_sizes,
        fracs=sw.validate_fracs(args.fracs),
        settings=_settings(args),
        out=args.out,
        repeats=args.repeats,
        vocab_size=args.vocab_size,
        local_tokenizer_path=args.local_tokenizer_path,
        resume=args.resume,
        progress=args.progress,
        wait_for_server=args.wait_for_server,
        preflight=args.preflight,
        http_timeout=args.http_timeout,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_limits(args)
    except ValueError as exc:
        parser.error(str(exc))  # exit status 2, like any bad usage
    level = getattr(logging, str(args.log_level).upper(), None)
    if not isinstance(level, int):
        print(f"sps-profiler: unknown --log-level {args.log_level!r}", file=sys.stderr)
        return 2
    logging.basicConfig(level=level, format="%(message)s")
    # One line per HTTP poll would drown the progress; keep urllib3 quiet unless debugging.
    logging.getLogger("urllib3").setLevel(max(level, logging.WARNING))
    _interrupt_on_sigterm()
    if args.command in ("run", "all") and args.node_rank:
        return hold_rank(args.node_rank)
    publisher = None
    try:
        if args.command in ("run", "all") and args.publish_configmap:
            from sps_operator.profiler.publish import ConfigMapPublisher

            publisher = ConfigMapPublisher(args.publish_configmap, args.publish_namespace)
            publisher.publish(status="running", message="starting", progress="0/?")
        return _dispatch(args, publisher)
    except KeyboardInterrupt:
        _publish_failure(
            publisher, "interrupted (SIGTERM/SIGINT); measured rounds were kept, rerun to continue"
        )
        print("sps-profiler: interrupted; measured rounds are on disk (--resume)", file=sys.stderr)
        return 1
    except Exception as exc:
        logger.debug("failure", exc_info=True)
        _publish_failure(publisher, str(exc))
        print(f"sps-profiler: error: {exc}", file=sys.stderr)
        return 1


def hold_rank(rank: int, nap_seconds: float = 3600.0) -> int:
    """A worker rank of a group clone: its server serves rank 0, which the profiler beside
    rank 0 drives; this container only keeps the pod until the Job ends it (SIGTERM), so
    that a worker pod ends only when the group does (the Job's deadline bounds it)."""
    if rank < 0:
        print(f"sps-profiler: --node-rank must be at least 0, got {rank}", file=sys.stderr)
        return 2
    try:  # a SIGTERM may come as soon as the line is out
        print(f"sps-profiler: node rank {rank} of a group: rank 0 profiles; holding", flush=True)
        while True:
            time.sleep(nap_seconds)
    except KeyboardInterrupt:
        return 0


def _interrupt_on_sigterm() -> None:
    """A Job deadline or pod deletion sends SIGTERM: unwind like Ctrl-C, so the pin is reset,
    the manifest says failed and the ConfigMap gets the message."""
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)


def _publish_failure(publisher: Any, message: str) -> None:
    if publisher is None:
        return
    try:
        publisher.publish(status="failed", message=message)
    except Exception as exc:
        print(f"sps-profiler: could not publish the failure: {exc}", file=sys.stderr)


def _fit_kind(args: argparse.Namespace) -> TableKind | None:
    """--kind; for `all`, what the run measures (--fracs: Additive); None for `fit` of
    saved rounds without --kind (their rounds say it)."""
    if args.kind is not None:
        return TableKind(args.kind.capitalize())
    if args.command == "all":
        return TableKind.ADDITIVE if args.fracs else TableKind.DIAGONAL
    return None


def _fit(args: argparse.Namespace) -> FitResult:
    """`fit` on the profile directory, as the `fit` and `all` subcommands ask for it."""
    from sps_operator.profiler.fitting import fit_profile

    return fit_profile(
        args.out,
        max_batch_tokens=args.max_batch_tokens,
        run_self_check=args.self_check,
        plot=args.plot,
        kind=_fit_kind(args),
        diagonal_probes=args.diagonal_probes,
    )


def _dispatch(args: argparse.Namespace, publisher: Any) -> int:
    if args.command == "fit":
        _fit(args)
        return 0
    from sps_operator.profiler.runner import run_profile

    cfg = _run_config(args)

    def on_progress(progress: str, rounds: list[dict[str, Any]]) -> None:
        if publisher is not None:
            publisher.publish_quietly(status="running", message="measuring", progress=progress)

    summary = run_profile(cfg, on_progress=on_progress)
    message = f"measured {len(summary.rounds)} rounds"
    if summary.pin_reset == "rejected":
        message += "; the server rejected resetting the budget pin (restart it before serving)"
    if args.command == "all":
        result = _fit(args)
        q = result.quality
        message += f"; {result.kind.lower()} fit RMS {q.rms_ms:.3f} ms, R² {q.r2:.4f}"
    if publisher is not None:
        import json

        manifest = json.loads(summary.paths.manifest.read_text())
        publisher.publish(
            status="succeeded",
            message=message,
            progress=f"{len(summary.rounds)}/{len(summary.rounds)}",
            manifest=manifest,
            rounds=summary.rounds,
        )
    logger.info("%s", message)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
