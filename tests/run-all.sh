#!/usr/bin/env bash
# `make test`: every check and every test, in two lanes at once.
#
# bed lane (the longest; its output goes to the terminal as it comes): one real-node test
#   bed (`sps-testbed run`) and on it the tests that use it (marker `realnode`): first
#   those marked `bed_shared` in pytest-xdist workers (their own namespaces, an
#   operator in namespaces mode, a few GPUs or a pool of their own, no bound on time;
#   `--dist loadgroup`: the tests that fill the bed's third pool, one `xdist_group`, run
#   one after another on one worker; the longest handed out first, tests/bed_durations.py),
#   then every other one alone (those that load every node, taint a pool, run a
#   cluster-wide operator or bound a time, Kueue's, and every test not marked: alone is
#   the safe default). The whole bed (its control plane, kubelets, containerd and so
#   every container) runs at `nice -5`: the lane is the longest, and its shared phase
#   keeps both cores busy, so the demo's bed beside it yields to it.
# other lane (beside it; its output is kept in $SPS_TEST_LOGS/other.log and printed at
#   the end): the tests that start beds of their own (`e2e`, not `realnode`: the demo),
#   lint and types, the control-plane tests (`k8s`, no nodes), the profiler's tests
#   against a live simulator, the unit and simulator tests. Lint and the unit tests
#   run under `nice 10`, so that the beds keep the CPU they need; the control-plane and
#   profiler tests run above the bed lane's priority (`nice -10`), because they measure
#   real time (lease hand-over times; tables within 5-10 % of the simulator's truth,
#   which a starved simulator misses).
#
# Exits non-zero when any step of either lane fails. Arguments go to every pytest run
# (e.g. `-x`); PYTEST_ADDOPTS works too. SPS_TEST_WORKERS sets the number of workers for
# the shared tests (default 3; 0: one process).
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${SPS_TEST_BIN:-.venv/bin}
logs=${SPS_TEST_LOGS:-.test-logs}
workers=${SPS_TEST_WORKERS:-3}
low=(nice -n "${SPS_TEST_NICE:-10}")
bed=(nice -n -5)
high=(nice -n -10)

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

case "${1:-}" in
  --other-lane)
    shift
    # First: the beds of its own (the demo) start while the bed lane runs the tests that
    # bound no time; a second bed beside the first is fine.
    step other "beds of their own" "$bin/pytest" -m "e2e and not realnode" \
      -o cache_dir=.pytest_cache/other "$@"
    step other lint "${low[@]}" make --no-print-directory lint-checks
    # A cache directory of its own: two pytest processes share the checkout.
    step other control-plane "${high[@]}" "$bin/pytest" -m "k8s and not realnode and not e2e" \
      -o cache_dir=.pytest_cache/other "$@"
    step other profiler "${high[@]}" "$bin/pytest" -m "not k8s and not e2e" tests/profiler \
      -o cache_dir=.pytest_cache/other "$@"
    step other unit "${low[@]}" "$bin/pytest" -m "not k8s and not e2e" --ignore=tests/profiler \
      -o cache_dir=.pytest_cache/other "$@"
    exit 0
    ;;
  --on-the-bed)  # inside `sps-testbed run`, SPS_TESTBED_ATTACH set
    shift
    dist=(-n "$workers" --dist loadgroup)
    [ "$workers" -eq 0 ] && dist=()
    step bed "bed, shared" "$bin/pytest" "${dist[@]}" -m "realnode and bed_shared" \
      --durations=0 --durations-min=2 "$@"
    step bed "bed, one at a time" "$bin/pytest" -m "realnode and not bed_shared" \
      --durations=0 --durations-min=2 "$@"
    exit 0
    ;;
esac

mkdir -p "$logs"
rm -f "$logs"/other.* "$logs"/bed.*
start=$SECONDS
# Its own session (process group), so that it can be ended as a whole.
setsid bash "$0" --other-lane "$@" > "$logs/other.log" 2>&1 &
other_pid=$!
trap 'kill -TERM -- -$other_pid 2>/dev/null' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "==== bed lane (the other lane's log: $logs/other.log)"
step bed "the bed" "${bed[@]}" "$bin/sps-testbed" run -- bash "$0" --on-the-bed "$@"
bed_seconds=$((SECONDS - start))
wait "$other_pid"

echo
echo "==== the other lane (lint, control plane, unit, simulator, profiler): $logs/other.log"
cat "$logs/other.log"
echo
echo "==== bed lane done after $bed_seconds s, both lanes after $((SECONDS - start)) s"
failed=$(cat "$logs"/bed.failed "$logs"/other.failed 2>/dev/null)
if [ -n "$failed" ]; then
  echo "==== FAILED: $(echo "$failed" | paste -sd ';' -)"
  exit 1
fi
echo "==== all passed"
