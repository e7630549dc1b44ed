"""Step 1 of a pass: what the profile's Deployments are (pure, from the snapshot).

For each selected Deployment: which profile serves it, whether its container is an SGLang
DSpark server the operator understands (and, for AnnotateOnly, whether it mounts the
table where its server reads it), whether its SGLang build can take the profile's table
(`compat`), its fingerprint, and the GPU product it settled on. A target with a problem is
reported and never touched.

Tables stored under fingerprint version 1 (before issue 20) are re-keyed here, once, to
the current fingerprint of the server they were measured for: an operator upgrade does
not reprofile servers that did not change (docs/fingerprint.md, Upgrading).
"""

from __future__ import annotations

import posixpath
from collections.abc import Collection, Mapping
from datetime import timedelta
from typing import Any

from sps_operator.api import labels as L
from sps_operator.api.legacy_tables import is_v1
from sps_operator.api.reasons import (
    CONFLICT,
    GROUP_MISMATCH,
    MIXED_GPU_PRODUCTS,
    NO_SERVER_CONTAINER,
    ONE_TABLE_CONFIGMAP_MANY_SERVERS,
    SHELL_WRAPPED_SERVER,
    STABLE_TABLE_CONTESTED,
    TABLE_MOUNT_SHADOWED,
    TABLE_NOT_MOUNTED,
    TARGET_TOO_LARGE,
)
from sps_operator.api.spec import RolloutMode, SpsProfileSpec
from sps_operator.api.status import RunStatus, TableRef, TargetStatus
from sps_operator.api.times import parse_rfc3339
from sps_operator.api.untrusted_json import read_json_object, readable
from sps_operator.controller.kube import builders
from sps_operator.controller.passes.state import Pass, Target
from sps_operator.controller.policies import compat, stable_writers, workloads
from sps_operator.controller.policies.ownership import ProfileSummary, owner_of, stable_writer
from sps_operator.controller.policies.placement import MIXED, placement, settle, unplaced_note
from sps_operator.controller.sglang.podenv import ConfigMapEnv
from sps_operator.controller.sglang.serverchanges import server_changes
from sps_operator.controller.sglang.serverconfig import (
    TABLE_PATH_FLAG,
    ServerProblem,
    find_server_container,
)
from sps_operator.controller.sglang.serverread import read_server, table_keys, target_size_problem


def observe(p: Pass) -> None:
    annotate_only = p.spec.rollout.mode == RolloutMode.ANNOTATE_ONLY
    me = ProfileSummary(
        p.ref.name,
        p.ref.uid,
        str((p.body.get("metadata") or {}).get("creationTimestamp") or ""),
        p.spec.selector.to_k8s(),
        stable=str(p.spec.rollout.table_config_map) if annotate_only else None,
    )
    profiles = [s for s in p.snapshot.profiles if s.uid != me.uid] + [me]
    previous = {t.deployment: t for t in p.status.targets}
    p.targets = []
    kinds_by_name: dict[str, str] = {}
    for dep in p.snapshot.deployments:
        target = Target(deployment=dep, name=dep["metadata"]["name"])
        p.targets.append(target)
        first = kinds_by_name.setdefault(target.name, target.kind)
        if first != target.kind:
            # Status lists targets by name: two of one name would share one entry.
            target.refuse(
                CONFLICT,
                f"the profile also selects {first} {target.name}, of the same name; status "
                f"lists targets by name, so {target.kind} {target.name} is left alone: narrow "
                "spec.selector or spec.targetKinds so one workload of each name is selected",
            )
            continue
        target.owner = owner_of(dep, profiles)
        if target.owner != p.ref.name:
            target.refuse(
                CONFLICT,
                f"served by SpsProfile {target.owner!r} (recorded on the Deployment, or the "
                f"oldest profile selecting it); {p.ref.name!r} never writes to it: narrow "
                "spec.selector so one profile selects each Deployment",
            )
            continue
        _understand_server(
            p.spec,
            target,
            p.namespace,
            p.snapshot.env_config_maps,
            p.status.diagonal_only_servers,
        )
        if target.config is not None and target.table_source == compat.SOURCE_CONST:
            # Inject replaces `const`: remember the fork while it still shows.
            p.status.diagonal_only_servers = compat.remembered(
                p.status.diagonal_only_servers, target.config
            )
        if target.problem is not None or target.config is None:
            continue
        _place(p, target, previous.get(target.name))
    adopt_v1_tables(p.status.tables, p.targets, p.status.current_run)
    for target in p.targets:
        target.changes = _changes(p, target)
    if annotate_only:
        _one_writer(p, profiles)
        _second_writer(p)
        _one_table_for_all(p)


def adopt_v1_tables(
    tables: list[TableRef], targets: list[Target], run: RunStatus | None = None
) -> None:
    """Re-key tables stored under a fingerprint of version 1 to the current fingerprint of
    the server they were measured for: the targets whose version-1 fingerprint is the
    table's, if they all agree on the current one (they are one server by the current
    list too). The ConfigMap keeps its version-1 label; `adoptedFrom` vouches for it.
    A run that started under version 1 is re-keyed alike.

    A version-1 table measured after this operator's own table for the same server (0.1.0,
    rolled back to, measured it and rolled the server onto it; then this version came back)
    replaces that table: it is the newer measurement and what the server runs, and keeping
    the older one would roll the server back onto it."""
    for table in list(tables):
        if not is_v1(table.fingerprint):
            continue
        now = {t.fingerprint for t in targets if t.legacy_fingerprint == table.fingerprint}
        if len(now) != 1:
            continue  # no target is that server any more, or it is several now
        (fingerprint,) = now
        adopted = table.model_copy(
            update={"fingerprint": fingerprint, "adopted_from": table.fingerprint}
        )
        key = (table.gpu_product, fingerprint)
        j = next((k for k, t in enumerate(tables) if (t.gpu_product, t.fingerprint) == key), None)
        if j is None:
            tables[tables.index(table)] = adopted
        elif _later(table.profiled_at, tables[j].profiled_at):
            tables[j] = adopted
            tables.remove(table)
    if run is not None and is_v1(run.fingerprint):
        now = {t.fingerprint for t in targets if t.legacy_fingerprint == run.fingerprint}
        if len(now) == 1:
            run.fingerprint = next(iter(now))


def _later(stamp: str | None, than: str | None) -> bool:
    """`stamp` is a later time than `than` (False when either is missing or unreadable)."""
    a, b = (parse_rfc3339(s) if s and len(s) < 64 else None for s in (stamp, than))
    if a is None or b is None or a.tzinfo is None or b.tzinfo is None:
        return False  # (a naive and an aware time do not compare)
    return a > b


def _changes(p: Pass, target: Target) -> list[str]:
    """What differs between the server of the profile's table that the target runs and
    the target as it is now (empty when it runs none, or the one measured for it)."""
    running = next((t for t in p.status.tables if t.config_map == target.running_config_map), None)
    if running is None or target.config is None or running.fingerprint == target.fingerprint:
        return []
    cm = p.config_map(running.config_map)
    text = ((cm or {}).get("data") or {}).get(L.META_KEY) or "{}"
    meta = read_json_object(text, max_bytes=L.MAX_META_BYTES)
    server = meta.get("server") if readable(meta) else None
    if not isinstance(server, Mapping):
        return []
    lines = server_changes(server, target.config)
    if lines or running.gpu_product != target.gpu:
        return lines
    if "inputs" not in server:
        return [
            "an input that fingerprint version 1 did not record changed (the table was "
            "measured before the upgrade): `sps-operator fingerprint` lists the server's "
            "inputs now"
        ]
    return ["spec.table (the table kind or sweep) changed"]


def _one_writer(p: Pass, profiles: list[ProfileSummary]) -> None:
    """Several AnnotateOnly profiles may name one stable ConfigMap; one writes it (the one
    recorded on it, else the oldest). The others refuse their targets (their servers read
    that profile's table, never theirs) and never write it."""
    stable = str(p.spec.rollout.table_config_map)
    writer = stable_writer(p.snapshot.stable, stable, profiles)
    if writer == p.ref.name:
        return
    p.stable_conflict = (
        f"ConfigMap {stable} is written by SpsProfile {writer!r} (recorded on it, or the "
        f"oldest AnnotateOnly profile naming it); {p.ref.name!r} never writes it and its "
        "servers read that profile's table: give each profile its own rollout.tableConfigMap"
    )
    for target in p.targets:
        target.refuse(CONFLICT, p.stable_conflict)


def _second_writer(p: Pass) -> None:
    """The stable ConfigMap is the cluster's own object, or something else writes the
    table back out of it: the operator never writes it (no fight), and says who."""
    stable, name = p.snapshot.stable, str(p.spec.rollout.table_config_map)
    if stable is None or p.stable_conflict is not None:
        return
    system = stable_writers.system_object(stable)
    filename = posixpath.basename(p.spec.rollout.table_path)
    written = {t.hash for t in p.status.tables} | {stable_writers.PLACEHOLDER_HASH}
    writer = stable_writers.reverted_by(stable, filename, written)
    if system is None and writer is None:
        return
    if system is not None:
        why = f"it is the cluster's own object (it carries {system})"
    else:
        why = f"{writer} wrote other data over the table the operator put there"
    p.stable_conflict = (
        f"ConfigMap {name} has a second writer: {why}; the operator stopped writing it so "
        "the two do not overwrite each other at every pass. Name a ConfigMap only the "
        "operator writes in spec.rollout.tableConfigMap, or stop the other writer and delete "
        "the ConfigMap (the operator recreates it)"
    )
    for target in p.targets:
        target.refuse(STABLE_TABLE_CONTESTED, p.stable_conflict)


def _one_table_for_all(p: Pass) -> None:
    """AnnotateOnly serves every target through one stable ConfigMap, which holds one
    table: the targets must agree on (GPU product, fingerprint)."""
    usable = [t for t in p.targets if t.usable]
    if len({(t.gpu, t.fingerprint) for t in usable}) <= 1:
        return
    listing = ", ".join(f"{t.name} ({t.gpu}, {t.fingerprint})" for t in usable)
    for target in usable:
        target.refuse(
            ONE_TABLE_CONFIGMAP_MANY_SERVERS,
            f"AnnotateOnly serves one table through ConfigMap {p.spec.rollout.table_config_map}, "
            f"but these Deployments need different tables: {listing}; give each its own "
            "SpsProfile and ConfigMap, or use rollout.mode Inject",
        )


def _place(p: Pass, target: Target, previous: TargetStatus | None) -> None:
    """The GPU product the target's pods settled on (from status, so a restart continues
    a debounce where it was)."""
    dep = target.deployment
    where = placement(
        workloads.pod_selector(dep) or {},
        p.snapshot.pods,
        p.snapshot.node_labels,
        p.spec.gpu_product_label,
    )
    target.products = where.products
    target.unplaced = unplaced_note(where, p.spec.gpu_product_label)
    settled = settle(
        MIXED if where.mixed else where.product,
        previous.observed_gpu if previous else None,
        parse_rfc3339(previous.observed_since) if previous else None,
        p.now,
        timedelta(seconds=p.settings.gpu_debounce_seconds),
        rollout_complete=workloads.rolled_out(dep) and where.pods > 0,
    )
    target.observed_gpu, target.observed_since = settled.observed, settled.since
    target.gpu = settled.product
    if settled.mixed:
        target.refuse(
            MIXED_GPU_PRODUCTS,
            f"pods run on several GPU products ({', '.join(sorted(where.products))}); "
            "pin the Deployment to one product with a nodeSelector on "
            f"{p.spec.gpu_product_label}",
        )


def _understand_server(
    spec: SpsProfileSpec,
    target: Target,
    namespace: str,
    env_config_maps: Mapping[str, ConfigMapEnv | None],
    diagonal_only: Collection[str],
) -> None:
    pod_spec = target.pod_spec
    container = find_server_container(pod_spec, spec.server_container)
    if container is None:
        names = [c.get("name") for c in pod_spec.get("containers") or []]
        target.refuse(
            NO_SERVER_CONTAINER,
            f"no container named {spec.server_container!r}; set spec.serverContainer to one "
            f"of {names}",
        )
        return
    target.container = container
    too_large = target_size_problem(pod_spec, container)
    if too_large is not None:
        target.refuse(TARGET_TOO_LARGE, too_large + "; trim it below the limit")
        return
    try:
        command, target.config = read_server(
            container, namespace, env_config_maps, spec.server.sglang_version
        )
    except ServerProblem as exc:
        target.refuse(exc.reason, str(exc))
        return
    target.command = command
    group = _group_problem(spec, target, namespace, env_config_maps)
    if group is not None:
        target.refuse(*group)
        return
    target.fingerprint, target.legacy_fingerprint = table_keys(target.config, spec.table)
    target.table_source = compat.table_source(target.config)
    refused = compat.refusal(spec.table.kind, target.config, diagonal_only)
    if refused is not None:
        target.refuse(*refused)
        return
    mode = spec.rollout.mode
    shadow = next(
        (
            found
            for _, template in workloads.templates(target.deployment)
            if (found := _shadowed_in(spec, template)) is not None
        ),
        None,
    )
    if shadow is not None:
        target.refuse(TABLE_MOUNT_SHADOWED, shadow)
    elif mode == RolloutMode.INJECT and command.shell:
        target.refuse(
            SHELL_WRAPPED_SERVER,
            "the server is started by a shell script; Inject cannot add "
            f"{TABLE_PATH_FLAG} to a script. Put the launcher and its flags in command/args "
            "(exec form), or use rollout.mode AnnotateOnly with the flag in your script",
        )
    elif mode == RolloutMode.ANNOTATE_ONLY:
        # Every template of a group: each rank reads the table from its own mount.
        for _, template in workloads.templates(target.deployment):
            server = _server_of(spec, template) or container
            problem = annotate_only_mount_problem(
                spec, template.get("spec") or {}, server, target.config.table_path
            )
            if problem:
                target.refuse(TABLE_NOT_MOUNTED, problem)
                break


def _server_of(spec: SpsProfileSpec, template: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return find_server_container(template.get("spec") or {}, spec.server_container)


def _shadowed_in(spec: SpsProfileSpec, template: Mapping[str, Any]) -> str | None:
    container = _server_of(spec, template)
    if container is None:
        return None
    return shadowing_mount(spec, template.get("spec") or {}, container)


def _group_problem(
    spec: SpsProfileSpec,
    target: Target,
    namespace: str,
    env_config_maps: Mapping[str, ConfigMapEnv | None],
) -> tuple[str, str] | None:
    """A LeaderWorkerSet is one server across its group: every rank loads the table
    itself, so each template's server must be the same server (the per-rank arguments
    aside, which are not cost inputs), and --nnodes its group size. (reason, message), or
    None when it is one server (or not a group)."""
    if target.kind != workloads.LEADER_WORKER_SET or target.config is None:
        return None
    size = workloads.group_size(target.deployment)
    nnodes = target.config.value("nnodes") or "1"
    if nnodes.strip() != str(size):
        return GROUP_MISMATCH, (
            f"the server starts with --nnodes {nnodes} but the LeaderWorkerSet's group has "
            f"{size} pods (leaderWorkerTemplate.size); make them equal"
        )
    for path, template in workloads.templates(target.deployment)[1:]:
        where = ".".join(path)
        container = _server_of(spec, template)
        if container is None:
            names = [c.get("name") for c in (template.get("spec") or {}).get("containers") or []]
            return NO_SERVER_CONTAINER, (
                f"{where} has no container named {spec.server_container!r} (it has {names}); "
                "every rank of the group must run the server"
            )
        too_large = target_size_problem(template.get("spec") or {}, container)
        if too_large is not None:
            return TARGET_TOO_LARGE, f"{where}: {too_large}; trim it below the limit"
        try:
            command, config = read_server(
                container, namespace, env_config_maps, spec.server.sglang_version
            )
        except ServerProblem as exc:
            return exc.reason, f"{where}: {exc}"
        if spec.rollout.mode == RolloutMode.INJECT and command.shell:
            return SHELL_WRAPPED_SERVER, (
                f"{where}: the server is started by a shell script; Inject cannot add "
                f"{TABLE_PATH_FLAG} to a script. Put the launcher and its flags in command/args"
            )
        if config.inputs != target.config.inputs:
            differ = sorted(
                k
                for k in set(config.inputs) | set(target.config.inputs)
                if config.inputs.get(k) != target.config.inputs.get(k)
            )
            return GROUP_MISMATCH, (
                f"{where}'s server differs from the leader's in cost inputs "
                f"({', '.join(differ[:8])}): every rank must run the same server; only the "
                "per-rank arguments (--node-rank, --dist-init-addr) may differ"
            )
        gpus, leader = (
            workloads.container_gpus(container),
            workloads.container_gpus(target.container or {}),
        )
        if gpus != leader:
            return GROUP_MISMATCH, (
                f"{where}'s server asks for {gpus} GPUs and the leader's for {leader}: every "
                "rank must ask for the same (the profiling clone gives each rank the leader's, "
                "and a group lent to a clone must free what the clone asks for)"
            )
    return None


def _clean(path: str) -> str:
    """`path` as the container runtime resolves it: POSIX normpath keeps a leading `//`,
    the runtime does not (`//etc/sps/table` is `/etc/sps/table` in the container)."""
    return posixpath.normpath("/" + path.lstrip("/") if path.startswith("/") else path)


def _under(path: str, top: str) -> bool:
    path, top = _clean(path), _clean(top)
    return path == top or path.startswith(top.rstrip("/") + "/")


def shadowing_mount(
    spec: SpsProfileSpec, pod_spec: Mapping[str, Any], container: Mapping[str, Any]
) -> str | None:
    """A mount of the server container's own at or under where the table is mounted (the
    directory of rollout.tablePath), which would hide the table the operator puts there
    while status says it runs (a subPath file at the table path, a volume over the
    directory); None when there is none. What the operator mounts itself (Inject's
    volume) and, with AnnotateOnly, the mount of the stable ConfigMap that serves the
    table do not count. The server's /server_info reports only the table's path, never
    its bytes (contract §2), so what the container mounts is the evidence."""
    if spec.rollout.mode == RolloutMode.DISABLED:
        return None
    path = spec.rollout.table_path
    directory = _clean(posixpath.dirname(path))
    stable = str(spec.rollout.table_config_map)
    stable_volumes = {
        v.get("name")
        for v in pod_spec.get("volumes") or []
        if spec.rollout.mode == RolloutMode.ANNOTATE_ONLY
        and (v.get("configMap") or {}).get("name") == stable
    }
    entries = [
        ("volumeMount", m, str(m.get("mountPath") or ""))
        for m in container.get("volumeMounts") or []
    ]
    entries += [
        ("volumeDevice", d, str(d.get("devicePath") or ""))
        for d in container.get("volumeDevices") or []
    ]
    for kind, entry, where in entries:
        if not where or not _under(where, directory):
            continue
        name = entry.get("name")
        at = _clean(where)
        injected = spec.rollout.mode == RolloutMode.INJECT and name == builders.TABLE_VOLUME
        if kind == "volumeMount" and (
            (injected and at == directory)
            or (name in stable_volumes and at in (directory, _clean(path)))
        ):
            continue
        return (
            f"container {container.get('name')!r} has its own {kind} {name!r} at {where}, at or "
            f"under {directory} where the table is mounted: it would hide the table "
            f"{path} the server reads while status says the table runs. Remove it, or move it "
            "out of that directory"
        )
    return None


def annotate_only_mount_problem(
    spec: SpsProfileSpec,
    pod_spec: Mapping[str, Any],
    container: Mapping[str, Any],
    table_path: str | None,
) -> str | None:
    """Why the server cannot read the stable ConfigMap's table (None: it can). With
    AnnotateOnly the Deployment in Git must mount it and pass the flag itself."""
    rollout = spec.rollout
    stable, path = str(rollout.table_config_map), rollout.table_path
    directory, filename = posixpath.split(path)
    advice = (
        f"mount ConfigMap {stable} at {directory} in container {container.get('name')!r} and "
        f"start the server with {TABLE_PATH_FLAG} {path} (see docs/gitops.md)"
    )
    volumes = {
        v.get("name"): v
        for v in pod_spec.get("volumes") or []
        if (v.get("configMap") or {}).get("name") == stable
    }
    if not volumes:
        return f"the Deployment does not mount ConfigMap {stable}; {advice}"
    serves = False
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount.get("name"))
        if volume is None:
            continue
        items = (volume.get("configMap") or {}).get("items")
        key = filename
        if items:
            key = next((i.get("path") for i in items if i.get("key") == filename), None) or ""
        if mount.get("subPath"):
            serves = serves or (mount.get("mountPath") == path and mount["subPath"] == key)
        else:
            serves = serves or (mount.get("mountPath") == directory and key == filename)
    if not serves:
        return f"ConfigMap {stable} is not mounted so that {path} is its {filename!r} key; {advice}"
    if table_path != path:
        return (
            f"the server reads its table from {table_path or 'nowhere'} "
            f"({TABLE_PATH_FLAG}), not {path}; {advice}"
        )
    return None
