"""`sps-testbed build|up|down|status|env|run|preflight|demo|controlplane`: the test bed
from the shell."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from sps_testbed import hostcheck, kueue, lws
from sps_testbed.artifacts import PAST_RELEASES, ArtifactError, build_artifacts, build_past_release
from sps_testbed.cluster import (
    DEFAULT_NODES,
    NodeSpec,
    RealNodeCluster,
    TestbedError,
    default_state_dir,
)
from sps_testbed.controlplane import TEST_NODES


def _cmd_build(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    art = build_artifacts()
    print(f"node binaries: {art.node_bin}")
    print(f"kueue: {art.kueue_dir}")
    print(f"lws: {art.lws_dir}")
    for role, image in art.images.items():
        print(f"image {role}: {image.ref} ({image.archive})")
    if args.past_releases:
        for version, commit in PAST_RELEASES.items():
            past = build_past_release(commit)
            print(f"image operator {version}: {past.operator.ref} ({past.operator.archive})")
    print(f"built in {time.monotonic() - t0:.1f}s")
    return 0


def _install_addons(bed: RealNodeCluster, addons: list[str]) -> None:
    if "kueue" in addons:
        setup = bed.install_kueue()
        print(
            f"Kueue {setup.version} in kueue-system ({setup.image}), ready in "
            f"{setup.timings['visibility_available']:.1f}s ({setup.timings}); ClusterQueue "
            f"{setup.cluster_queue!r}: flavors {setup.flavors}, priority classes "
            f"{setup.priority_classes}"
        )
        print("  a namespace needs only a LocalQueue (kubectl apply -n NS -f -):")
        print(yaml.safe_dump(kueue.local_queue("NS"), sort_keys=False), end="")
    if "lws" in addons:
        lws_setup = bed.install_lws()
        print(
            f"LeaderWorkerSet {lws_setup.version} in {lws.NAMESPACE} ({lws_setup.image}), "
            f"webhooks serving in {lws_setup.timings['webhooks_serving']:.1f}s "
            f"({lws_setup.timings}); kind LeaderWorkerSet, apiVersion {lws.API_VERSION}"
        )


def _cmd_up(args: argparse.Namespace) -> int:
    nodes = [NodeSpec.parse(n) for n in args.node] or list(DEFAULT_NODES)
    policies = "network-policies" in args.with_
    bed = RealNodeCluster(
        args.state_dir, nodes=nodes, detached=True, with_network_policies=policies
    )
    if bed.running():
        print(f"test bed already running in {bed.state_dir}")
        if policies and "kube-router" not in bed.record().pids:
            print("--with network-policies: only at start; stop the bed first", file=sys.stderr)
            return 1
        _install_addons(RealNodeCluster.attach(args.state_dir), args.with_)
        return 0
    bed.build()
    bed.start(timeout=args.timeout)
    rec = bed.record()
    print(
        f"built/checked artifacts in {bed.build_seconds:.1f}s; "
        f"bed ready in {bed.start_seconds:.1f}s"
    )
    print(f"  timings (s since supervisor start): {rec.timings}")
    print(f"  API server {rec.server}, network namespace spstb-{rec.bed_id}")
    print(
        f"  registry {rec.registry} (CA {rec.registry_ca}); chart {' '.join(bed.chart_reference())}"
    )
    for node in rec.nodes:
        print(f"  node {node.name}: {node.product} x{node.gpus} at {node.node_ip}")
    if policies:
        print(f"  NetworkPolicy enforced for the pods on {rec.nodes[0].name} (kube-router)")
    _install_addons(bed, args.with_)
    print(f"export KUBECONFIG={bed.kubeconfig}")
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    try:
        bed = RealNodeCluster.attach(args.state_dir)
    except TestbedError as err:
        print(err)
        return 0
    bed.stop()
    print(f"test bed in {bed.state_dir} stopped")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    bed = RealNodeCluster.attach(args.state_dir)
    rec = bed.record()
    alive = bed.running()
    print(f"status: {rec.status if alive else 'not running'} ({bed.state_dir})")
    if rec.error:
        print(f"error: {rec.error}")
    if alive:
        print(bed.kubectl("get", "nodes", "-o", "wide", "-L", "nvidia.com/gpu.product"), end="")
    return 0 if alive and rec.status == "ready" else 1


def _cmd_env(args: argparse.Namespace) -> int:
    bed = RealNodeCluster.attach(args.state_dir)
    from sps_testbed.binaries import find_binaries

    dirs = ":".join(str(d) for d in find_binaries(build=False).path_dirs())
    print(f"export KUBECONFIG={bed.kubeconfig}")
    for name, value in bed.registry_env().items():
        print(f"export {name}={value}")
    if dirs:
        print(f"export PATH={dirs}:$PATH")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    """Start a bed, run the command with SPS_TESTBED_ATTACH set to it, stop the bed.

    The bed is not detached: it stops with this process, however that ends. What the
    command returns is what this returns; a bed that does not start returns 1. Its nodes
    are the tests' (TEST_NODES) unless --node says otherwise."""
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("sps-testbed run: no command (sps-testbed run -- pytest ...)", file=sys.stderr)
        return 2
    nodes = [NodeSpec.parse(n) for n in args.node] or list(TEST_NODES)
    with tempfile.TemporaryDirectory(prefix=hostcheck.RUN_STATE_PREFIX) as tmp:
        bed = RealNodeCluster(args.state_dir or Path(tmp), nodes=nodes)
        try:
            bed.build()
            bed.start(timeout=args.timeout)
            print(
                f"sps-testbed run: artifacts checked/built in {bed.build_seconds:.1f}s, bed "
                f"ready in {bed.start_seconds:.1f}s ({bed.record().timings}); {bed.state_dir}",
                flush=True,
            )
            env = dict(os.environ, SPS_TESTBED_ATTACH=str(bed.state_dir))
            return subprocess.run(command, env=env, check=False).returncode
        finally:
            bed.stop()


def _cmd_preflight(args: argparse.Namespace) -> int:
    """Before beds start: the beds already running (and how to stop them), and whether the
    inotify limits and the available memory leave room for `--beds` more of `--nodes`
    nodes in all; non-zero when they do not."""
    if args.raise_limits:
        for line in hostcheck.raise_limits():
            print(f"sps-testbed preflight: {line}")
    ok, lines = hostcheck.check(hostcheck.BedsToStart(args.beds, args.nodes))
    for line in lines:
        print(f"sps-testbed preflight: {line}", file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Subcommands with arguments of their own (`sps-testbed demo --help`).
    if argv[:1] == ["demo"]:
        from sps_testbed.demo import main as demo

        return demo(argv[1:])
    if argv[:1] == ["controlplane"]:
        from sps_testbed.controlplane_cli import main as controlplane

        return controlplane(argv[1:])
    parser = argparse.ArgumentParser(prog="sps-testbed", description=__doc__)
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help=f"default: $SPS_TESTBED_DIR or {default_state_dir()}",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    build = sub.add_parser("build", help="build (or find cached) binaries and images")
    build.add_argument(
        "--past-releases",
        action="store_true",
        help="also the operator images of the releases the upgrade test starts from",
    )
    build.set_defaults(fn=_cmd_build)
    up = sub.add_parser("up", help="start a bed, detached")
    up.add_argument("--node", action="append", default=[], help="NAME=PRODUCT[:GPUS], repeatable")
    up.add_argument("--timeout", type=float, default=420.0)
    up.add_argument(
        "--with",
        dest="with_",
        action="append",
        choices=["kueue", "lws", "network-policies"],
        default=[],
        help="also install: kueue (Kueue with a ClusterQueue `gpu`, a flavor per GPU product);"
        " lws (LeaderWorkerSet with its webhooks);"
        " network-policies (kube-router's policy controller enforces NetworkPolicy for the"
        " first node's pods; at start only)",
    )
    up.set_defaults(fn=_cmd_up)
    sub.add_parser("down", help="stop the bed and remove what it made").set_defaults(fn=_cmd_down)
    sub.add_parser("status", help="is it running; its nodes").set_defaults(fn=_cmd_status)
    sub.add_parser("env", help="print KUBECONFIG and PATH exports").set_defaults(fn=_cmd_env)
    run = sub.add_parser(
        "run", help="start a bed, run a command that uses it (SPS_TESTBED_ATTACH), stop it"
    )
    run.add_argument(
        "--node",
        action="append",
        default=[],
        help="NAME=PRODUCT[:GPUS], repeatable (default: the tests' six nodes)",
    )
    run.add_argument("--timeout", type=float, default=420.0)
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    run.set_defaults(fn=_cmd_run)
    preflight = sub.add_parser(
        "preflight", help="may more beds start here: the beds running, the inotify limits"
    )
    preflight.add_argument("--beds", type=int, default=1, help="beds to start (default 1)")
    preflight.add_argument(
        "--nodes",
        type=int,
        default=len(DEFAULT_NODES),
        help=f"their nodes, all beds together (default {len(DEFAULT_NODES)})",
    )
    preflight.add_argument(
        "--raise-limits",
        action="store_true",
        help=f"first raise the inotify limits to kind's {hostcheck.RAISE_COMMAND!r} (root)",
    )
    preflight.set_defaults(fn=_cmd_preflight)
    sub.add_parser("demo", help="the embedded-default demo on a bed of its own (make demo)")
    sub.add_parser("controlplane", help="the control plane alone, no nodes: up|down|env|status")
    args = parser.parse_args(argv)
    try:
        code: int = args.fn(args)
    except (TestbedError, ArtifactError, kueue.KueueError, lws.LwsError, ValueError) as err:
        print(f"sps-testbed: {err}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
