#!/usr/bin/env bash
# --stop-grace: a scheduler's SIGTERM reaches every rank while one of them is stopped (SIGSTOP,
# as a dead peer would hold it); the others block in a collective and never reach the step
# boundary where they would stop and save. Each must say, after the grace, that it got the
# signal and could not stop, and where it waits; and the job must end without --stall-timeout.
# Usage: test_stop_grace.sh ZOE_TRAIN MPIEXEC CORPUS
set -u
train="$1" mpiexec="$2" corpus="$3"
dir="$(mktemp -d)"; trap 'rm -rf "$dir"' EXIT
grace=3
marker="$dir/metrics.jsonl" # unique in the ranks' command lines: finds this test's processes
"$mpiexec" -np 4 --oversubscribe --bind-to none "$train" --model demo --tp 2 --data "$corpus" \
  --steps 100000 --micro-batch 2 --stop-grace "$grace" --progress lines --log-every 1000 \
  --metrics "$marker" >"$dir/out" 2>"$dir/err" &
job=$!
for _ in $(seq 300); do # wait for training to be under way: steps in the metrics
  [ -s "$marker" ] && [ "$(wc -l <"$marker")" -ge 3 ] && break
  sleep 0.2
done
ranks=($(pgrep -f -- "^$train .*--metrics $marker")) # the ranks, not mpirun
fails=0
[ "${#ranks[@]}" -eq 4 ] || { echo "FAIL: found ${#ranks[@]} rank processes, expected 4"; fails=1; }
victim="${ranks[1]:-}"
victim_rank="$(tr '\0' '\n' < "/proc/$victim/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')"
kill -STOP "$victim"
sleep 1 # the others block on it
for pid in "${ranks[@]}"; do [ "$pid" = "$victim" ] || kill -TERM "$pid"; done
for _ in $(seq 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.2; done # 60 s
if kill -0 "$job" 2>/dev/null; then
  echo "FAIL: the job still runs 60 s after SIGTERM"; fails=1
  kill -KILL "${ranks[@]}" "$job" 2>/dev/null
fi
wait "$job"; rc=$?
kill -KILL "$victim" 2>/dev/null
lines=$(grep -cE "^zoe: rank [0-9]+ \(tp [01], dp [01]\): Terminated, and no step completed in the [0-9]+ s since \(--stop-grace $grace\): [0-9]+ steps done, now at step [0-9]+, micro-batch [0-9]+, [a-z]" "$dir/err")
named=$(grep "^zoe: rank" "$dir/err" | grep -c "did not arrive: rank $victim_rank (silent")
grep "^zoe: rank" "$dir/err" | head -3
echo "exit $rc; $lines of the 3 signalled ranks said they could not stop, $named named rank $victim_rank"
if [ "$rc" -eq 0 ] || [ "$lines" -lt 3 ] || [ "$named" -lt 3 ]; then
  echo "FAIL: want a non-zero exit, and a line from each signalled rank naming the stopped one"
  fails=1
fi
grep -q "no step completed in [0-9]* s (--stall-timeout" "$dir/err" &&
  { echo "FAIL: a stall report without --stall-timeout"; fails=1; }
echo "test_stop_grace: $((1 - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
