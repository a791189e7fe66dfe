#!/usr/bin/env bash
# --stall-timeout: one of 4 ranks is stopped (SIGSTOP) mid-run; the 3 live ranks must each
# report their step and position and name the stopped rank as the one that did not arrive, and
# the job must end (MPI_Abort) within a few timeouts instead of spinning forever. Usage: test_stall.sh ZOE_TRAIN MPIEXEC CORPUS
set -u
train="$1" mpiexec="$2" corpus="$3"
dir="$(mktemp -d)"; trap 'rm -rf "$dir"' EXIT
marker="$dir/metrics.jsonl" # unique in the ranks' command lines: finds this test's processes
"$mpiexec" -np 4 --oversubscribe --bind-to none "$train" --model demo --tp 2 --data "$corpus" \
  --steps 100000 --micro-batch 2 --stall-timeout 3 --progress lines --log-every 1000 \
  --metrics "$marker" >"$dir/out" 2>"$dir/err" &
job=$!
for _ in $(seq 100); do # wait for training to be under way: steps in the metrics
  [ -s "$marker" ] && [ "$(wc -l <"$marker")" -ge 3 ] && break
  sleep 0.2
done
ranks=($(pgrep -f -- "^$train .*--metrics $marker")) # the ranks, not mpirun
victim="${ranks[1]:-}"
fails=0
if [ "${#ranks[@]}" -ne 4 ]; then
  echo "FAIL: found ${#ranks[@]} rank processes, expected 4"; fails=1
fi
for pid in "${ranks[@]}"; do # the re-executed ranks keep their name (not "exe")
  name="$(cat "/proc/$pid/comm" 2>/dev/null)"
  [ "$name" = "zoe-train" ] || { echo "FAIL: rank process $pid is named '$name'"; fails=1; }
done
victim_rank="$(tr '\0' '\n' < "/proc/$victim/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')"
[ -n "$victim" ] && kill -STOP "$victim"
start=$SECONDS
for _ in $(seq 150); do kill -0 "$job" 2>/dev/null || break; sleep 0.2; done
took=$((SECONDS - start))
if kill -0 "$job" 2>/dev/null; then
  echo "FAIL: the job still runs 30 s after a rank stopped"; fails=1
  kill -CONT "$victim"; kill "$job"
fi
wait "$job"; rc=$?
[ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null
reports=$(grep -c "no step completed in" "$dir/err")
positions=$(grep -cE "now at step [0-9]+, micro-batch [0-9]+, (forward|backward|optimizer step|between)" "$dir/err")
echo "job ended ${took} s after the stop, exit $rc, $reports reports"
grep "no step completed" "$dir/err" | head -4
# Open MPI sends SIGCONT before it kills, so the stopped rank may report too once it resumes.
if [ "$rc" -eq 0 ] || [ "$reports" -lt 3 ] || [ "$positions" -ne "$reports" ]; then
  echo "FAIL: want a non-zero exit and a report with its position from each live rank"; fails=1
fi
# each live rank names the stopped one (the same node): it did not arrive, its heartbeat stopped
named=$(grep "no step completed in" "$dir/err" | grep -v "^zoe: rank $victim_rank " |
  grep -c "did not arrive: rank $victim_rank (silent")
live=$(grep "no step completed in" "$dir/err" | grep -vc "^zoe: rank $victim_rank ")
if [ -z "$victim_rank" ] || [ "$live" -lt 3 ] || [ "$named" -ne "$live" ]; then
  echo "FAIL: $named of $live live ranks' reports name the stopped rank ${victim_rank:-?}"; fails=1
fi
echo "test_stall: $((1 - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
