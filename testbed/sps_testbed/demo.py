"""`sps-testbed demo` (what `make demo` runs): the embedded default end to end, on real nodes.

    sps-testbed demo             # run it
    sps-testbed demo down        # stop the cluster it left running
    sps-testbed demo env         # shell exports to look around (KUBECONFIG, kubectl, helm)

What it does, as a user would on a GPU cluster:
1. starts the test bed: the pinned control plane and four GPU nodes (two H100, two H200),
   each a real kubelet with containerd and runc, simulated GPUs behind a device plugin;
2. `helm install`s the chart from the bed's OCI registry (`oci://<registry>/charts/
   sps-operator`, pushed there by the bed); the operator runs as the chart's Deployment, from
   the chart's default image (`ghcr.io/sps-dev/sps-operator:<appVersion>`, which the nodes'
   containerd resolve to the bed's registry; the project's Dockerfile built it), under the
   chart's RBAC and restricted pod security;
3. applies `examples/sglang-deployment.yaml` (the SGLang stand-in image runs `sps-sim`, a
   simulated DSpark server, sped up by `SPS_SIM_TIME_SCALE`) and `examples/diagonal.yaml`;
4. follows the profile (`kubectl sps get -w`), shows the table, a PNG plot of the fit and
   the rolled Deployment;
5. moves the Deployment to the H200 pool and follows the reprofile;
6. says how to look around and how to tear down.

Everything is local: once `make testbed` has built the binaries and images, it needs no
network. It lives beside the test bed, not in the operator's package: it exists to try the
operator without GPUs.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from sps_operator.plugin.cli import watch_rows
from sps_operator.plugin.view import get_row, render_get, watch_layout
from sps_sim.costmodel import GPU_H100, GPU_H200
from sps_testbed import hostcheck
from sps_testbed.binaries import find_binaries
from sps_testbed.cluster import KubectlError, RealNodeCluster, TestbedError

NAMESPACE = "sps-demo"
SYSTEM_NAMESPACE = "sps-system"
RELEASE = "sps-operator"
PROFILE = "llama"
DEPLOYMENT = "llama"
SERVER_CONTAINER = "sglang"
TIME_SCALE_ENV = "SPS_SIM_TIME_SCALE"


class DemoError(RuntimeError):
    """A step failed; the message says which and where to look."""


# --------------------------------------------------------------------------- pure parts


def repo_root() -> Path:
    """The source checkout this module runs from (the chart and examples live there)."""
    return Path(__file__).resolve().parents[2]


def helm_install_args(
    chart: str, version: str, ca_file: Path, namespace: str, watched: str
) -> list[str]:
    """`helm install` from an OCI registry (trusted through `ca_file`) as a team that keeps
    its operator to one namespace would run it: namespaces mode (a Role in `watched`, no
    cluster-wide rights to workloads), the chart's default image."""
    return [
        "install",
        RELEASE,
        chart,
        "--version",
        version,
        "--ca-file",
        str(ca_file),
        "--namespace",
        namespace,
        "--set",
        "watch.mode=namespaces",
        "--set",
        f"watch.namespaces={{{watched}}}",
        "--wait",
        "--timeout",
        "300s",
    ]


def with_time_scale(deployment: dict[str, Any], scale: float) -> dict[str, Any]:
    """The example Deployment with the simulated server sped up (simulated GPU seconds per
    wall second); the profiling Job clones the server's environment, so it runs as fast."""
    out = copy.deepcopy(deployment)
    for container in out["spec"]["template"]["spec"]["containers"]:
        if container["name"] == SERVER_CONTAINER:
            env = [e for e in container.get("env") or [] if e["name"] != TIME_SCALE_ENV]
            container["env"] = [*env, {"name": TIME_SCALE_ENV, "value": f"{scale:g}"}]
    return out


def table_flag(args: Sequence[str]) -> list[str]:
    """The table-path flag among a container's args, with its value (`--f v` or `--f=v`)."""
    for i, arg in enumerate(args):
        if arg == "--speculative-dspark-sps-table-path":
            return list(args[i : i + 2])
        if arg.startswith("--speculative-dspark-sps-table-path="):
            return [arg]
    return []


def profile_done(rows: Sequence[dict[str, str]], gpu: str) -> bool:
    """The demo's profile has a live table for `gpu` and nothing in progress."""
    return any(
        r["name"] == PROFILE
        and r["state"] == "Ready"
        and r["gpu"] == gpu
        and r["table"] != "<none>"
        for r in rows
    )


def profile_failed(rows: Sequence[dict[str, str]]) -> str | None:
    """The state, when the demo's profile shows a failed run (a `...Failed` reason, or a run
    that lost its Job, result or target); transient states (waiting for a GPU product to
    settle, rolling) are not failures."""
    for r in rows:
        state = r["state"]
        if r["name"] == PROFILE and (
            state == "Failed"
            or state.endswith("Failed")
            or state in ("JobMissing", "ResultMissing", "TargetGone")
        ):
            return state
    return None


# --------------------------------------------------------------------------- output


@dataclass
class Console:
    """Plain text a user reads in a terminal; commands are shown as `$ ...`."""

    out: Callable[[str], None] = lambda text: print(text, flush=True)

    bold: bool = False

    def step(self, number: int, title: str) -> None:
        line = f"==> {number}. {title}"
        self.out("\n" + (f"\033[1m{line}\033[0m" if self.bold else line))

    def say(self, text: str) -> None:
        self.out(text)

    def command(self, argv: Sequence[str], output: str) -> None:
        self.out(f"$ {shlex.join(argv)}")
        if output.strip():
            self.out(output.rstrip())


# --------------------------------------------------------------------------- the demo


class Demo:
    def __init__(self, state_dir: Path, time_scale: float, timeout: float, console: Console):
        self.state_dir = state_dir.resolve()
        self.out_dir = self.state_dir / "out"
        self.bed = RealNodeCluster(bed_dir(self.state_dir), detached=True)
        self.time_scale = time_scale
        self.timeout = timeout
        self.console = console
        self.root = repo_root()

    # -- helpers ---------------------------------------------------------------
    def env(self) -> dict[str, str]:
        env = self.bed.env()
        # kubectl finds its `sps` plugin (kubectl-sps) next to this interpreter.
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        env.pop("KUBERNETES_SERVICE_HOST", None)
        return env

    def run(self, argv: Sequence[str], input: str | None = None) -> str:
        proc = subprocess.run(
            list(argv), input=input, capture_output=True, text=True, env=self.env(), timeout=360
        )
        if proc.returncode != 0:
            raise DemoError(f"{shlex.join(argv)} failed: {proc.stderr.strip() or proc.stdout}")
        return proc.stdout

    def kubectl(self, *args: str, input: str | None = None, show: bool = False) -> str:
        out = self.run(["kubectl", *args], input=input)
        if show:
            self.console.command(["kubectl", *args], out)
        return out

    def kubectl_sps(self, *args: str) -> str:
        # Through kubectl's plugin mechanism: `kubectl-sps` is on PATH.
        out = self.run(["kubectl", "sps", *args])
        self.console.command(["kubectl", "sps", *args], out)
        return out

    def rows(self) -> list[dict[str, str]]:
        data = json.loads(self.kubectl("get", "spsprofiles", "-n", NAMESPACE, "-o", "json"))
        now = datetime.now(UTC)
        return [get_row(p, now) for p in data.get("items") or []]

    def operator_logs(self, lines: int = 40) -> str:
        with contextlib.suppress(DemoError):
            return self.kubectl(
                "logs",
                "-n",
                SYSTEM_NAMESPACE,
                "-l",
                "app.kubernetes.io/name=sps-operator",
                f"--tail={lines}",
                "--prefix",
            )
        return "(no operator logs)"

    # -- steps -----------------------------------------------------------------
    def start_cluster(self) -> None:
        self.console.step(1, "Kubernetes with real GPU nodes (kubelet, containerd, runc)")
        stop_previous(self.bed.state_dir)
        started = time.monotonic()
        try:
            self.bed.build()
            self.bed.start()
        except (TestbedError, OSError, ValueError) as err:
            raise DemoError(f"the test bed did not start: {err}") from err
        # The first pod of an image on a node waits for its pull (≈ 640 MB to unpack, once
        # per node): started now, the pulls overlap the chart's install instead of each step.
        self.bed.prefetch_images(["operator", "sglang"])
        self.console.say(
            f"Control plane and {len(self.bed.nodes)} nodes Ready in "
            f"{time.monotonic() - started:.0f} s. Each node is a kubelet with its own containerd "
            "and runc;\na device plugin advertises simulated nvidia.com/gpu and hands each "
            "container its GPU product; nodes carry GPU feature discovery's labels.\n"
            "Every node pulls the operator and SGLang images from the bed's registry in the "
            "background now, as GPU clusters pre-pull their big images."
        )
        self.kubectl(
            "get", "nodes", "-L", "nvidia.com/gpu.product", "-L", "nvidia.com/gpu.count", show=True
        )

    def install_chart(self) -> None:
        self.console.step(2, "Install the operator with Helm (the chart, the project's image)")
        chart, version = self.bed.chart_reference()
        ca = Path(self.bed.registry_env()["SPS_TESTBED_CA"])
        self.console.say(
            f"The bed's registry {self.bed.registry_env()['SPS_TESTBED_REGISTRY']} holds the "
            f"chart (helm push) and every image the nodes pull; its certificate is from the "
            f"bed's CA ($SPS_TESTBED_CA)."
        )
        for ns in (SYSTEM_NAMESPACE, NAMESPACE):
            self.kubectl("create", "namespace", ns, show=True)
        # The operator's namespace enforces the strictest pod security the chart promises.
        self.kubectl(
            "label",
            "namespace",
            SYSTEM_NAMESPACE,
            "pod-security.kubernetes.io/enforce=restricted",
            show=True,
        )
        args = helm_install_args(chart, version, ca, SYSTEM_NAMESPACE, NAMESPACE)
        shown = [a if a != str(ca) else "$SPS_TESTBED_CA" for a in args]
        self.console.command(["helm", *shown], self.run(["helm", *args]))
        self.kubectl("get", "pods", "-n", SYSTEM_NAMESPACE, "-o", "wide", show=True)
        self.console.say(
            f"Image {self.bed.image('operator')} (the chart's default; built from the "
            "Dockerfile, pulled from the bed's registry, which the nodes' containerd use for "
            "ghcr.io); two replicas, one leader (a Lease), the other on standby."
        )

    def deploy(self) -> None:
        self.console.step(3, "An SGLang Deployment and a profile (examples/)")
        examples = self.root / "examples"
        server = yaml.safe_load((examples / "sglang-deployment.yaml").read_text())
        fast = with_time_scale(server, self.time_scale)
        self.console.say(
            f"The SGLang image here is a stand-in whose `python3 -m sglang.launch_server` runs "
            f"sps-sim;\n{TIME_SCALE_ENV}={self.time_scale:g} makes its simulated GPU time pass "
            f"{self.time_scale:g}x faster than the wall clock (the only change to the example)."
        )
        self.console.command(
            ["kubectl", "apply", "-n", NAMESPACE, "-f", "examples/sglang-deployment.yaml"],
            self.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=json.dumps(fast)),
        )
        self.console.command(
            ["kubectl", "apply", "-n", NAMESPACE, "-f", "examples/diagonal.yaml"],
            self.kubectl("apply", "-n", NAMESPACE, "-f", str(examples / "diagonal.yaml")),
        )
        self.console.say(
            f"Other examples (Additive, External, GitOps) are in {examples}; "
            "they select their own Deployments."
        )

    def follow(self, gpu: str, number: int, title: str) -> None:
        self.console.step(number, title)
        self.console.say(f"$ kubectl sps get -n {NAMESPACE} -w")
        rows = self.rows()
        self.console.say(render_get(rows, False, watch_layout(rows)))
        failure: list[str] = []

        def until(current: list[dict[str, str]]) -> bool:
            state = profile_failed(current)
            if state:
                failure.append(state)
                return True
            return profile_done(current, gpu)

        started = time.monotonic()
        rows = watch_rows(
            self.rows, False, 1.0, timeout=self.timeout, until=until, out=self.console.say
        )
        if failure:
            self.kubectl_sps("explain", PROFILE, "-n", NAMESPACE)
            raise DemoError(f"the profile failed ({failure[0]}); see the explanation above")
        if not profile_done(rows, gpu):
            self.kubectl_sps("explain", PROFILE, "-n", NAMESPACE)
            raise DemoError(
                f"no table for {gpu} after {self.timeout:.0f} s; operator log:\n"
                f"{self.operator_logs()}"
            )
        self.console.say(f"(a live table for {gpu} in {time.monotonic() - started:.0f} s)")

    def show_table(self, gpu: str, number: int) -> Path:
        self.console.step(number, f"The table for {gpu}")
        png = self.out_dir / f"{PROFILE}-{gpu}.png"
        self.kubectl_sps("table", PROFILE, "-n", NAMESPACE, "--gpu", gpu, "--plot", str(png))
        return png

    def show_rollout(self, number: int) -> None:
        self.console.step(number, "The Deployment, rolled with its table")
        self.kubectl(
            "rollout",
            "status",
            f"deployment/{DEPLOYMENT}",
            "-n",
            NAMESPACE,
            "--timeout=180s",
            show=True,
        )
        dep = json.loads(
            self.kubectl(
                "get",
                "deployment",
                DEPLOYMENT,
                "-n",
                NAMESPACE,
                "-o",
                "json",
                "--show-managed-fields",
            )
        )
        template = dep["spec"]["template"]
        annotations = {
            k: v
            for k, v in (template["metadata"].get("annotations") or {}).items()
            if k.startswith("sps.dev/")
        }
        (server,) = [c for c in template["spec"]["containers"] if c["name"] == SERVER_CONTAINER]
        mounts = [m for m in server.get("volumeMounts") or [] if "sps" in m["name"]]
        volumes = [v for v in template["spec"].get("volumes") or [] if "sps" in v["name"]]
        managers = sorted({m["manager"] for m in dep["metadata"].get("managedFields") or []})
        self.console.say(
            f"$ kubectl get deployment {DEPLOYMENT} -n {NAMESPACE} -o yaml   "
            "(the parts the operator added)"
        )
        self.console.say(
            yaml.safe_dump(
                {
                    "pod-template annotations": annotations,
                    "server args": table_flag(server.get("args") or []),
                    "volumeMounts": mounts,
                    "volumes": volumes,
                    "field managers": managers,
                },
                sort_keys=False,
            ).rstrip()
        )
        self.kubectl(
            "get", "pods", "-n", NAMESPACE, "-l", f"app={DEPLOYMENT}", "-o", "wide", show=True
        )
        self.show_served(annotations.get("sps.dev/table-hash", ""))

    def show_served(self, table_hash: str) -> None:
        """What the new server says it loaded, asked inside its pod (`/server_info`)."""
        pods = json.loads(
            self.kubectl("get", "pods", "-n", NAMESPACE, "-l", f"app={DEPLOYMENT}", "-o", "json")
        )["items"]
        serving = [
            p
            for p in pods
            if (p["metadata"].get("annotations") or {}).get("sps.dev/table-hash") == table_hash
            and not p["metadata"].get("deletionTimestamp")
            and p.get("status", {}).get("phase") == "Running"
        ]
        if not serving:
            return
        name = serving[0]["metadata"]["name"]
        code = (
            "import json, urllib.request; "
            "info = json.load(urllib.request.urlopen('http://127.0.0.1:30000/server_info')); "
            "print(json.dumps(info.get('sps_table'), indent=2))"
        )
        argv = ["exec", "-n", NAMESPACE, name, "-c", SERVER_CONTAINER, "--", "python3", "-c"]
        out = self.kubectl(*argv, code)
        self.console.command(["kubectl", *argv, "<GET /server_info, print sps_table>"], out)

    def move(self, number: int, gpu: str) -> None:
        self.console.step(number, f"Move the Deployment to the {gpu} pool")
        patch = {"spec": {"template": {"spec": {"nodeSelector": {"nvidia.com/gpu.product": gpu}}}}}
        self.kubectl(
            "patch",
            "deployment",
            DEPLOYMENT,
            "-n",
            NAMESPACE,
            "--type=merge",
            "-p",
            json.dumps(patch),
            show=True,
        )
        self.console.say(
            "The pods move to the other GPU product; there is no table for it yet, "
            "so the operator profiles it (and keeps the H100 table for later)."
        )

    def compare(self, number: int) -> None:
        self.console.step(number, "Two GPU products, two tables")
        self.kubectl("get", "sps", "-n", NAMESPACE, show=True)
        tables = self.kubectl(
            "get",
            "sps",
            PROFILE,
            "-n",
            NAMESPACE,
            "-o",
            "jsonpath={range .status.tables[*]}{.gpuProduct}{'\\t'}{.configMap}{'\\n'}{end}",
        )
        self.console.say(f"status.tables:\n{tables.rstrip()}")
        self.kubectl_sps("diff", f"{PROFILE}@{GPU_H100}", f"{PROFILE}@{GPU_H200}", "-n", NAMESPACE)

    def farewell(self, number: int, plots: Sequence[Path], gpu: str) -> None:
        self.console.step(number, "Look around, then tear down")
        exe = shlex.quote(str(Path(sys.executable).parent / "sps-testbed"))
        where = f"--state-dir {shlex.quote(str(self.state_dir))}"
        self.console.say(
            "The cluster and the operator keep running. In another shell:\n\n"
            f'  eval "$({exe} demo env {where})"\n'
            f"  kubectl get sps -n {NAMESPACE}\n"
            f"  kubectl sps get -n {NAMESPACE}\n"
            f"  kubectl sps table {PROFILE} -n {NAMESPACE} --gpu {gpu}\n"
            f"  kubectl sps explain {PROFILE} -n {NAMESPACE}\n"
            f"  kubectl get configmaps,jobs -n {NAMESPACE} -l sps.dev/profile={PROFILE}\n"
            f"  kubectl sps reprofile {PROFILE} -n {NAMESPACE}   # and watch it again\n"
            f"  kubectl logs -n {SYSTEM_NAMESPACE} -l app.kubernetes.io/name=sps-operator\n\n"
            "Plots: " + ", ".join(str(p) for p in plots) + "\n\n"
            "Tear down (the nodes, their containers and the control plane):\n\n"
            f"  {exe} demo down {where}\n"
        )

    def run_all(self, move: bool) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.start_cluster()
        self.install_chart()
        self.deploy()
        self.follow(GPU_H100, 4, "Profiling on the H100 pool")
        plots = [self.show_table(GPU_H100, 5)]
        self.show_rollout(6)
        number, gpu = 7, GPU_H100
        if move:
            self.move(7, GPU_H200)
            self.follow(GPU_H200, 8, "The reprofile on the H200 pool")
            plots.append(self.show_table(GPU_H200, 9))
            self.show_rollout(10)
            self.compare(11)
            number, gpu = 12, GPU_H200
        self.farewell(number, plots, gpu)


def bed_dir(state_dir: Path) -> Path:
    return state_dir / hostcheck.DEMO_BED_DIR


def stop_previous(bed_state: Path) -> bool:
    """Stop a demo bed left in `bed_state`; True if one was running."""
    try:
        bed = RealNodeCluster.attach(bed_state)
    except TestbedError:
        return False
    running = bed.running()
    bed.stop()
    return running


@contextlib.contextmanager
def _interrupts_as_errors() -> Iterator[None]:
    try:
        yield
    except KeyboardInterrupt:
        raise DemoError("interrupted") from None


def default_state_dir() -> Path:
    env = os.environ.get("SPS_DEMO_DIR")
    return Path(env) if env else Path.cwd() / ".demo"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sps-testbed demo",
        description="The embedded-default demo on real nodes: the test bed, the chart with "
        "helm, a profile, a GPU move.",
    )
    parser.add_argument("action", nargs="?", choices=["run", "down", "env"], default="run")
    parser.add_argument(
        "--state-dir", type=Path, default=None, help="demo state (default $SPS_DEMO_DIR or ./.demo)"
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=100.0,
        help=f"{TIME_SCALE_ENV}: simulated GPU seconds per wall second (default 100)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds to wait for each profile (default 600)",
    )
    parser.add_argument(
        "--no-move", action="store_true", help="skip moving the Deployment to the H200 pool"
    )
    parser.add_argument(
        "--down-at-end", action="store_true", help="tear everything down when done (CI)"
    )
    return parser


def print_env(state_dir: Path) -> int:
    """Shell exports to look around: KUBECONFIG, the bed's registry (SPS_TESTBED_REGISTRY,
    SPS_TESTBED_CA, as `sps-testbed env` prints them, for `make publish`), and on PATH the
    pinned kubectl and helm (found, never built) and kubectl-sps next to this interpreter."""
    bed = RealNodeCluster.attach(bed_dir(state_dir))
    if not bed.running():
        print(f"no demo running in {state_dir}", file=sys.stderr)
        return 1
    dirs = [str(Path(sys.executable).parent)]
    dirs += [str(d) for d in find_binaries(build=False).path_dirs()]
    print(f"export KUBECONFIG={shlex.quote(str(bed.kubeconfig))}")
    for name, value in bed.registry_env().items():
        print(f"export {name}={shlex.quote(value)}")
    print(f'export PATH={shlex.quote(os.pathsep.join(dirs))}:"$PATH"')
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    state_dir: Path = (args.state_dir or default_state_dir()).resolve()
    if args.action == "down":
        was_running = stop_previous(bed_dir(state_dir))
        print("demo stopped" if was_running else f"no demo running in {state_dir}")
        return 0
    if args.action == "env":
        try:
            return print_env(state_dir)
        except TestbedError as err:
            print(f"sps-testbed demo: {err}", file=sys.stderr)
            return 1
    if args.time_scale <= 0:
        print("sps-testbed demo: --time-scale must be > 0", file=sys.stderr)
        return 2
    demo = Demo(state_dir, args.time_scale, args.timeout, Console(bold=sys.stdout.isatty()))
    try:
        with _interrupts_as_errors():
            demo.run_all(move=not args.no_move)
    except (DemoError, KubectlError) as err:
        print(f"\nsps-testbed demo: {err}", file=sys.stderr)
        print(
            f"The cluster is left running for inspection; stop it with "
            f"`sps-testbed demo down --state-dir {state_dir}`.",
            file=sys.stderr,
        )
        if args.down_at_end:
            stop_previous(bed_dir(state_dir))
        return 1
    if args.down_at_end:
        stop_previous(bed_dir(state_dir))
        print("demo stopped (--down-at-end)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
