"""`sps-operator fingerprint`: what the operator reads from a Deployment, offline.

    sps-operator fingerprint -f deployment.yaml [-f more.yaml] [--container NAME]
                             [--name DEPLOYMENT] [--sglang-version V] [--against OLD.yaml]
                             [-o text|json]
    sps-operator fingerprint --write-doc docs/fingerprint.md   (regenerate its input table)

Answers "why did my server reprofile?" and "will this change reprofile?" with the same
reading and the same words as the operator (`kubectl sps explain`): the fingerprint, every
input it read and where from, the inputs it read but does not count (and why), and the
cost-looking inputs it does not fingerprint. ConfigMaps in the given files resolve the
container's `valueFrom`/`envFrom`; an SpsProfile in them adds its table key (what
status.targets[].fingerprint shows), its spec.server.sglangVersion, and whether the
operator would refuse the server for its table kind. `--against` compares with another
version of the files: what changed, and whether a profile would measure again.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sps_operator.api.fingerprint import DOC_BEGIN, DOC_END, fingerprint_doc
from sps_operator.api.spec import SpsProfileSpec, TableKind
from sps_operator.controller.policies import compat, workloads
from sps_operator.controller.sglang.podenv import ConfigMapEnv, env_config_maps
from sps_operator.controller.sglang.serverchanges import server_changes
from sps_operator.controller.sglang.serverconfig import (
    ServerConfig,
    ServerProblem,
    find_server_container,
)
from sps_operator.controller.sglang.serverread import read_server, table_keys


class InputError(Exception):
    """The files do not hold what the command needs; the message says what."""


@dataclass(frozen=True)
class Reading:
    """One workload's server, as the operator reads it."""

    workload: str
    config: ServerConfig
    profile: SpsProfileSpec | None

    def report(self) -> dict[str, Any]:
        config = self.config
        out: dict[str, Any] = {
            "workload": self.workload,
            "fingerprint": config.fingerprint(),
            "sglangVersion": config.version.describe(),
            "inputs": [r.to_dict() for r in config.read if r.counted],
            "readNotCounted": [r.to_dict() for r in config.read if not r.counted],
            "notFingerprinted": list(config.unfingerprinted),
            "tableSource": compat.table_source(config),
        }
        kinds = [str(k) for k in TableKind]
        if self.profile is not None:
            out["tableFingerprint"], out["tableFingerprintV1"] = table_keys(
                config, self.profile.table
            )
            kinds = [str(self.profile.table.kind)]
        # What the operator would refuse, per table kind (None: it profiles the server).
        out["refused"] = {}
        for kind in kinds:
            refused = compat.refusal(kind, config, ())
            out["refused"][kind] = (
                {"reason": refused[0], "message": refused[1]} if refused else None
            )
        return out


def _documents(paths: Sequence[str]) -> list[Mapping[str, Any]]:
    docs: list[Mapping[str, Any]] = []
    for path in paths:
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
            loaded = list(yaml.safe_load_all(text))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise InputError(f"cannot read {path}: {exc}") from None
        for doc in loaded:
            if isinstance(doc, Mapping) and doc.get("kind") == "List":
                docs += [d for d in doc.get("items") or [] if isinstance(d, Mapping)]
            elif isinstance(doc, Mapping):
                docs.append(doc)
    return docs


def _pod_spec(doc: Mapping[str, Any]) -> Mapping[str, Any] | None:
    spec = doc.get("spec")
    if not isinstance(spec, Mapping):
        return None
    if doc.get("kind") == "Pod":
        return spec
    # spec.template for most kinds; a LeaderWorkerSet's leader (the server the operator
    # profiles and fingerprints).
    inner = workloads.server_template(doc).get("spec")
    return inner if isinstance(inner, Mapping) else None


def read(
    paths: Sequence[str],
    container_name: str | None = None,
    workload_name: str | None = None,
    sglang_version: str | None = None,
) -> Reading:
    """The server of the one workload in `paths` (or the one named), as the operator
    reads it; InputError or ServerProblem saying what is wrong."""
    docs = _documents(paths)
    workloads = [
        d for d in docs if _pod_spec(d) is not None and d.get("kind") not in ("SpsProfile",)
    ]
    names = [str((d.get("metadata") or {}).get("name")) for d in workloads]
    if workload_name is not None:
        workloads = [w for w, n in zip(workloads, names, strict=True) if n == workload_name]
    if len(workloads) != 1:
        listing = ", ".join(names) or "none"
        raise InputError(
            f"expected one Deployment (or other pod template) in the files, found {listing}; "
            "pick one with --name"
        )
    workload = workloads[0]
    pod_spec = _pod_spec(workload) or {}
    profiles = [d for d in docs if d.get("kind") == "SpsProfile"]
    profile = None
    if profiles:
        try:
            profile = SpsProfileSpec.model_validate(profiles[0].get("spec") or {})
        except ValueError as exc:
            raise InputError(f"the SpsProfile in the files is invalid: {exc}") from None
    name = container_name or (profile.server_container if profile else None)
    container = find_server_container(pod_spec, name)
    if container is None:
        raise InputError(f"no container named {name!r} in {names[0]}")
    maps = {
        str((d.get("metadata") or {}).get("name")): ConfigMapEnv.of(d)
        for d in docs
        if d.get("kind") == "ConfigMap"
    }
    wanted = env_config_maps(pod_spec)
    namespace = (workload.get("metadata") or {}).get("namespace")
    stated = sglang_version or (profile.server.sglang_version if profile else None)
    _, config = read_server(container, namespace, {n: maps[n] for n in wanted if n in maps}, stated)
    kind = workload.get("kind") or "workload"
    return Reading(f"{kind}/{(workload.get('metadata') or {}).get('name')}", config, profile)


def render(report: Mapping[str, Any]) -> str:
    lines = [
        f"{report['workload']}",
        f"  fingerprint:     {report['fingerprint']}",
    ]
    if "tableFingerprint" in report:
        lines.append(
            f"  table key:       {report['tableFingerprint']} (status.targets[].fingerprint)"
        )
    lines.append(f"  SGLang version:  {report['sglangVersion']}")
    if report.get("tableSource"):
        lines.append(f"  without a table: {report['tableSource']}")
    lines.append("\nFingerprinted inputs:")
    lines += [f"  {r['input']} = {r['value']}   ({r['where']})" for r in report["inputs"]]
    if report["readNotCounted"]:
        lines.append("\nRead, not counted:")
        lines += [
            f"  {r['input']} = {r['value']}   ({r['where']}): {r['notCounted']}"
            for r in report["readNotCounted"]
        ]
    if report["notFingerprinted"]:
        lines.append("\nNot fingerprinted (a change here reprofiles nothing):")
        lines += [f"  {line}" for line in report["notFingerprinted"]]
    for kind, refused in (report.get("refused") or {}).items():
        if refused:
            lines.append(f"\n{kind}: refused ({refused['reason']}): {refused['message']}")
    if "changes" in report:
        verdict = "a profile measures it again" if report["reprofiles"] else "no new run"
        lines.append(f"\nAgainst {report['against']}: {verdict}")
        lines += [f"  {c}" for c in report["changes"]] or ["  (no input changed)"]
    return "\n".join(lines)


def with_doc(text: str) -> str:
    """`text` (docs/fingerprint.md) with its generated section replaced by the list's."""
    begin, end = text.index(DOC_BEGIN), text.index(DOC_END) + len(DOC_END)
    return text[:begin] + fingerprint_doc() + text[end:]


def _write_doc(path: Path) -> int:
    try:
        path.write_text(with_doc(path.read_text(encoding="utf-8")), encoding="utf-8")
    except (OSError, ValueError) as exc:
        print(f"sps-operator fingerprint: cannot update {path}: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="sps-operator fingerprint",
        description="What the operator reads from a Deployment: its fingerprint, each input "
        "and where from, and the cost-looking inputs it does not fingerprint.",
    )
    parser.add_argument("-f", "--filename", action="append",
                        help="YAML with the Deployment (and its ConfigMaps, an SpsProfile); "
                        "repeatable; - for stdin")  # fmt: skip
    parser.add_argument("--container", help="the SGLang container (default: the profile's "
                        "serverContainer, else the first)")  # fmt: skip
    parser.add_argument("--name", help="the Deployment, when the files hold several")
    parser.add_argument("--sglang-version", help="as spec.server.sglangVersion")
    parser.add_argument("--against", action="append", metavar="OLD.yaml",
                        help="compare with these files: what changed; a new table?")  # fmt: skip
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text")
    parser.add_argument("--write-doc", metavar="FILE", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(list(argv))
    if args.write_doc:
        return _write_doc(args.write_doc)
    if not args.filename:
        parser.error("-f FILE is required")
    try:
        reading = read(args.filename, args.container, args.name, args.sglang_version)
        report = reading.report()
        if args.against:
            old = read(args.against, args.container, args.name, args.sglang_version)
            report["against"] = ", ".join(args.against)
            report["changes"] = server_changes(old.config.describe(), reading.config)
            key = "tableFingerprint" if "tableFingerprint" in report else "fingerprint"
            report["reprofiles"] = old.report()[key] != report[key]
    except (InputError, ServerProblem) as exc:
        reason = getattr(exc, "reason", "InputError")
        if args.output == "json":
            print(json.dumps({"error": {"reason": reason, "message": str(exc)}}, indent=2))
        else:
            print(f"sps-operator fingerprint: {reason}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2) if args.output == "json" else render(report))
    return 0
