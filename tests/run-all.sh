#!/usr/bin/env bash
# `make test`: every check and every test, in two lanes at once.
#
#   bed lane    the tests on a real-node test bed (markers `realnode`, `e2e`): the longest
#               lane, and mostly waiting on kubelets, pods and the simulator, so it leaves
#               CPU idle; its output goes to the terminal as it comes.
#   other lane  beside it: lint and types, the control-plane tests (`k8s`, no nodes), then
#               the CPU-bound unit, simulator and profiler tests. Lint and the CPU-bound
#               tests run under `nice` so that the bed's pods keep the CPU they need; the
#               control-plane tests do not (their leader-election timings want a fair share).
#               Its output is kept in $SPS_TEST_LOGS/other.log and printed after the bed
#               lane's.
#
# Exits non-zero when any step of either lane fails. Arguments go to both pytest runs of
# tests (e.g. `-x`, `--durations=20`); PYTEST_ADDOPTS works too.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${SPS_TEST_BIN:-.venv/bin}
logs=${SPS_TEST_LOGS:-.test-logs}
nice_other=(nice -n "${SPS_TEST_NICE:-10}")

other_lane() {
  local failed=0
  step() {  # name command...
    local name=$1 started=$SECONDS rc=0
    shift
    echo "==== $name: $*"
    "$@" || rc=$?
    if [ "$rc" -ne 0 ]; then
      failed=1
      echo "$name" >> "$logs/other.failed"
    fi
    echo "==== $name: exit $rc after $((SECONDS - started)) s"
  }
  step lint "${nice_other[@]}" make --no-print-directory lint-checks
  # A cache directory of its own: two pytest processes share the checkout.
  step control-plane "$bin/pytest" -m "k8s and not realnode and not e2e" \
    -o cache_dir=.pytest_cache/other "$@"
  step unit "${nice_other[@]}" "$bin/pytest" -m "not k8s and not e2e" \
    -o cache_dir=.pytest_cache/other "$@"
  return $failed
}

if [ "${1:-}" = "--other-lane" ]; then
  shift
  other_lane "$@"
  exit
fi

mkdir -p "$logs"
rm -f "$logs"/other.*
start=$SECONDS
# Its own session (process group), so that it can be ended as a whole.
setsid bash "$0" --other-lane "$@" > "$logs/other.log" 2>&1 &
other_pid=$!
trap 'kill -TERM -- -$other_pid 2>/dev/null' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "==== bed lane: $bin/pytest -m 'realnode or e2e' $*  (the other lane: $logs/other.log)"
"$bin/pytest" -m "realnode or e2e" "$@"
bed_rc=$?
bed_seconds=$((SECONDS - start))
wait "$other_pid"
other_rc=$?

echo
echo "==== the other lane (lint, control plane, unit, simulator, profiler): $logs/other.log"
cat "$logs/other.log"
echo
echo "==== bed lane: exit $bed_rc after $bed_seconds s; other lane: exit $other_rc; " \
  "both done after $((SECONDS - start)) s"
if [ -s "$logs/other.failed" ]; then
  echo "==== failed in the other lane: $(tr '\n' ' ' < "$logs/other.failed")"
fi
[ "$bed_rc" -eq 0 ] && [ "$other_rc" -eq 0 ]
