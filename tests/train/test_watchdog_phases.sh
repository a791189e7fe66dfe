#!/usr/bin/env bash
# Where a stalled rank waits, by name: rank 0 of 2 in zoe-train's stop-signal all-reduce or in a
# save, while rank 1 is in the caller's own code (zoe_trainer_caller_phase). Each watchdog must
# name its rank's place. Usage: test_watchdog_phases.sh HELPER MPIEXEC
set -u
helper="$1" mpiexec="$2"
dir="$(mktemp -d)"; trap 'rm -rf "$dir"' EXIT
fails=0
check() { # mode, what rank 0 must be waiting in
  local mode="$1" want="$2"
  "$mpiexec" -np 2 --oversubscribe --bind-to none "$helper" $mode >"$dir/out" 2>"$dir/err"
  local rc=$?
  local zero one
  zero="$(grep "^zoe: rank 0 (tp 0, dp 0): no step completed" "$dir/err")"
  one="$(grep "^zoe: rank 1 (tp 0, dp 1): no step completed" "$dir/err")"
  echo "$mode: exit $rc"; echo "$zero"; echo "$one"
  if [ "$rc" -eq 0 ] || [[ "$zero" != *"1 steps done, now at step 2, micro-batch 0, $want;"* ]] ||
     [[ "$one" != *"now at step 2, micro-batch 0, between zoe calls (the caller's code: sleeping in the test's own code);"* ]]; then
    echo "FAIL: $mode: want rank 0 in '$want' and rank 1 in its caller's phase; stderr:"
    cat "$dir/err"
    fails=$((fails + 1))
  fi
}
check stop "the all-reduce that agrees on a stop signal after a step"
check "save $dir/ckpt" "saving a checkpoint"
echo "test_watchdog_phases: $((2 - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
