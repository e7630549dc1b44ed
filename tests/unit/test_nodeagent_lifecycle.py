"""Pod lifecycle decisions: restarts, backoff, phases, probes and the status reported."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sps_operator.devcluster.nodeagent.lifecycle import (
    ContainerRecord,
    PodView,
    backoff_seconds,
    container_status,
    deleted_phase,
    exit_code_of,
    init_done,
    init_phase_failed,
    pod_status,
    should_restart,
    terminal_phase,
    watch_action,
)
from sps_operator.devcluster.nodeagent.logs import (
    LogQuery,
    container_log_files,
    find_log_file,
    format_pod_logs,
    read_container_log,
    tail_bytes,
)
from sps_operator.devcluster.nodeagent.probes import (
    ProbeSpec,
    ProbeTracker,
    container_probes,
    readiness_ok,
    startup_passed,
    wants_kill,
)
from sps_operator.devcluster.nodeagent.runtime import (
    Launch,
    container_command,
    mount_script,
    resolve_port,
)
from sps_operator.devcluster.nodeagent.volumes import MountPlan


@pytest.mark.parametrize(
    ("kind", "policy", "code", "restart"),
    [
        ("main", "Always", 0, True),
        ("main", "Always", 1, True),
        ("main", "OnFailure", 0, False),
        ("main", "OnFailure", 2, True),
        ("main", "Never", 2, False),
        ("init", "Always", 0, False),
        ("init", "OnFailure", 1, True),
        ("init", "Always", 1, True),
        ("init", "Never", 1, False),
        ("sidecar", "Never", 0, True),
        ("sidecar", "Never", 137, True),
    ],
)
def test_should_restart(kind: str, policy: str, code: int, restart: bool) -> None:
    assert should_restart(kind, policy, code) is restart  # type: ignore[arg-type]


def test_backoff_doubles_to_the_cap() -> None:
    assert [backoff_seconds(n, 1.0, 20.0) for n in range(7)] == [0, 1, 2, 4, 8, 16, 20]


def test_exit_codes() -> None:
    assert exit_code_of(0) == 0 and exit_code_of(7) == 7
    assert exit_code_of(-9) == 137 and exit_code_of(-15) == 143


def finished(name: str, code: int, kind: str = "main") -> ContainerRecord:
    rec = ContainerRecord(name, "img", kind)  # type: ignore[arg-type]
    rec.set_running("t0", "id")
    rec.set_terminated(code, "t1")
    return rec


def test_terminal_phase() -> None:
    assert terminal_phase("Never", [finished("a", 0), finished("b", 0)]) == "Succeeded"
    assert terminal_phase("Never", [finished("a", 0), finished("b", 3)]) == "Failed"
    assert terminal_phase("OnFailure", [finished("a", 3)]) is None  # will restart
    assert terminal_phase("OnFailure", [finished("a", 0)]) == "Succeeded"
    assert terminal_phase("Always", [finished("a", 0)]) is None
    running = ContainerRecord("b", "img", "main")
    running.set_running("t0", "id")
    assert terminal_phase("Never", [finished("a", 0), running]) is None
    assert deleted_phase([finished("a", 143)]) == "Failed"
    assert deleted_phase([finished("a", 0)]) == "Succeeded"
    assert deleted_phase([ContainerRecord("a", "img", "main")]) == "Failed"  # never ran


def test_init_containers() -> None:
    assert init_phase_failed("Never", [finished("i", 1, "init")])
    assert not init_phase_failed("OnFailure", [finished("i", 1, "init")])
    sidecar = ContainerRecord("s", "img", "sidecar")
    sidecar.set_running("t0", "id")
    assert not init_done([finished("i", 0, "init"), sidecar])
    sidecar.started = True
    assert init_done([finished("i", 0, "init"), sidecar])
    assert not init_done([finished("i", 1, "init")])


def test_container_record_restart_keeps_last_state() -> None:
    rec = finished("a", 3)
    assert rec.reason == "Error" and rec.restart_count == 0
    rec.set_waiting("CrashLoopBackOff", "back-off 1s")
    rec.set_running("t2", "id2")
    status = container_status(rec)
    assert status["restartCount"] == 1
    assert status["lastState"]["terminated"]["exitCode"] == 3
    assert status["state"] == {"running": {"startedAt": "t2"}}
    rec.set_terminated(137, "t3")
    status = container_status(rec)
    assert status["state"]["terminated"]["signal"] == 9
    assert status["state"]["terminated"]["reason"] == "Error"
    assert status["ready"] is False and status["started"] is False


def test_pod_status_conditions_and_transitions() -> None:
    main = ContainerRecord("main", "img", "main")
    main.set_running("t0", "id")
    view = PodView(
        phase="Running",
        pod_ip="10.244.1.2",
        host_ip="10.244.1.1",
        start_time="t0",
        sandbox_ready=True,
    )
    first = pod_status(view, [], [main], [{"type": "DisruptionTarget", "status": "True"}], "T1")
    conds = {c["type"]: c for c in first["conditions"]}
    assert conds["Ready"]["status"] == "False" and conds["Ready"]["reason"] == "ContainersNotReady"
    assert conds["Initialized"]["status"] == "True" and conds["PodScheduled"]["status"] == "True"
    assert conds["DisruptionTarget"]["status"] == "True"  # not ours: carried over
    assert first["podIPs"] == [{"ip": "10.244.1.2"}] and first["hostIP"] == "10.244.1.1"
    assert first["initContainerStatuses"] is None  # removes the key in a merge patch
    main.ready = main.started = True
    second = pod_status(view, [], [main], first["conditions"], "T2")
    conds2 = {c["type"]: c for c in second["conditions"]}
    assert conds2["Ready"]["status"] == "True" and conds2["Ready"]["lastTransitionTime"] == "T2"
    assert conds2["PodScheduled"]["lastTransitionTime"] == "T1"  # unchanged status keeps its time
    done = pod_status(
        PodView("Succeeded", "10.244.1.2", "10.244.1.1", "t0", True),
        [],
        [finished("main", 0)],
        second["conditions"],
        "T3",
    )
    conds3 = {c["type"]: c for c in done["conditions"]}
    assert conds3["Ready"]["status"] == "False" and conds3["Ready"]["reason"] == "PodCompleted"
    assert done["phase"] == "Succeeded"


def test_readiness_probe_thresholds() -> None:
    spec = ProbeSpec(
        "readiness",
        {"httpGet": {"port": 80}},
        initial_delay=2,
        period=1,
        success_threshold=2,
        failure_threshold=2,
    )
    tr = ProbeTracker.start(spec, 100.0)
    assert tr.result is False and not readiness_ok({"readiness": tr})  # not ready until it passes
    assert not tr.due(101.0, True) and tr.due(102.0, True)
    tr.begin(102.0)
    assert not tr.due(102.5, True)  # in flight
    assert tr.record(True) is None  # one success of two
    tr.begin(103.0)
    assert tr.next_due == 104.0
    assert tr.record(True) is True and readiness_ok({"readiness": tr})
    assert tr.record(False) is None
    assert tr.record(True) is None  # failures must be consecutive
    assert tr.record(False) is None
    assert tr.record(False) is False and not readiness_ok({"readiness": tr})


def test_startup_gates_other_probes_and_kills_on_failure() -> None:
    startup = ProbeTracker.start(
        ProbeSpec("startup", {"exec": {}}, period=1, failure_threshold=2), 0.0
    )
    liveness = ProbeTracker.start(
        ProbeSpec("liveness", {"tcpSocket": {}}, period=1, failure_threshold=1), 0.0
    )
    trackers = {"startup": startup, "liveness": liveness}
    assert not startup_passed(trackers)  # type: ignore[arg-type]
    assert startup.due(0.0, started=False) and not liveness.due(0.0, started=False)
    assert startup.record(False) is None
    assert startup.record(True) is None and startup_passed(trackers)  # type: ignore[arg-type]
    assert not startup.due(10.0, started=True)  # passed once: no more startup probes
    assert liveness.due(10.0, started=True)
    flipped = liveness.record(False)
    assert flipped is False and wants_kill("liveness", flipped)
    assert not wants_kill("readiness", False) and not wants_kill("liveness", None)
    failing = ProbeTracker.start(ProbeSpec("startup", {"exec": {}}, failure_threshold=2), 0.0)
    assert failing.record(False) is None and failing.record(False) is False


def test_container_probes_from_spec() -> None:
    specs = container_probes(
        {
            "readinessProbe": {"httpGet": {"path": "/health", "port": 30000}, "periodSeconds": 1},
            "livenessProbe": None,
        }
    )
    assert [(s.kind, s.period, s.failure_threshold, dict(s.action)) for s in specs] == [
        ("readiness", 1.0, 3, {"httpGet": {"path": "/health", "port": 30000}})
    ]


def test_resolve_port() -> None:
    container = {"ports": [{"name": "http", "containerPort": 30000}]}
    assert resolve_port("http", container) == 30000
    assert resolve_port(8080, container) == resolve_port("8080", container) == 8080
    with pytest.raises(ValueError, match="named port"):
        resolve_port("grpc", container)


def test_container_command_enters_the_pod_namespaces() -> None:
    launch = Launch(
        argv=["sps-sim", "--port", "30000"],
        env={},
        workdir="/w d",
        mounts=[
            MountPlan("/state/v/cfg", "/etc/sps", True),
            MountPlan("/state/v/data", "/data", False),
        ],
        netns_path="/run/netns/sps1-abc",
        hosts_file="/state/hosts",
        hostname="pod-0",
    )
    argv = container_command(launch)
    at = next(i for i, a in enumerate(argv) if a.endswith("nsenter"))
    assert argv[at + 1] == "--net=/run/netns/sps1-abc"
    assert "--mount" in argv and "--uts" in argv and "--pid" in argv and "--kill-child" in argv
    assert argv[-4:] == ["sh", "sps-sim", "--port", "30000"]
    script = mount_script(launch)
    lines = script.splitlines()
    assert "mount --no-canonicalize --bind /state/v/cfg /etc/sps" in lines
    assert "mount -o remount,bind,ro /etc/sps" in lines
    assert "mount -o remount,bind,ro /data" not in lines
    assert "mount --no-canonicalize --bind /state/hosts /etc/hosts" in lines
    assert "hostname pod-0" in lines and "cd -P '/w d'" in lines
    assert lines[-2:] == ['"$@"', "exit $?"]
    host = Launch(["true"], {}, "/", [], None, None, None)
    assert "--uts" not in container_command(host) and not any(
        "nsenter" in a for a in container_command(host)
    )


def test_logs_layout_and_format(tmp_path: Path) -> None:
    pod = tmp_path / "pods" / "ns1_web_uid-1"
    (pod / "main").mkdir(parents=True)
    (pod / "main" / "0.log").write_text("first\n")
    (pod / "main" / "1.log").write_text("".join(f"line {i}\n" for i in range(10)))
    (pod / "main.log").symlink_to("main/1.log")
    (pod / "volumes" / "v").mkdir(parents=True)
    other = tmp_path / "pods" / "ns2_x_uid-2" / "c"
    other.mkdir(parents=True)
    (other / "0.log").write_text("other\n")
    assert [p.name for p in container_log_files(tmp_path, "ns1")] == ["0.log", "1.log"]
    assert read_container_log(tmp_path, "ns1", "web", "main").startswith("line 0")
    text = format_pod_logs(tmp_path, "ns1", tail=2)
    assert "==> ns1/web [main] attempt 1 <==\nline 8\nline 9" in text
    assert "first" in text and "other" not in text
    assert "other" in format_pod_logs(tmp_path)
    with pytest.raises(FileNotFoundError):
        read_container_log(tmp_path, "ns1", "nope", "main")


def test_kubelet_log_queries(tmp_path: Path) -> None:
    container = tmp_path / "pods" / "ns_web_uid-1" / "main"
    container.mkdir(parents=True)
    (container / "0.log").write_text("a\nb\n")
    (container / "1.log").write_text("c\nd\ne\n")
    query = LogQuery.from_params({"follow": ["true"], "tailLines": ["2"], "previous": ["false"]})
    assert query == LogQuery(follow=True, previous=False, tail_lines=2, limit_bytes=None)
    assert find_log_file(tmp_path, "ns", "web", "main") == container / "1.log"
    assert find_log_file(tmp_path, "ns", "web", "main", previous=True) == container / "0.log"
    assert find_log_file(tmp_path, "ns", "web", "other") is None
    (container / "0.log").unlink()
    assert find_log_file(tmp_path, "ns", "web", "main", previous=True) is None
    data = b"c\nd\ne\n"
    assert tail_bytes(data, 2, None) == b"d\ne\n"
    assert tail_bytes(data, 0, None) == b""
    assert tail_bytes(data, -1, 3) == b"c\nd"
    assert tail_bytes(data, 10, None) == data


@pytest.mark.parametrize(
    ("event", "pod", "has_worker", "finished", "stopping", "action"),
    [
        ("ADDED", {"spec": {"nodeName": "other"}}, False, False, False, "ignore"),
        ("ADDED", {"spec": {"nodeName": "n"}}, False, False, False, "start"),
        ("SYNC", {"spec": {"nodeName": "n"}}, False, False, True, "ignore"),  # shutting down
        ("MODIFIED", {"spec": {"nodeName": "n"}}, True, False, False, "update"),
        ("DELETED", {"spec": {"nodeName": "n"}}, True, False, False, "gone"),
        ("DELETED", {"spec": {"nodeName": "n"}}, False, True, False, "ignore"),
        ("MODIFIED", {"spec": {"nodeName": "n"}}, False, True, False, "ignore"),
        (
            "MODIFIED",
            {"spec": {"nodeName": "n"}, "status": {"phase": "Succeeded"}},
            False,
            False,
            False,
            "ignore",
        ),
        (
            "MODIFIED",
            {
                "spec": {"nodeName": "n"},
                "metadata": {"deletionTimestamp": "t", "deletionGracePeriodSeconds": 30},
            },
            False,
            True,
            False,
            "delete",
        ),
        (
            "ADDED",
            {"spec": {"nodeName": "n"}, "metadata": {"deletionTimestamp": "t"}},
            False,
            False,
            False,
            "delete",
        ),
    ],
)
def test_watch_action(
    event: str, pod: dict, has_worker: bool, finished: bool, stopping: bool, action: str
) -> None:
    assert watch_action(event, pod, {"n"}, has_worker, finished, stopping) == action


def test_readiness_gates_hold_ready_back() -> None:
    main = ContainerRecord("main", "img", "main")
    main.set_running("t0", "id")
    main.ready = main.started = True
    view = PodView(
        "Running", "10.244.1.2", "10.244.1.1", "t0", True, readiness_gates=("example.com/lb",)
    )
    status = pod_status(view, [], [main], [], "T1")
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["ContainersReady"]["status"] == "True"
    assert (
        conds["Ready"]["status"] == "False" and conds["Ready"]["reason"] == "ReadinessGatesNotReady"
    )
    gate = {"type": "example.com/lb", "status": "True", "lastTransitionTime": "T0"}
    status = pod_status(view, [], [main], [*status["conditions"], gate], "T2")
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["Ready"]["status"] == "True" and conds["example.com/lb"] == gate


def test_mount_script_reaches_volumes_under_covered_paths() -> None:
    launch = Launch(
        argv=["true"],
        env={},
        workdir="/tmp/state/pod/work",
        mounts=[
            MountPlan("/tmp/state/pod/volumes/sa", "/run/secrets/sa", True),
            MountPlan("/tmp/state/pod/volumes/tmp", "/tmp", False),
            MountPlan("/srv/hostpath", "/tmp/host", False),
        ],
        netns_path=None,
        hosts_file="/tmp/state/pod/hosts",
        hostname="p",
        anchor="/tmp/state/pod",
    )
    lines = mount_script(launch).splitlines()
    assert lines[1] == "exec 3</tmp/state/pod"  # opened before anything is mounted
    binds = [line for line in lines if line.startswith("mount --no-canonicalize --bind")]
    assert binds == [
        "mount --no-canonicalize --bind /proc/self/fd/3/volumes/tmp /tmp",  # parents first
        "mount --no-canonicalize --bind /srv/hostpath /tmp/host",
        "mount --no-canonicalize --bind /proc/self/fd/3/volumes/sa /run/secrets/sa",
        "mount --no-canonicalize --bind /proc/self/fd/3/hosts /etc/hosts",
    ]
    assert "cd -P /proc/self/fd/3/work" in lines
    assert lines.index("exec 3<&-") > lines.index("cd -P /proc/self/fd/3/work")


def test_program_roots_covered_by_mounts_are_bound_back() -> None:
    import sys

    from sps_operator.devcluster.nodeagent.runtime import covered_roots, program_roots

    roots = program_roots()
    assert os.path.realpath(sys.prefix) in roots
    assert covered_roots(["/etc/app", "/data"], ["/srv/venv", "/srv/src"]) == ()
    assert covered_roots(["/srv"], ["/srv/venv", "/opt/py"]) == ("/srv/venv",)
    launch = Launch(
        argv=["sps-sim"],
        env={},
        workdir="/w",
        mounts=[MountPlan("/state/volumes/tmp", "/srv", False)],
        netns_path=None,
        hosts_file=None,
        hostname=None,
        anchor="/state",
        keep=("/srv/venv",),
    )
    lines = mount_script(launch).splitlines()
    opened = lines.index("exec 4</srv/venv")
    mounted = lines.index("mount --no-canonicalize --bind /proc/self/fd/3/volumes/tmp /srv")
    rebound = lines.index("mount --no-canonicalize --bind /proc/self/fd/4 /srv/venv")
    assert opened < mounted < rebound
