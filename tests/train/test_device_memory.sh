#!/usr/bin/env bash
# zoe-train --device-memory. The demo's metrics report device_peak_bytes on every step (> 0, and
# never falling: a peak since the start); a cap far below the plan's device figure is refused
# before anything is allocated (exit 2, one line naming the cap); with --no-plan-check a cap one
# byte below the peak is refused by the device allocator, naming the allocation; a cap of
# exactly the peak trains, and no step's peak passes it. At 1 and 2 ranks.
# Usage: test_device_memory.sh ZOE_TRAIN MPIEXEC CORPUS
set -u
train="$1" mpiexec="$2" corpus="$3"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fails=0 peak_np1=1
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
run() { # ranks, args...: zoe-train's exit status; its stdout and stderr in $tmp/out
  local np="$1"; shift
  "$mpiexec" -np "$np" --oversubscribe --bind-to none "$train" --data "$corpus" --model demo \
    --steps 3 --dpu-warmup 0 --progress lines "$@" >"$tmp/out" 2>&1
}
# The peaks of a metrics file, one a line; fails the test when a line has none.
peaks() {
  local n p
  n="$(grep -c . "$1")"
  p="$(grep -o '"device_peak_bytes":[0-9]*' "$1" | cut -d: -f2)"
  [ "$(printf '%s\n' "$p" | grep -c .)" -eq "$n" ] && [ "$n" -eq 3 ] || fail "$1: $n lines, peaks '$p'"
  printf '%s\n' "$p"
}

for np in 1 2; do
  run "$np" --metrics "$tmp/free.jsonl" || { fail "np $np: the uncapped run failed"; cat "$tmp/out"; continue; }
  peak=0
  for p in $(peaks "$tmp/free.jsonl"); do
    [ "$p" -gt 0 ] && [ "$p" -ge "$peak" ] || fail "np $np: peaks $(peaks "$tmp/free.jsonl" | tr '\n' ' ') are not positive and rising"
    peak="$p"
  done
  [ "$np" -eq 1 ] && peak_np1="$peak"
  grep -q "device peak [0-9.]* MiB" "$tmp/out" || fail "np $np: the progress line shows no device peak"

  run "$np" --device-memory 1MiB --metrics "$tmp/small.jsonl"
  rc=$?
  err="$(grep '^zoe-train:' "$tmp/out" | grep -v '^zoe-train: plan on')"
  [ "$rc" -eq 2 ] && [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] &&
    [[ "$err" == *"does not fit --device-memory=1.0 MiB (1048576 bytes): the plan needs"* ]] ||
    fail "np $np: --device-memory 1MiB: exit $rc, '$err'"
  [ ! -e "$tmp/small.jsonl" ] || fail "np $np: a refused run wrote metrics"

  run "$np" --device-memory "$peak" --metrics "$tmp/capped.jsonl" ||
    { fail "np $np: --device-memory $peak (the uncapped peak) failed"; cat "$tmp/out"; continue; }
  for p in $(peaks "$tmp/capped.jsonl"); do
    [ "$p" -gt 0 ] && [ "$p" -le "$peak" ] || fail "np $np: capped at $peak, a step's peak is $p"
  done
done

# The allocator's own refusal (one rank: a refusal on one of several ranks leaves the others
# waiting in a collective).
below=$((peak_np1 - 1))
run 1 --device-memory "$below" --no-plan-check
rc=$?
[ "$rc" -ne 0 ] && grep -q "device memory cap [0-9.]* [KMG]iB ($below bytes): allocating .* for .* would need" "$tmp/out" ||
  { fail "--device-memory $below --no-plan-check: exit $rc"; cat "$tmp/out"; }

[ "$fails" -eq 0 ] && echo "test_device_memory: all cases passed"
exit $((fails > 0))
