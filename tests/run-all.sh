#!/usr/bin/env bash
# `make test`: every check and every test, in three lanes at once.
#
# bed lane (the longest; its output goes to the terminal as it comes): one real-node test
#   bed (`sps-testbed run`) and on it the tests that use it (marker `realnode`): first
#   those marked `bed_shared` in pytest-xdist workers (their own namespaces, an
#   operator in namespaces mode, a few GPUs or a pool of their own, no bound on time;
#   `--dist loadgroup`: the tests that fill the bed's third pool, one `xdist_group`, run
#   one after another on one worker; the longest handed out first, tests/bed_durations.py),
#   then every other one alone (those that load every node, taint a pool, run a
#   cluster-wide operator or bound a time, and every test not marked: alone is the safe
#   default), except the files in `second_bed` and `third_bed` below. The whole bed (its
#   control plane, kubelets, containerd and so every container) runs at `nice -5`.
# other lane (its log: $SPS_TEST_LOGS/other.log, printed at the end): the tests that
#   start beds of their own (`e2e`, not `realnode`: the demo), then lint and types (in the
#   background, its log $SPS_TEST_LOGS/lint.log) beside the control-plane tests (`k8s`, no
#   nodes) and the profiler's tests against a live simulator;
#   then at once (it waits for no phase: about 100 s before the shared phase's end) a
#   second bed for the one-at-a-time tests of the files in `second_bed` (Kueue's and the
#   tenants', which installs Kueue too: one install; LeaderWorkerSet's, so that LWS is
#   installed in one bed only and beside Kueue, which an LWS target's queued profiling
#   needs).
# third lane (its log: $SPS_TEST_LOGS/third.log): once the shared phase is over, a third
#   bed of the four default nodes (two H100, two H200) for the two longest one-at-a-time
#   tests, `third_bed`: the upgrade from 0.1.0 and back, and every uninstall order (both
#   install the CRD of their own and so cannot share a bed's time with another).
# unit lane (its log: $SPS_TEST_LOGS/unit.log): the unit and simulator tests in two
#   workers, once the shared phase is over.
#
# Why this shape (docs/dev-cluster.md, "Where make test's time goes"): the shared phase
# keeps both cores busy, so whatever runs beside it slows it down (a second bed beside it
# from the start cost 155 s); the one-at-a-time tests mostly wait (leases, debounces,
# rollouts: the CPU is 15-60 % busy), so they run on three beds at once, each list about as
# long as the others, and the unit tests beside them. The second bed starts as soon as the
# other lane's steps are done, in the shared phase's last ~100 s, when fewer tests are left
# than workers: its list is the longest. Lint and the unit tests run under
# `nice 10`, the control-plane tests at the default, so that the beds keep the CPU they
# need; the profiler tests and the control-plane tests that bound a time run above the bed
# lane's priority (`nice -10`), because they measure real time (lease hand-over times;
# tables within 5-10 % of the simulator's truth, which a starved simulator misses).
#
# Exits non-zero when any step of any lane fails. Arguments go to every pytest run
# (e.g. `-x`); PYTEST_ADDOPTS works too. SPS_TEST_WORKERS sets the number of workers for
# the shared tests (default 3; 0: one process).
set -uo pipefail
cd "$(dirname "$0")/.."
# With PYTHONDONTWRITEBYTECODE set, every Python process (pytest and each of its workers,
# the bed's supervisor and device plugins) compiled every module it imported, and pytest
# rewrote every test module: one collection of the tests took 9.4 CPU-s, 3.4 with the
# bytecode kept. Kept then, once per source file, in a cache outside the checkout.
if [ -n "${PYTHONDONTWRITEBYTECODE:-}" ]; then
  unset PYTHONDONTWRITEBYTECODE
  export PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/sps-operator/pycache}
fi
bin=${SPS_TEST_BIN:-.venv/bin}
logs=${SPS_TEST_LOGS:-.test-logs}
workers=${SPS_TEST_WORKERS:-3}
low=(nice -n "${SPS_TEST_NICE:-10}")
bed=(nice -n -5)
high=(nice -n -10)
# The one-at-a-time tests the second and third beds run (the rest of them run on the first
# bed after its shared phase). In one run with two beds (docs/dev-cluster.md): the first
# bed's one-at-a-time tests 520 s after the shared phase (the upgrade test 207 s, the
# uninstall test 72 s), the second bed's 483 s (the production server's test 91 s), and
# the CPU spare in the last three minutes. Now the first bed about 330 s, the second about
# 395 s from ~100 s earlier, the third about 300 s.
# The monitoring test (~30 s, no GPU) moved to the second bed: in three runs on 2026-12-08 the
# first bed's list ended last, 12-46 s after the second's.
second_bed=(tests/e2e/test_e2e_tenants.py tests/e2e/test_e2e_tenants_capacity.py tests/e2e/test_e2e_tenants_tables.py
  tests/e2e/test_e2e_kueue.py tests/realnode/test_realnode_kueue.py
  tests/realnode/test_realnode_lws.py tests/e2e/test_e2e_kinds_lws.py tests/realnode/test_realnode_group_clone_kueue.py
  tests/realnode/test_realnode_monitoring.py)
third_bed=(tests/e2e/test_e2e_upgrade.py tests/e2e/test_e2e_uninstall.py)
# The third bed's nodes: the default four (the tests above use H100 and H200 only).
third_nodes=(--node gpu-h100-0=NVIDIA-H100-80GB-HBM3 --node gpu-h100-1=NVIDIA-H100-80GB-HBM3
  --node gpu-h200-0=NVIDIA-H200 --node gpu-h200-1=NVIDIA-H200)
# The control-plane tests that bound a time (a lease's hand-over, a stop within 5 s): above
# the bed lane's priority; the others at the default, below it.
timed=(tests/k8s/test_k8s_leader_election.py tests/k8s/test_k8s_controlplane_lifecycle.py)
shared_done="$logs/shared.done"

# Runs a step, records its failure and time; `pytest` finding no test (exit 5) is no failure.
step() {  # lane name command...
  local lane=$1 name=$2 started=$SECONDS rc=0
  shift 2
  echo "==== $name: $*"
  "$@" || rc=$?
  [ "$rc" -eq 5 ] && rc=0
  [ "$rc" -ne 0 ] && mkdir -p "$logs" && echo "$name (exit $rc)" >> "$logs/$lane.failed"
  echo "==== $name: exit $rc after $((SECONDS - started)) s"
  return "$rc"
}

# Returns once the bed lane's shared phase is over (or the bed lane is, however it ended).
after_the_shared_phase() {
  while [ ! -e "$shared_done" ]; do sleep 2; done
}

case "${1:-}" in
  --other-lane)
    shift
    # First: the beds of its own (the demo) start while the bed lane runs the tests that
    # bound no time; a second bed beside the first is fine.
    step other "beds of their own" "$bin/pytest" -m "e2e and not realnode" \
      -o cache_dir=.pytest_cache/other "$@"
    # Lint and types beside the next steps, not before them (its own log, shown at the
    # lane's end): with mypy's cache cold (a fresh clone, CI) they took 41-44 s at `nice
    # 10`, which held the second bed's start back by as much, and its list was the run's
    # longest path (926 s against the first bed's 888).
    step other lint "${low[@]}" make --no-print-directory lint-checks > "$logs/lint.log" 2>&1 &
    lint_pid=$!
    # A cache directory of its own: two pytest processes share the checkout.
    step other control-plane "$bin/pytest" -m "k8s and not realnode and not e2e" \
      "${timed[@]/#/--ignore=}" -o cache_dir=.pytest_cache/other "$@"
    step other "control plane, timed" "${high[@]}" "$bin/pytest" "${timed[@]}" \
      -o cache_dir=.pytest_cache/other "$@"
    step other profiler "${high[@]}" "$bin/pytest" -m "not k8s and not e2e" tests/profiler \
      -o cache_dir=.pytest_cache/other "$@"
    step other "second bed, one at a time" "${bed[@]}" "$bin/sps-testbed" run -- \
      "$bin/pytest" -m "realnode and not bed_shared" "${second_bed[@]}" \
      --durations=0 --durations-min=2 -o cache_dir=.pytest_cache/other "$@"
    wait "$lint_pid"
    cat "$logs/lint.log"
    exit 0
    ;;
  --third-lane)
    shift
    after_the_shared_phase
    step third "third bed, one at a time" "${bed[@]}" "$bin/sps-testbed" run "${third_nodes[@]}" -- \
      "$bin/pytest" -m "realnode and not bed_shared" "${third_bed[@]}" \
      --durations=0 --durations-min=2 -o cache_dir=.pytest_cache/third "$@"
    exit 0
    ;;
  --unit-lane)
    shift
    after_the_shared_phase
    step unit unit "${low[@]}" "$bin/pytest" -n 2 -m "not k8s and not e2e" \
      --ignore=tests/profiler -o cache_dir=.pytest_cache/unit "$@"
    exit 0
    ;;
  --on-the-bed)  # inside `sps-testbed run`, SPS_TESTBED_ATTACH set
    shift
    dist=(-n "$workers" --dist loadgroup)
    [ "$workers" -eq 0 ] && dist=()
    step bed "bed, shared" "$bin/pytest" "${dist[@]}" -m "realnode and bed_shared" \
      --durations=0 --durations-min=2 "$@"
    touch "$shared_done"
    step bed "bed, one at a time" "$bin/pytest" -m "realnode and not bed_shared" \
      "${second_bed[@]/#/--ignore=}" "${third_bed[@]/#/--ignore=}" --durations=0 \
      --durations-min=2 "$@"
    exit 0
    ;;
esac

# Before any bed starts, at once: a bed left running (a demo) and the host's inotify limits.
# The suite's beds start beside a running one when the limits leave room; else this says
# what runs, how to stop it and which limits to raise. Its peak: three beds, the bed lane's
# six nodes beside the second bed's six and the third bed's four (earlier the demo's four
# and the network-policy bed's two).
"$bin/sps-testbed" preflight --beds 3 --nodes 16 || exit 1

mkdir -p "$logs"
rm -f "$logs"/other.* "$logs"/lint.* "$logs"/bed.* "$logs"/unit.* "$logs"/third.* "$shared_done"
start=$SECONDS
# Each in its own session (process group), so that it can be ended as a whole.
setsid bash "$0" --other-lane "$@" > "$logs/other.log" 2>&1 &
other_pid=$!
setsid bash "$0" --unit-lane "$@" > "$logs/unit.log" 2>&1 &
unit_pid=$!
setsid bash "$0" --third-lane "$@" > "$logs/third.log" 2>&1 &
third_pid=$!
trap 'kill -TERM -- -$other_pid -$unit_pid -$third_pid 2>/dev/null' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "==== bed lane (the other lane's log: $logs/other.log)"
step bed "the bed" "${bed[@]}" "$bin/sps-testbed" run -- bash "$0" --on-the-bed "$@"
bed_seconds=$((SECONDS - start))
touch "$shared_done"  # even when the bed never got that far
wait "$other_pid" "$unit_pid" "$third_pid"

echo
echo "==== the other lane (the demo, lint, control plane, profiler, a second bed): $logs/other.log"
cat "$logs/other.log"
echo
echo "==== the unit lane (unit and simulator tests): $logs/unit.log"
cat "$logs/unit.log"
echo
echo "==== the third lane (the upgrade and uninstall tests on a bed of their own): $logs/third.log"
cat "$logs/third.log"
echo
echo "==== bed lane done after $bed_seconds s, all lanes after $((SECONDS - start)) s"
failed=$(cat "$logs"/bed.failed "$logs"/other.failed "$logs"/unit.failed "$logs"/third.failed 2>/dev/null)
if [ -n "$failed" ]; then
  echo "==== FAILED: $(echo "$failed" | paste -sd ';' -)"
  exit 1
fi
echo "==== all passed"
