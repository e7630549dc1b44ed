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
#   default), except the files in `second_bed` below. The whole bed (its control plane,
#   kubelets, containerd and so every container) runs at `nice -5`.
# other lane (its log: $SPS_TEST_LOGS/other.log, printed at the end): the tests that
#   start beds of their own (`e2e`, not `realnode`: the demo), lint and types, the
#   control-plane tests (`k8s`, no nodes), the profiler's tests against a live simulator;
#   then, once the bed lane's shared phase is over, a second bed for the one-at-a-time
#   tests of the files in `second_bed` (Kueue's and the tenants', which installs Kueue
#   too: one install; LeaderWorkerSet's, so that LWS is installed in one bed only and
#   beside Kueue, which an LWS target's queued profiling needs; the production server's).
# unit lane (its log: $SPS_TEST_LOGS/unit.log): the unit and simulator tests in two
#   workers, once the shared phase is over.
#
# Why this shape (docs/dev-cluster.md, "Where make test's time goes"): the shared phase
# keeps both cores busy, so whatever runs beside it slows it down (a second bed beside it
# cost 155 s); the one-at-a-time tests mostly wait (leases, debounces, rollouts: the CPU is
# 15-60 % busy), so what is left of the CPU work (the unit tests, the second bed's tests)
# waits for the shared phase's end and runs beside them. Lint and the unit tests run under
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
# The one-at-a-time tests the second bed runs (the rest of them run on the first bed after
# its shared phase): Kueue's and the tenants' (one Kueue install) and the production
# server's (before Kueue: the plugin runs Kueue's modules last). From the recorded
# durations both beds then take about 350 s after the shared phase (the first bed's tests
# alone were 415 s, the second bed's 294 s), the unit lane 307 s; LeaderWorkerSet's add
# about 45 s to the second bed, its target rollouts (test_e2e_kinds_lws.py) about 40 s and
# 78 s (the two-pod group, profiled on H100 and again on H200), the
# multi-node clone's Kueue test 40 s; the clone's other two (one at a time on the first bed) 64 s.
second_bed=(tests/e2e/test_e2e_tenants.py tests/e2e/test_e2e_tenants_capacity.py tests/e2e/test_e2e_tenants_tables.py
  tests/realnode/test_realnode_production.py tests/e2e/test_e2e_kueue.py tests/realnode/test_realnode_kueue.py
  tests/realnode/test_realnode_lws.py tests/e2e/test_e2e_kinds_lws.py tests/realnode/test_realnode_group_clone_kueue.py)
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
    step other lint "${low[@]}" make --no-print-directory lint-checks
    # A cache directory of its own: two pytest processes share the checkout.
    step other control-plane "$bin/pytest" -m "k8s and not realnode and not e2e" \
      "${timed[@]/#/--ignore=}" -o cache_dir=.pytest_cache/other "$@"
    step other "control plane, timed" "${high[@]}" "$bin/pytest" "${timed[@]}" \
      -o cache_dir=.pytest_cache/other "$@"
    step other profiler "${high[@]}" "$bin/pytest" -m "not k8s and not e2e" tests/profiler \
      -o cache_dir=.pytest_cache/other "$@"
    after_the_shared_phase
    step other "second bed, one at a time" "${bed[@]}" "$bin/sps-testbed" run -- \
      "$bin/pytest" -m "realnode and not bed_shared" "${second_bed[@]}" \
      --durations=0 --durations-min=2 -o cache_dir=.pytest_cache/other "$@"
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
      "${second_bed[@]/#/--ignore=}" --durations=0 --durations-min=2 "$@"
    exit 0
    ;;
esac

# Before any bed starts, at once: a bed left running (a demo) and the host's inotify limits.
# The suite's beds start beside a running one when the limits leave room; else this says
# what runs, how to stop it and which limits to raise. Its peak: the bed lane's six nodes
# beside the demo's four and the network-policy bed's two (later the second bed's six).
"$bin/sps-testbed" preflight --beds 3 --nodes 12 || exit 1

mkdir -p "$logs"
rm -f "$logs"/other.* "$logs"/bed.* "$logs"/unit.* "$shared_done"
start=$SECONDS
# Each in its own session (process group), so that it can be ended as a whole.
setsid bash "$0" --other-lane "$@" > "$logs/other.log" 2>&1 &
other_pid=$!
setsid bash "$0" --unit-lane "$@" > "$logs/unit.log" 2>&1 &
unit_pid=$!
trap 'kill -TERM -- -$other_pid -$unit_pid 2>/dev/null' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "==== bed lane (the other lane's log: $logs/other.log)"
step bed "the bed" "${bed[@]}" "$bin/sps-testbed" run -- bash "$0" --on-the-bed "$@"
bed_seconds=$((SECONDS - start))
touch "$shared_done"  # even when the bed never got that far
wait "$other_pid" "$unit_pid"

echo
echo "==== the other lane (the demo, lint, control plane, profiler, a second bed): $logs/other.log"
cat "$logs/other.log"
echo
echo "==== the unit lane (unit and simulator tests): $logs/unit.log"
cat "$logs/unit.log"
echo
echo "==== bed lane done after $bed_seconds s, all lanes after $((SECONDS - start)) s"
failed=$(cat "$logs"/bed.failed "$logs"/other.failed "$logs"/unit.failed 2>/dev/null)
if [ -n "$failed" ]; then
  echo "==== FAILED: $(echo "$failed" | paste -sd ';' -)"
  exit 1
fi
echo "==== all passed"
