#!/usr/bin/env bash
# Streamed weights bound the model by host memory, not the device (docs/offload.md, "Streamed
# weights"): a 24-layer GPT (hidden 512, 75.9M parameters: 289 MiB of fp32 weights) trains under
# --device-memory 72MiB with --offload-params cpu, its weights 4.0 times the cap, and no step's
# device_peak_bytes passes the cap; the plan's device figure is within 10% of the peak; the same
# run with resident weights is refused by the plan (exit 2, naming the cap). At 1 and 2 ranks
# (DP 2: each rank's host holds half the weights, and the gather's staging joins the ring).
# Usage: test_stream_memory.sh ZOE_TRAIN MPIEXEC CORPUS
set -u
train="$1" mpiexec="$2" corpus="$3"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
cap=$((72 << 20))
weights=$((75857920 * 4)) # the parameters zoe-train prints, in fp32
[ "$weights" -ge $((4 * cap)) ] || fail "the weights ($weights bytes) are not 4x the cap"
run() { # ranks, cap, args...
  local np="$1" c="$2"; shift 2
  "$mpiexec" -np "$np" --oversubscribe --bind-to none "$train" --data "$corpus" --model demo \
    --layers 24 --hidden 512 --heads 8 --seq-len 16 --micro-batch 1 --bucket-mb 1 --steps 2 \
    --progress lines --device-memory "$c" "$@" >"$tmp/out" 2>&1
}
for np in 1 2; do
  run "$np" "$cap" --offload-params cpu --metrics "$tmp/m$np.jsonl"
  rc=$?
  [ "$rc" -eq 0 ] || { fail "np $np streamed: exit $rc: $(tail -3 "$tmp/out")"; continue; }
  grep -q "75.86M parameters" "$tmp/out" || fail "np $np: the model is not the one sized here: $(head -2 "$tmp/out")"
  peaks="$(grep -o '"device_peak_bytes":[0-9]*' "$tmp/m$np.jsonl" | cut -d: -f2)"
  [ "$(printf '%s\n' "$peaks" | grep -c .)" -eq 2 ] || fail "np $np: peaks '$peaks'"
  for p in $peaks; do
    [ "$p" -gt 0 ] && [ "$p" -le "$cap" ] || fail "np $np: device peak $p bytes, cap $cap"
  done
  # the plan's figure: a cap below it is refused, naming what the plan needs
  run "$np" $((cap / 4)) --offload-params cpu
  need="$(sed -n 's/.*the plan needs [0-9.]* MiB (\([0-9]*\) bytes).*/\1/p' "$tmp/out" | head -1)"
  last="$(printf '%s\n' "$peaks" | tail -1)"
  if [ -z "$need" ]; then
    fail "np $np: no plan figure in '$(head -3 "$tmp/out")'"
  elif [ $((need * 10)) -gt $((last * 11)) ] || [ $((need * 10)) -lt $((last * 9)) ]; then
    fail "np $np: the plan's $need bytes are not within 10% of the peak's $last"
  fi
  run "$np" "$cap" --offload-params none
  rc=$?
  [ "$rc" -eq 2 ] && grep -q "does not fit --device-memory" "$tmp/out" ||
    fail "np $np resident: exit $rc, '$(head -3 "$tmp/out")' (want the plan's refusal)"
done
echo "test_stream_memory: $fails failed"
[ "$fails" -eq 0 ]
