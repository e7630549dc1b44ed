"""`sps-testbed controlplane up | down | env | status`."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sps_testbed.binaries import BinariesError
from sps_testbed.controlplane import ControlPlane, ControlPlaneError, default_state_dir


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sps-testbed controlplane",
        description="A local Kubernetes control plane, no nodes (for a cluster with real "
        "GPU nodes: `sps-testbed up`).",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def with_state_dir(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--state-dir",
            type=Path,
            default=None,
            help="cluster state directory (default $SPS_DEV_CLUSTER_DIR or "
            "~/.local/state/sps-operator/dev-cluster)",
        )

    up = sub.add_parser("up", help="start the control plane (detached)")
    with_state_dir(up)
    up.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for readiness")
    for name, command in _ON_CLUSTER.items():
        with_state_dir(sub.add_parser(name, help=command.help))
    return parser


def cmd_up(args: argparse.Namespace) -> int:
    state_dir: Path = args.state_dir or default_state_dir()
    try:
        existing = ControlPlane.attach(state_dir)
    except ControlPlaneError:
        existing = None
    if existing is not None and existing.running_components():
        if existing.ready():
            print(f"dev cluster already running in {existing.state_dir}", file=sys.stderr)
            print(f"source {existing.env_file}")
            return 0
        if any(existing.running_components().values()):
            print(
                f"a partly running dev cluster is in {existing.state_dir}; "
                "run `sps-testbed controlplane down` first",
                file=sys.stderr,
            )
            return 1
    cp = ControlPlane(state_dir, detached=True)
    started = time.monotonic()
    try:
        cp.start(timeout=args.timeout)
        control_plane_s = time.monotonic() - started
        print(f"control plane ready in {control_plane_s:.1f}s at {cp.server}", file=sys.stderr)
    except (ControlPlaneError, BinariesError, OSError, ValueError) as err:
        cp.stop()
        print(f"sps-testbed controlplane up failed: {err}", file=sys.stderr)
        return 1
    except BaseException:
        cp.stop()  # Ctrl-C while waiting: a detached half-cluster would outlive us
        raise
    print(f"kubeconfig: {cp.kubeconfig}", file=sys.stderr)
    print(f"source {cp.env_file}")
    return 0


def cmd_down(cp: ControlPlane) -> int:
    cp.stop()
    print(f"dev cluster in {cp.state_dir} stopped", file=sys.stderr)
    return 0


def cmd_env(cp: ControlPlane) -> int:
    assert cp.record is not None
    print(f"export KUBECONFIG={shlex.quote(str(cp.kubeconfig))}")
    if cp.record.path_dirs:
        path = ":".join(shlex.quote(d) for d in cp.record.path_dirs)
        print(f'export PATH={path}:"$PATH"')
    return 0


def cmd_status(cp: ControlPlane) -> int:
    assert cp.record is not None
    components = cp.running_components()
    if not components:
        print(f"not running (state in {cp.state_dir})")
        return 1
    for name, alive in components.items():
        print(f"{name:<24} {'running' if alive else 'DEAD'} (pid {cp.record.pids[name]})")
    ready = cp.ready()
    print(f"{'api server':<24} {cp.server} {'ready' if ready else 'NOT READY'}")
    print(f"{'pod network':<24} {cp.record.pod_cidr} (gateway {cp.record.gateway})")
    healthy = ready and all(components.values())
    return 0 if healthy else 1


@dataclass(frozen=True)
class _OnCluster:
    """A command on a control plane that runs, and what it does when there is none."""

    run: Callable[[ControlPlane], int]
    help: str
    without_cluster: str  # what it says when --state-dir holds no control plane ({err}: why)
    to_stdout: bool
    code: int  # and the exit code then


_ON_CLUSTER = {
    "down": _OnCluster(
        cmd_down,
        "stop every process of the cluster",
        "{err}; nothing to stop",
        to_stdout=False,
        code=0,
    ),
    "env": _OnCluster(
        cmd_env,
        "print shell exports: KUBECONFIG and PATH with kubectl and helm",
        "{err}; run `sps-testbed controlplane up`",
        to_stdout=False,
        code=1,
    ),
    "status": _OnCluster(
        cmd_status,
        "show whether the control plane is running",
        "not running: {err}",
        to_stdout=True,
        code=1,
    ),
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "up":
        return cmd_up(args)
    command = _ON_CLUSTER[args.command]
    try:
        cp = ControlPlane.attach(args.state_dir)
    except ControlPlaneError as err:
        text = command.without_cluster.format(err=err)
        print(text, file=sys.stdout if command.to_stdout else sys.stderr)
        return command.code
    return command.run(cp)


if __name__ == "__main__":
    sys.exit(main())
