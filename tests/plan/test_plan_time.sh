#!/usr/bin/env bash
# Explained in docs/plan.md, "Time: a model with stated figures".
# The CPU backend's time model against zoe-train's measured steps: the demo model at 1, 2 and 4
# ranks on this machine (oversubscribed where ranks outnumber its cores). Two checks, each with
# its tolerance:
# - the shape: the predicted step grows with the ranks, and how much slower a step gets from 1
#   rank to NP ranks, predicted against measured, is within a factor of 3. The probe's error
#   cancels in this ratio; what is left is the model of ranks sharing the cores, which the plan
#   before it did not have (it predicted 0.5x to 1.3x where 4 ranks on 2 cores measured 2.9x
#   and more). Not tighter: other jobs on a shared VM slow many ranks more than one (4 ranks
#   over 1 measured from 2.9x to 10.5x across runs, against 4.1x to 4.4x predicted).
# - the level: each predicted step within a factor of 5 of the measured one. The matmul probe on
#   a VM whose cores other jobs share varies by 2x from run to run (39 to 85 ms predicted for the
#   same demo step), and the demo's small matmuls run at a different share of it than a
#   gpt2-124m step's 0.70: in CI's build the plan predicted 2.0-2.3x the measured step at 1
#   rank and 3.1-3.5x at 2, every attempt (the shape within 1.6x). The level is the probe's
#   error more than the model's; the shape is the model's.
# Arguments: zoe-plan, zoe-train, mpiexec, a data file. Each run is 12 steps of the demo; the
# median step after the first 3 (warm-up) is the measured one. The test runs alone (RUN_SERIAL),
# and a burst of load on the VM can still spoil one measurement: the whole comparison is made
# up to 3 times and passes when one attempt passes. A wrong model fails every attempt (the plan
# before it missed the shape by 4x to 8x each time).
set -u
plan="$1" train="$2" mpiexec="$3" data="$4"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
attempt() {
fails=0
declare -A predicted measured
for np in 1 2 4; do
    json="$("$plan" --model demo --dp "$np" --json)" || { echo "FAIL zoe-plan at dp=$np"; exit 1; }
    predicted[$np]="$(grep -o '"step_seconds":{[^}]*}' <<<"$json" | grep -o '"step":[0-9.eE+-]*' |
        cut -d: -f2)"
    "$mpiexec" -np "$np" --oversubscribe "$train" --model demo --data "$data" --steps 12 \
        --warmup 0 --progress lines --metrics "$work/m$np.jsonl" >"$work/t$np.log" 2>&1 ||
        { echo "FAIL zoe-train at np=$np:"; tail -5 "$work/t$np.log"; exit 1; }
    measured[$np]="$(tail -n +4 "$work/m$np.jsonl" | grep -o '"ms":[0-9.]*' | cut -d: -f2 |
        sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)] / 1000}')"
    echo "np $np: predicted ${predicted[$np]} s, measured ${measured[$np]} s per step"
done
within() { # within A B FACTOR: A/B in [1/FACTOR, FACTOR]
    awk -v a="$1" -v b="$2" -v f="$3" 'BEGIN {r = a / b; exit !(r >= 1 / f && r <= f)}'
}
for np in 1 2 4; do
    if ! within "${predicted[$np]}" "${measured[$np]}" 5; then
        echo "FAIL level at np=$np: predicted ${predicted[$np]} s, measured ${measured[$np]} s"
        fails=$((fails + 1))
    fi
done
for np in 2 4; do
    if ! awk -v a="${predicted[$np]}" -v b="${predicted[$((np / 2))]}" 'BEGIN {exit !(a > b)}'; then
        echo "FAIL order: predicted ${predicted[$np]} s at np=$np, not above np=$((np / 2))"
        fails=$((fails + 1))
    fi
    p="$(awk -v a="${predicted[$np]}" -v b="${predicted[1]}" 'BEGIN {print a / b}')"
    m="$(awk -v a="${measured[$np]}" -v b="${measured[1]}" 'BEGIN {print a / b}')"
    echo "np $np over np 1: predicted ${p}x, measured ${m}x"
    if ! within "$p" "$m" 3; then
        echo "FAIL shape at np=$np: predicted ${p}x slower than 1 rank, measured ${m}x"
        fails=$((fails + 1))
    fi
done
return $((fails > 0))
}
for try in 1 2 3; do
    if attempt; then
        echo "test_plan_time: all passed (attempt $try)"
        exit 0
    fi
    echo "test_plan_time: attempt $try: $fails failed"
done
exit 1
