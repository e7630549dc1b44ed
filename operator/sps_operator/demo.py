"""`sps-operator demo`: the embedded default, end to end, on the local control plane.

    sps-operator demo            # run it (README: `make demo`)
    sps-operator demo down       # stop the operator and the cluster it left running
    sps-operator demo env        # shell exports to look around (KUBECONFIG, kubectl, helm)

What it does, as a user would:
1. starts the local control plane with simulated GPU nodes (two H100, two H200; the
   node agent runs `sps-sim` for SGLang images, at a high simulated time scale);
2. renders the Helm chart with helm and applies it server-side (CRD, RBAC, service
   accounts, the operator Deployment scaled to zero), then runs the operator as a local
   process with a token of the chart's ServiceAccount: exactly the chart's RBAC;
3. applies `examples/sglang-deployment.yaml` and `examples/diagonal.yaml`;
4. follows the profile (`kubectl get sps -w`-like), shows the table, a PNG plot of the
   fit and the rolled Deployment;
5. moves the Deployment to the H200 pool and follows the reprofile;
6. says how to look around and how to tear down.

Everything is local: it works with the network closed once the control-plane binaries
are built (`make demo` builds them first).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sps_operator.constants import GPU_H100, GPU_H200

NAMESPACE = "sps-demo"
SYSTEM_NAMESPACE = "sps-system"
RELEASE = "sps-operator"
PROFILE = "llama"
DEPLOYMENT = "llama"
OPERATOR_COMPONENT = "operator"  # its pid is kept with the cluster's, so `down` stops it
FIELD_MANAGER = "sps-demo"  # what applied the chart's objects (helm would be "helm")
KUBE_VERSION = "v1.36.3"


class DemoError(RuntimeError):
    """A step failed; the message says which and where to look."""


# --------------------------------------------------------------------------- pure parts


def repo_root() -> Path:
    """The source checkout this module runs from (the chart and examples live there)."""
    return Path(__file__).resolve().parents[2]


def helm_template_args(chart: Path, namespace: str, watched: str) -> list[str]:
    """`helm template` for the demo: namespaces mode, the chart's Deployment at zero
    replicas (the operator runs as a local process with the same ServiceAccount)."""
    return [
        "template",
        RELEASE,
        str(chart),
        "--namespace",
        namespace,
        "--kube-version",
        KUBE_VERSION,
        "--include-crds",
        "--set",
        "watch.mode=namespaces",
        "--set",
        f"watch.namespaces={{{watched}}}",
        "--set",
        "replicaCount=0",
    ]


def split_rendered(text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(CRDs, everything else) from `helm template` output."""
    docs = [d for d in yaml.safe_load_all(text) if d]
    crds = [d for d in docs if d.get("kind") == "CustomResourceDefinition"]
    rest = [d for d in docs if d.get("kind") != "CustomResourceDefinition"]
    return crds, rest


def chart_operator(objects: Sequence[dict[str, Any]]) -> tuple[str, str, list[str]]:
    """(service account, its namespace, `sps-operator` arguments) of the chart's Deployment."""
    (deployment,) = [o for o in objects if o.get("kind") == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "operator"]
    return (
        str(pod["serviceAccountName"]),
        str(deployment["metadata"]["namespace"]),
        [str(a) for a in container["args"]],
    )


def local_operator_args(
    chart_args: Sequence[str], health_port: int, metrics_port: int
) -> list[str]:
    """The chart's arguments, with ports free on this machine and demo-friendly timings."""
    keep = [a for a in chart_args if not a.startswith(("--liveness", "--metrics-port", "--log-"))]
    return [
        *keep,
        f"--liveness=http://127.0.0.1:{health_port}/healthz",
        f"--metrics-port={metrics_port}",
        "--log-format=plain",
        "--verbose",
        "--gpu-debounce-seconds=5",
    ]


def token_kubeconfig(admin_kubeconfig: dict[str, Any], token: str, user: str) -> dict[str, Any]:
    """A kubeconfig for the admin's cluster that authenticates with a bearer token."""
    cluster = admin_kubeconfig["clusters"][0]
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {
                "name": user,
                "context": {"cluster": cluster["name"], "user": user, "namespace": NAMESPACE},
            }
        ],
        "current-context": user,
    }


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
        self.cluster_dir = self.state_dir / "cluster"
        self.out_dir = self.state_dir / "out"
        self.time_scale = time_scale
        self.timeout = timeout
        self.console = console
        self.root = repo_root()
        self._cp: Any = None
        self._binaries: Any = None

    # -- helpers ---------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.cluster_dir / "kubeconfig"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        dirs = [str(Path(sys.executable).parent)]
        dirs += [str(d) for d in self._binaries.path_dirs()] if self._binaries else []
        env["PATH"] = os.pathsep.join([*dirs, env.get("PATH", "")])
        env.pop("KUBERNETES_SERVICE_HOST", None)
        return env

    def run(
        self, argv: Sequence[str], input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            list(argv), input=input, capture_output=True, text=True, env=self.env(), timeout=300
        )
        if check and proc.returncode != 0:
            raise DemoError(f"{shlex.join(argv)} failed: {proc.stderr.strip() or proc.stdout}")
        return proc

    def kubectl(self, *args: str, input: str | None = None, show: bool = False) -> str:
        out = self.run([str(self._binaries.kubectl), *args], input=input).stdout
        if show:
            self.console.command(["kubectl", *args], out)
        return out

    def kubectl_sps(self, *args: str) -> str:
        # Through kubectl's plugin mechanism: `kubectl-sps` is on PATH.
        out = self.run([str(self._binaries.kubectl), "sps", *args]).stdout
        self.console.command(["kubectl", "sps", *args], out)
        return out

    def wait_established(self, crd: str, timeout: float = 60.0) -> None:
        # Polling: `kubectl wait` errors out while .status.conditions is still unset.
        deadline = time.monotonic() + timeout
        while True:
            obj = json.loads(self.kubectl("get", "crd", crd, "-o", "json"))
            conds = (obj.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conds):
                return
            if time.monotonic() > deadline:
                raise DemoError(f"CRD {crd} is not Established after {timeout:.0f} s")
            time.sleep(0.2)

    def rows(self) -> list[dict[str, str]]:
        from datetime import UTC, datetime

        from sps_operator.plugin.view import get_row

        data = json.loads(self.kubectl("get", "spsprofiles", "-n", NAMESPACE, "-o", "json"))
        now = datetime.now(UTC)
        return [get_row(p, now) for p in data.get("items") or []]

    # -- steps -----------------------------------------------------------------
    def start_cluster(self) -> None:
        from sps_operator.devcluster.binaries import find_binaries
        from sps_operator.devcluster.controlplane import (
            DEFAULT_NODES,
            ControlPlane,
            ControlPlaneError,
            start_node_agent,
        )

        self.console.step(1, "Local control plane with simulated GPU nodes")
        self._binaries = find_binaries(build=True)
        if self._binaries.helm is None:
            raise DemoError(
                "helm is missing; run `make controlplane` (tests/controlplane/build.sh)"
            )
        stop_previous(self.cluster_dir)
        cp = ControlPlane(self.cluster_dir, binaries=self._binaries, detached=True)
        started = time.monotonic()
        try:
            cp.start()
            start_node_agent(
                cp, DEFAULT_NODES, extra_args=[f"--sim-time-scale={self.time_scale:g}"]
            )
        except (ControlPlaneError, OSError, ValueError) as err:
            cp.stop()
            raise DemoError(f"the local control plane did not start: {err}") from err
        self._cp = cp
        self.console.say(
            f"kube-apiserver {KUBE_VERSION} at {cp.server}, ready in "
            f"{time.monotonic() - started:.0f} s; the node agent runs pods as local processes "
            f"(SGLang images as sps-sim at {self.time_scale:g}x simulated speed)."
        )
        self.kubectl(
            "get", "nodes", "-L", "nvidia.com/gpu.product", "-L", "nvidia.com/gpu.count", show=True
        )

    def install_chart(self) -> tuple[str, str, list[str]]:
        self.console.step(2, "Install the Helm chart (rendered with helm, applied server-side)")
        chart = self.root / "charts" / "sps-operator"
        if not chart.is_dir():
            raise DemoError(f"the chart is not at {chart}: run the demo from a source checkout")
        args = helm_template_args(chart, SYSTEM_NAMESPACE, NAMESPACE)
        rendered = self.run([str(self._binaries.helm), *args]).stdout
        self.console.say(f"$ helm {shlex.join(args)} | kubectl apply --server-side -f -")
        crds, rest = split_rendered(rendered)
        for ns in (SYSTEM_NAMESPACE, NAMESPACE):
            self.kubectl("create", "namespace", ns)
        self.kubectl(
            "apply",
            "--server-side",
            f"--field-manager={FIELD_MANAGER}",
            "-f",
            "-",
            input=yaml.safe_dump_all(crds),
        )
        self.wait_established("spsprofiles.sps.dev")
        applied = self.kubectl(
            "apply",
            "--server-side",
            f"--field-manager={FIELD_MANAGER}",
            "-f",
            "-",
            input=yaml.safe_dump_all(rest),
        )
        self.console.say(applied.rstrip())
        return chart_operator(rest)

    def start_operator(
        self, service_account: str, sa_namespace: str, chart_args: list[str]
    ) -> None:
        from sps_operator.devcluster.controlplane import free_port
        from sps_operator.devcluster.processes import spawn

        self.console.step(3, "Run the operator under the chart's RBAC")
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 24 * 3600},
        }
        raw = self.kubectl(
            "create",
            "--raw",
            f"/api/v1/namespaces/{sa_namespace}/serviceaccounts/{service_account}/token",
            "-f",
            "-",
            input=json.dumps(request),
        )
        token = json.loads(raw)["status"]["token"]
        admin = yaml.safe_load(self.kubeconfig.read_text())
        sa_config = self.state_dir / "operator.kubeconfig"
        user = f"system:serviceaccount:{sa_namespace}:{service_account}"
        sa_config.write_text(yaml.safe_dump(token_kubeconfig(admin, token, user), sort_keys=False))
        sa_config.chmod(0o600)
        health, metrics = free_port(), free_port()
        argv = [
            sys.executable,
            "-m",
            "sps_operator.cli",
            *local_operator_args(chart_args, health, metrics),
        ]
        env = self.env()
        env["KUBECONFIG"] = str(sa_config)
        log = self.state_dir / "operator.log"
        proc = spawn(argv, log, env=env, parent_death_signal=None)
        cp = self._cp
        cp.record.pids[OPERATOR_COMPONENT] = proc.pid
        cp.record.save(cp.record_file)
        self.console.say(
            f"The chart's Deployment is at 0 replicas here; the same arguments run as a local "
            f"process authenticated as {user}\n(a ServiceAccount token, so exactly the chart's "
            f"Role/ClusterRole). Log: {log}"
        )
        self.console.say(f"$ KUBECONFIG={sa_config} sps-operator {shlex.join(argv[3:])}")
        url = f"http://127.0.0.1:{health}/healthz"
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise DemoError(f"the operator exited with {proc.returncode}:\n{tail(log, 30)}")
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    break
            if time.monotonic() > deadline:
                raise DemoError(
                    f"the operator's liveness endpoint {url} never answered:\n{tail(log, 30)}"
                )
            time.sleep(0.5)
        self.console.say(f"liveness {url}: ok   metrics: http://127.0.0.1:{metrics}/metrics")

    def deploy(self) -> None:
        self.console.step(4, "An SGLang Deployment and a profile (examples/)")
        examples = self.root / "examples"
        files = [examples / "sglang-deployment.yaml", examples / "diagonal.yaml"]
        argv = [str(self._binaries.kubectl), "apply", "-n", NAMESPACE]
        shown = ["kubectl", "apply", "-n", NAMESPACE]
        for f in files:
            argv += ["-f", str(f)]
            shown += ["-f", str(f.relative_to(self.root))]
        self.console.command(shown, self.run(argv).stdout)
        self.console.say(
            f"Other examples (Additive, External, GitOps) are in {examples}; "
            "they select their own Deployments."
        )

    def follow(self, gpu: str, number: int, title: str) -> None:
        from sps_operator.plugin.cli import watch_rows
        from sps_operator.plugin.view import render_get, watch_layout

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
                f"no table for {gpu} after {self.timeout:.0f} s; operator log: "
                f"{self.state_dir / 'operator.log'}"
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
        (server,) = [c for c in template["spec"]["containers"] if c["name"] == "sglang"]
        flag = table_flag(server.get("args") or [])
        mounts = [m for m in server.get("volumeMounts") or [] if "sps" in m["name"]]
        volumes = [v for v in template["spec"].get("volumes") or [] if "sps" in v["name"]]
        managers = sorted({m["manager"] for m in dep["metadata"].get("managedFields") or []})
        self.console.say(
            "$ kubectl get deployment llama -n sps-demo -o yaml   (the parts the operator added)"
        )
        self.console.say(
            yaml.safe_dump(
                {
                    "pod-template annotations": annotations,
                    "server args": flag,
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
        exe = shlex.quote(str(Path(sys.executable).parent / "sps-operator"))
        where = f"--state-dir {shlex.quote(str(self.state_dir))}"
        env_cmd = f'eval "$({exe} demo env {where})"'
        self.console.say(
            "The cluster and the operator keep running. In another shell:\n\n"
            f"  {env_cmd}\n"
            f"  kubectl get sps -n {NAMESPACE}\n"
            f"  kubectl sps get -n {NAMESPACE}\n"
            f"  kubectl sps table {PROFILE} -n {NAMESPACE} --gpu {gpu}\n"
            f"  kubectl sps explain {PROFILE} -n {NAMESPACE}\n"
            f"  kubectl get configmaps,jobs -n {NAMESPACE} -l sps.dev/profile={PROFILE}\n"
            f"  kubectl sps reprofile {PROFILE} -n {NAMESPACE}   # and watch it again\n"
            f"  less {self.state_dir / 'operator.log'}\n\n"
            "Plots: " + ", ".join(str(p) for p in plots) + "\n\n"
            "Tear down (stops the operator, the node agent's pods and the control plane):\n\n"
            f"  {exe} demo down {where}\n"
        )

    def run_all(self, move: bool) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.start_cluster()
        sa, sa_ns, chart_args = self.install_chart()
        self.start_operator(sa, sa_ns, chart_args)
        self.deploy()
        self.follow(GPU_H100, 5, "Profiling on the H100 pool")
        plots = [self.show_table(GPU_H100, 6)]
        self.show_rollout(7)
        number, gpu = 8, GPU_H100
        if move:
            self.move(8, GPU_H200)
            self.follow(GPU_H200, 9, "The reprofile on the H200 pool")
            plots.append(self.show_table(GPU_H200, 10))
            self.show_rollout(11)
            self.compare(12)
            number, gpu = 13, GPU_H200
        self.farewell(number, plots, gpu)


def tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


def stop_previous(cluster_dir: Path) -> bool:
    """Stop a demo cluster (and its operator) left in `cluster_dir`; True if there was one."""
    from sps_operator.devcluster.controlplane import ControlPlane, ControlPlaneError
    from sps_operator.devcluster.processes import terminate_group

    try:
        cp = ControlPlane.attach(cluster_dir)
    except ControlPlaneError:
        return False
    assert cp.record is not None
    running = any(cp.running_components().values())
    # The operator first, while the API server still answers its last calls.
    pid = cp.record.pids.get(OPERATOR_COMPONENT)
    if pid:
        terminate_group(pid, expect="sps_operator", grace=10.0)
    cp.stop()
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
        prog="sps-operator demo",
        description="The embedded-default demo: local control plane, simulated GPU nodes, the "
        "chart, the operator, a profile, a GPU move.",
    )
    parser.add_argument("action", nargs="?", choices=["run", "down", "env"], default="run")
    parser.add_argument(
        "--state-dir", type=Path, default=None, help="demo state (default $SPS_DEMO_DIR or ./.demo)"
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=100.0,
        help="sps-sim's simulated seconds per real second (default 100)",
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    state_dir: Path = (args.state_dir or default_state_dir()).resolve()
    cluster_dir = state_dir / "cluster"
    if args.action == "down":
        was_running = stop_previous(cluster_dir)
        print("demo stopped" if was_running else f"no demo running in {state_dir}")
        return 0
    if args.action == "env":
        from sps_operator.devcluster.cli import main as dev_cluster

        code = dev_cluster(["env", "--state-dir", str(cluster_dir)])
        if code == 0:  # kubectl-sps and sps-operator live next to this interpreter
            print(f'export PATH={shlex.quote(str(Path(sys.executable).parent))}:"$PATH"')
        return code
    if args.time_scale <= 0:
        print("sps-operator demo: --time-scale must be > 0", file=sys.stderr)
        return 2
    demo = Demo(state_dir, args.time_scale, args.timeout, Console(bold=sys.stdout.isatty()))
    try:
        with _interrupts_as_errors():
            demo.run_all(move=not args.no_move)
    except DemoError as err:
        print(f"\nsps-operator demo: {err}", file=sys.stderr)
        print(
            f"The cluster is left running for inspection; stop it with "
            f"`sps-operator demo down --state-dir {state_dir}`.",
            file=sys.stderr,
        )
        if args.down_at_end:
            stop_previous(cluster_dir)
        return 1
    if args.down_at_end:
        stop_previous(cluster_dir)
        print("demo stopped (--down-at-end)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
