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
#   cluster-wide operator or bound a time, Kueue's, and every test not marked: alone is
#   the safe default), except those marked `second_bed`.
# other lane (beside it; its log: $SPS_TEST_LOGS/other.log, printed at the end): the tests
#   that start beds of their own (`e2e`, not `realnode`: the demo), then a second bed
#   (`sps-testbed run`, the demo's four nodes) for the tests marked `second_bed` (they
#   need a bed alone, a cluster-wide operator or tainted nodes, but bound no time), the
#   control-plane tests (`k8s`, no nodes), the profiler's tests against a live simulator.
#   The control-plane and profiler tests run above the beds' priority, because they
#   measure real time (lease hand-over times; tables within 5-10 % of the simulator's
#   truth, which a starved simulator misses).
# checks lane (beside both; its log: $SPS_TEST_LOGS/checks.log): lint and types, the unit
#   and simulator tests, under `nice`, so that the beds keep the CPU they need: they wait
#   on Kubernetes much of the time, and these take what is left.
#
# Exits non-zero when any step of any lane fails. Arguments go to every pytest run
# (e.g. `-x`); PYTEST_ADDOPTS works too. SPS_TEST_WORKERS sets the number of workers for
# the shared tests (default 3; 0: one process).
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${SPS_TEST_BIN:-.venv/bin}
logs=${SPS_TEST_LOGS:-.test-logs}
workers=${SPS_TEST_WORKERS:-3}
low=(nice -n "${SPS_TEST_NICE:-10}")
high=(nice -n -5)
# The second bed's nodes: the demo's (sps_testbed.DEFAULT_NODES), two H100 and two H200.
second_bed_nodes=(--node gpu-h100-0=NVIDIA-H100-80GB-HBM3 --node gpu-h100-1=NVIDIA-H100-80GB-HBM3
  --node gpu-h200-0=NVIDIA-H200 --node gpu-h200-1=NVIDIA-H200)

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
    # A cache directory of its own: several pytest processes share the checkout.
    step other "second bed" "$bin/sps-testbed" run "${second_bed_nodes[@]}" -- \
      "$bin/pytest" -m "realnode and second_bed" --durations=0 --durations-min=2 \
      -o cache_dir=.pytest_cache/other "$@"
    step other control-plane "${high[@]}" "$bin/pytest" -m "k8s and not realnode and not e2e" \
      -o cache_dir=.pytest_cache/other "$@"
    step other profiler "${high[@]}" "$bin/pytest" -m "not k8s and not e2e" tests/profiler \
      -o cache_dir=.pytest_cache/other "$@"
    exit 0
    ;;
  --checks-lane)
    shift
    step checks lint "${low[@]}" make --no-print-directory lint-checks
    step checks unit "${low[@]}" "$bin/pytest" -m "not k8s and not e2e" --ignore=tests/profiler \
      -o cache_dir=.pytest_cache/checks "$@"
    exit 0
    ;;
  --on-the-bed)  # inside `sps-testbed run`, SPS_TESTBED_ATTACH set
    shift
    dist=(-n "$workers" --dist loadgroup)
    [ "$workers" -eq 0 ] && dist=()
    step bed "bed, shared" "$bin/pytest" "${dist[@]}" -m "realnode and bed_shared" \
      --durations=0 --durations-min=2 "$@"
    step bed "bed, one at a time" "$bin/pytest" -m "realnode and not bed_shared and not second_bed" \
      --durations=0 --durations-min=2 "$@"
    exit 0
    ;;
esac

mkdir -p "$logs"
rm -f "$logs"/other.* "$logs"/bed.* "$logs"/checks.*
start=$SECONDS
# Each in its own session (process group), so that it can be ended as a whole.
setsid bash "$0" --other-lane "$@" > "$logs/other.log" 2>&1 &
other_pid=$!
setsid bash "$0" --checks-lane "$@" > "$logs/checks.log" 2>&1 &
checks_pid=$!
trap 'kill -TERM -- -$other_pid -$checks_pid 2>/dev/null' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "==== bed lane (the other lane's log: $logs/other.log)"
step bed "the bed" "$bin/sps-testbed" run -- bash "$0" --on-the-bed "$@"
bed_seconds=$((SECONDS - start))
wait "$other_pid" "$checks_pid"

echo
echo "==== the other lane (the demo, a second bed, control plane, profiler): $logs/other.log"
cat "$logs/other.log"
echo
echo "==== the checks lane (lint, unit, simulator): $logs/checks.log"
cat "$logs/checks.log"
echo
echo "==== bed lane done after $bed_seconds s, all lanes after $((SECONDS - start)) s"
failed=$(cat "$logs"/bed.failed "$logs"/other.failed "$logs"/checks.failed 2>/dev/null)
if [ -n "$failed" ]; then
  echo "==== FAILED: $(echo "$failed" | paste -sd ';' -)"
  exit 1
fi
echo "==== all passed"
