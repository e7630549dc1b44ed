"""`kubectl sps` — a kubectl plugin (the executable `kubectl-sps` on PATH).

    kubectl sps get [NAME] [-A] [-w] [-o wide|name]  profiles: GPU, table, state
    kubectl sps table NAME [--gpu P] [--plot FILE.png] [--rejected]
    kubectl sps diff OLD NEW                    predicted step-time change over the grid
    kubectl sps export NAME [--gpu P] [--name N] the table ConfigMap as YAML for Git
    kubectl sps reprofile NAME [--value V]      request a new run (annotation, not spec)
    kubectl sps explain NAME                    why the last run failed, and what next
    kubectl sps version [--client]              the plugin's and the operator's versions
    kubectl sps completion bash|zsh             shell completion script

A table reference (diff) is PROFILE, PROFILE@GPU, PROFILE@rejected,
configmap/NAME, log:POD[/CONTAINER] (the table a server with SGLang PR #35413 derived at
start-up, from its log line), or a path to a table JSON file.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from sps_operator import __version__
from sps_operator.api import labels as L
from sps_operator.api.result import decode_rounds
from sps_operator.constants import API_GROUP
from sps_operator.plugin import completion, view
from sps_operator.plugin import diff as diffmod
from sps_operator.plugin import explain as explainmod
from sps_operator.plugin.kubeflags import ConnectionFlags, parse_request_timeout
from sps_operator.plugin.view import PluginError
from sps_operator.tables.formats import (
    SpsCostTable,
    SpsTable,
    SpsTableError,
    capture_derived_from_log,
    load_sps_table_text,
)

# The capture-derived line comes at start-up; a server's log can be long.
MAX_LOG_BYTES = 16 * 1024 * 1024

if TYPE_CHECKING:  # keeps `kubectl sps --help` free of the kubernetes import
    from sps_operator.plugin.client import Cluster


OUTPUTS = ("human", "json", "yaml")
# `kubectl sps get` also takes kubectl's -o wide and -o name; -o jsonpath is kubectl get's.
GET_OUTPUTS = (*OUTPUTS, "wide", "name")


def _common(outputs: tuple[str, ...] = OUTPUTS) -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    common.add_argument(
        "-o", "--output", default="human", type=_output(outputs), help="|".join(outputs)
    )
    common.add_argument("--kubeconfig", help="path to the kubeconfig (default: $KUBECONFIG)")
    common.add_argument("--context", help="kubeconfig context (default: the current one)")
    # kubectl's own connection flags, with kubectl's names and meanings.
    common.add_argument("-s", "--server", help="the API server's address (kubectl --server)")
    common.add_argument("--token", help="bearer token for the API server")
    common.add_argument("--as", dest="impersonate", metavar="USER", help="impersonate a user")
    common.add_argument("--certificate-authority", help="CA certificate file of the API server")
    common.add_argument(
        "--insecure-skip-tls-verify", action="store_true", help="do not verify the server's cert"
    )
    common.add_argument(
        "--request-timeout",
        default=None,
        type=_request_timeout,
        help="how long to wait for one request: 0 (none, the default), 30s, 1m... (as kubectl)",
    )
    return common


def _request_timeout(value: str) -> float | None:
    try:
        return parse_request_timeout(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def connection_flags(args: argparse.Namespace) -> ConnectionFlags:
    return ConnectionFlags(
        kubeconfig=args.kubeconfig,
        context=args.context,
        server=args.server,
        token=args.token,
        impersonate=args.impersonate,
        certificate_authority=args.certificate_authority,
        insecure_skip_tls_verify=args.insecure_skip_tls_verify,
        request_timeout=args.request_timeout,
    )


def _output(allowed: tuple[str, ...]) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value in allowed:
            return value
        if value.startswith(("jsonpath", "custom-columns", "go-template")):
            raise argparse.ArgumentTypeError(
                f"{value!r}: kubectl's own reads the API objects: "
                f"kubectl get spsprofiles -o {value.split('=', 1)[0]}=..."
            )
        raise argparse.ArgumentTypeError(f"{value!r}: one of {', '.join(allowed)}")

    return parse


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="kubectl sps",
        description="Show, plot, diff and export SGLang DSpark SPS tables kept by sps-operator.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    parser.add_argument("--version", action="version", version=f"kubectl-sps {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    get = sub.add_parser("get", parents=[_common(GET_OUTPUTS)], help="list profiles")
    get.add_argument("name", nargs="?")
    get.add_argument("-A", "--all-namespaces", action="store_true")
    get.add_argument("-w", "--watch", action="store_true", help="print changes until ^C")
    get.add_argument("--interval", type=float, default=2.0, help=argparse.SUPPRESS)
    get.add_argument("--watch-timeout", type=float, default=0.0, help=argparse.SUPPRESS)

    table = sub.add_parser("table", parents=[common], help="show a profile's table")
    table.add_argument("name")
    table.add_argument("--gpu", help="GPU product (default: the live table)")
    table.add_argument("--rejected", action="store_true", help="the last table that failed a gate")
    table.add_argument("--plot", metavar="FILE.png", type=Path, help="also write a PNG plot")

    diff = sub.add_parser("diff", parents=[common], help="compare two tables")
    refs = "PROFILE[@GPU|@rejected], configmap/NAME, log:POD or FILE.json"
    diff.add_argument("old", help=refs)
    diff.add_argument("new", help=refs)

    export = sub.add_parser("export", parents=[common], help="table ConfigMap as YAML for Git")
    export.add_argument("name")
    export.add_argument("--gpu")
    export.add_argument("--name", dest="new_name", help="name of the exported ConfigMap")

    reprofile = sub.add_parser("reprofile", parents=[common], help="request a new profiling run")
    reprofile.add_argument("name")
    reprofile.add_argument("--value", help="the annotation's value (default: the current UTC time)")

    explain = sub.add_parser("explain", parents=[common], help="why the last run failed")
    explain.add_argument("name")

    version = sub.add_parser("version", parents=[common], help="plugin and operator versions")
    version.add_argument("--client", action="store_true", help="the plugin's version only")
    version.add_argument(
        "--operator-namespace",
        help="where the operator runs (default: look in every namespace)",
    )

    completion_cmd = sub.add_parser("completion", help="shell completion script (bash, zsh)")
    completion_cmd.add_argument("shell", choices=["bash", "zsh"])
    return parser


def emit(args: argparse.Namespace, data: Any, human: str) -> None:
    if args.output == "json":
        print(view.to_json(data))
    elif args.output == "yaml":
        print(yaml.safe_dump(data, sort_keys=False).rstrip())
    else:
        print(human)


# --------------------------------------------------------------------------- commands


def _namespace(args: argparse.Namespace, cluster: Cluster) -> str:
    return str(args.namespace or cluster.default_namespace)


def cmd_get(args: argparse.Namespace, cluster: Cluster) -> int:
    namespace = None if args.all_namespaces else _namespace(args, cluster)

    def profiles() -> list[dict[str, Any]]:
        if args.name:
            if namespace is None:
                raise PluginError("a NAME needs a namespace (-n), not -A")
            return [cluster.get_profile(namespace, args.name)]
        return cluster.list_profiles(namespace)

    def snapshot() -> list[dict[str, str]]:
        now = datetime.now(UTC)
        return [view.get_row(p, now) for p in profiles()]

    if args.output == "name":
        print("\n".join(f"spsprofile.{API_GROUP}/{p['metadata']['name']}" for p in profiles()))
        return 0
    rows = snapshot()
    wide = args.output == "wide"
    if args.output not in ("human", "wide") or not args.watch:
        emit(args, rows, view.render_get(rows, args.all_namespaces, wide=wide))
        return 0
    print(view.render_get(rows, args.all_namespaces, view.watch_layout(rows), wide), flush=True)
    watch_rows(snapshot, args.all_namespaces, args.interval, args.watch_timeout, wide=wide)
    return 0


def watch_rows(
    snapshot: Callable[[], list[dict[str, str]]],
    all_namespaces: bool,
    interval: float,
    timeout: float = 0.0,
    until: Callable[[list[dict[str, str]]], bool] | None = None,
    out: Callable[[str], None] = lambda line: print(line, flush=True),
    wide: bool = False,
) -> list[dict[str, str]]:
    """`kubectl get -w` by polling: a line each time a row's state or progress changes."""
    first = snapshot()
    seen = {(r["namespace"], r["name"]): view.watch_key(r) for r in first}
    layout = view.watch_layout(first)
    deadline = time.monotonic() + timeout if timeout else None
    rows: list[dict[str, str]] = []
    try:
        while deadline is None or time.monotonic() < deadline:
            time.sleep(interval)
            rows = snapshot()
            for row in rows:
                key = (row["namespace"], row["name"])
                now = view.watch_key(row)
                if seen.get(key) != now:
                    seen[key] = now
                    layout.append(row)  # widths only grow: earlier lines stay aligned
                    out(view.render_get([row], all_namespaces, layout, wide).splitlines()[1])
            if until is not None and until(rows):
                break
    except KeyboardInterrupt:
        pass
    return rows


def load_table_ref(ref: str, cluster: Cluster | None, namespace: str) -> tuple[str, SpsTable]:
    """(label, table) for a table reference (see the module docstring)."""
    path = Path(ref)
    if ref.endswith(".json") or path.is_file():
        try:
            return str(path), load_sps_table_text(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise PluginError(f"cannot read {path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise PluginError(
                f"{path} is not UTF-8 text, so not a table SGLang would load"
            ) from None
        except SpsTableError as exc:
            raise PluginError(f"{path} is not a table SGLang would load: {exc}") from None
    if cluster is None:
        raise PluginError(f"{ref} needs a cluster")
    if ref.startswith("log:"):
        pod = ref.removeprefix("log:")
        derived = capture_derived_from_log(cluster.pod_log(namespace, pod, MAX_LOG_BYTES))
        if derived is None:
            raise PluginError(
                f"the log of pod {pod} has no 'DSpark SPS table derived from' line (a server "
                "with SGLANG_DSPARK_ENABLE_CAPTURE_DERIVED_SPS=1, SGLang PR #35413, in "
                "compact mode without a table logs it at start-up)"
            )
        return f"log:{pod} (capture-derived)", derived
    if ref.startswith(("configmap/", "cm/")):
        cm_name = ref.split("/", 1)[1]
    else:
        name, _, gpu = ref.partition("@")
        profile = cluster.get_profile(namespace, name)
        if gpu == "rejected":
            entry = (profile.get("status") or {}).get("rejectedTable")
            if not entry:
                raise PluginError(f"profile {name} has no rejected table")
        else:
            entry = view.table_for_gpu(profile, gpu or None)
        cm_name = str(entry["configMap"])
    cm = cluster.get_config_map(namespace, cm_name)
    return f"configmap/{cm_name}", _table_from_config_map(cm)


def _table_from_config_map(cm: dict[str, Any]) -> SpsTable:
    name = (cm.get("metadata") or {}).get("name")
    text = (cm.get("data") or {}).get(L.TABLE_KEY)
    if text is None:
        raise PluginError(f"ConfigMap {name} has no {L.TABLE_KEY} key")
    try:
        return load_sps_table_text(text)
    except SpsTableError as exc:
        raise PluginError(f"ConfigMap {name} holds no table SGLang would load: {exc}") from None


def cmd_table(args: argparse.Namespace, cluster: Cluster) -> int:
    namespace = _namespace(args, cluster)
    profile = cluster.get_profile(namespace, args.name)
    if args.rejected:
        entry = (profile.get("status") or {}).get("rejectedTable")
        if not entry:
            raise PluginError(f"profile {args.name} has no rejected table")
    else:
        entry = view.table_for_gpu(profile, args.gpu)
    cm = cluster.get_config_map(namespace, str(entry["configMap"]))
    table = _table_from_config_map(cm)
    data = {"profile": args.name, "namespace": namespace, **entry, "table": view.table_data(table)}
    human = view.render_table_header(args.name, entry) + "\n\n" + view.render_table_values(table)
    if args.plot:
        title = f"{args.name}: {entry.get('gpuProduct', '?')} ({view.table_kind(table)})"
        written, with_points = write_plot(cm, table, args.plot, title)
        data["plot"] = str(written)
        what = "measured cells, fit and residuals" if with_points else "the table"
        human += f"\n\nPlot ({what}) written to {written}"
    emit(args, data, human)
    return 0


def write_plot(cm: dict[str, Any], table: SpsTable, path: Path, title: str) -> tuple[Path, bool]:
    """The fit against the measured cells the table ConfigMap keeps beside the table;
    the table alone when it kept none."""
    from sps_operator import plot

    try:
        plot.require_plotting()
    except plot.PlotUnavailable as exc:
        raise PluginError(
            f"--plot needs {exc.module}, which is not installed: {plot.INSTALL_PLOT}"
        ) from None
    from sps_operator.tables.fit import cells_from_rounds

    try:
        cells = cells_from_rounds(decode_rounds(cm.get("data"), cm.get("binaryData")))
    except ValueError:
        cells = []
    path.parent.mkdir(parents=True, exist_ok=True)
    if cells and isinstance(table, SpsCostTable):
        return plot.plot_diagonal_fit(table, cells, path, title), True
    if cells:
        return plot.plot_fit(cells, table, path, title), True
    return plot.plot_table(table, path, title), False


def cmd_diff(args: argparse.Namespace, cluster: Cluster | None) -> int:
    namespace = _namespace(args, cluster) if cluster is not None else "default"
    old_label, old = load_table_ref(args.old, cluster, namespace)
    new_label, new = load_table_ref(args.new, cluster, namespace)
    result = diffmod.diff_tables(old, new)
    data = {"old": old_label, "new": new_label, **result.to_dict()}
    emit(args, data, diffmod.render_diff(result, old_label, new_label))
    return 0


def cmd_export(args: argparse.Namespace, cluster: Cluster) -> int:
    namespace = _namespace(args, cluster)
    profile = cluster.get_profile(namespace, args.name)
    entry = view.table_for_gpu(profile, args.gpu)
    cm = cluster.get_config_map(namespace, str(entry["configMap"]))
    _table_from_config_map(cm)  # refuse to export a table SGLang would not load
    manifest = view.exportable_config_map(cm, args.name, args.new_name)
    if args.output == "json":
        print(view.to_json(manifest))
    else:
        print(yaml.safe_dump(manifest, sort_keys=False).rstrip())
    return 0


def cmd_reprofile(args: argparse.Namespace, cluster: Cluster) -> int:
    namespace = _namespace(args, cluster)
    token = args.value or datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    cluster.annotate_reprofile(namespace, args.name, token)
    data = {
        "name": args.name,
        "namespace": namespace,
        "annotation": L.ANNOTATION_REPROFILE,
        "token": token,
    }
    emit(
        args,
        data,
        f"spsprofile.sps.dev/{args.name} reprofile requested ({L.ANNOTATION_REPROFILE}={token})"
        f"\nFollow it with: kubectl sps get {args.name} -n {namespace} -w",
    )
    return 0


def cmd_explain(args: argparse.Namespace, cluster: Cluster) -> int:
    namespace = _namespace(args, cluster)
    profile = cluster.get_profile(namespace, args.name)
    run = (profile.get("status") or {}).get("currentRun") or {}
    job = cluster.get_job(namespace, str(run["job"])) if run.get("job") else None
    pods = cluster.list_pods(namespace, f"job-name={run['job']}") if job is not None else []
    events = cluster.list_events(namespace, args.name)
    report = explainmod.explain(profile, job, pods, events)
    emit(args, report, explainmod.render_explain(report))
    return 0


def cmd_version(args: argparse.Namespace, cluster: Cluster | None) -> int:
    if cluster is None:
        emit(args, {"client": __version__}, f"Client Version: {__version__}")
        return 0
    namespace = args.operator_namespace
    try:
        pods = cluster.list_pods(namespace, L.OPERATOR_POD_SELECTOR)
    except PluginError:
        print(f"Client Version: {__version__}", file=sys.stderr)
        raise
    operators = [view.operator_pod_version(p) for p in pods]
    where = f"{namespace or 'every namespace'}, selector {L.OPERATOR_POD_SELECTOR}"
    emit(
        args,
        {"client": __version__, "operators": operators},
        view.render_version(__version__, operators, where),
    )
    return 0


def cmd_completion(args: argparse.Namespace, cluster: Any) -> int:
    """`source <(kubectl sps completion bash)`; kubectl's own completion uses the
    `kubectl_complete-sps` entry point instead."""
    parser = build_parser()
    script = (
        completion.bash_script(parser) if args.shell == "bash" else completion.zsh_script(parser)
    )
    print(script, end="")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace, Any], int]] = {
    "get": cmd_get,
    "table": cmd_table,
    "diff": cmd_diff,
    "export": cmd_export,
    "reprofile": cmd_reprofile,
    "explain": cmd_explain,
    "version": cmd_version,
    "completion": cmd_completion,
}


def _needs_cluster(args: argparse.Namespace) -> bool:
    if args.command == "completion":
        return False
    if args.command == "version":
        return not args.client
    if args.command != "diff":
        return True
    return not all(r.endswith(".json") or Path(r).is_file() for r in (args.old, args.new))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not args.command:
        parser.print_help()
        return 0
    try:
        cluster = None
        if _needs_cluster(args):
            from sps_operator.plugin.client import Cluster

            cluster = Cluster(connection_flags(args))
        return COMMANDS[args.command](args, cluster)
    except PluginError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def kubectl_complete(argv: list[str] | None = None) -> int:
    """`kubectl_complete-sps WORDS...`: kubectl's completion of `kubectl sps WORDS`."""
    words = sys.argv[1:] if argv is None else argv
    for candidate in completion.candidates(build_parser(), words):
        print(candidate)
    print(f":{completion.NO_FILE_COMPLETION}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
