#!/usr/bin/env bash
# scripts/bench dpu [OPTIONS]: what the delayed parameter update costs in loss, per schedule
# (docs/offload.md, "Delayed parameter update"). Trains zoe-train on the demo corpus (1 rank,
# 2 threads) for each row of issue 15's table, DPU off with every seed (the seed spread) and DPU
# on with each schedule at the first seed, and prints one JSON object per run: the mean loss of
# the last 50 steps, the final loss, and the worst spike after the switch (the largest excess of
# a step's loss over the DPU-off run's at the same step and seed), the share of steps after the
# switch whose update overlapped (exact: whose speculation held) or was redone, and the mean step
# and optimizer-call times after it; then one summary per row (the
# gap of each schedule's last-50 mean to the DPU-off run's at the same seed, against the spread)
# and a last summary line.
# Options (a subset runs faster): --rows A,B (names below, or all) --variants off,exact,plain,predict,dc
# --steps N (instead of the row's; the last-50 window stays) --seeds S1,S2,S3 --threads T
# --kappa K (dc) --predict-scale S (predict) --out DIR (metrics files, kept; default a temporary directory)
# --state NAME: the host's optimizer state dtypes for every run (docs/offload.md, "Compressed
# state"): fp32 (the default), bf16 (master, m and v), bf16-moments (m and v), bf16-master,
# int8 (a bf16 master, int8 m and v), int8-moments (int8 m and v).
set -euo pipefail
build="$1"; shift
train="$build/tools/zoe-train/zoe-train"
root="$(cd "$(dirname "$0")/.." && pwd)"
corpus="$root/data/demo-corpus.txt"

# name: zoe-train arguments (model, lr, lr warm-up, DPU warm-up, steps); min-lr is lr / 10.
declare -A row_args=(
  [demo-2e-4]="--model demo --lr 2e-4 --min-lr 2e-5 --warmup 30 --dpu-warmup 40 --steps 600"
  [demo-6e-4]="--model demo --lr 6e-4 --min-lr 6e-5 --warmup 30 --dpu-warmup 40 --steps 600"
  [demo-3e-3]="--model demo --lr 3e-3 --min-lr 3e-4 --warmup 30 --dpu-warmup 40 --steps 600"
  [demo-3e-3-late]="--model demo --lr 3e-3 --min-lr 3e-4 --warmup 200 --dpu-warmup 200 --steps 600"
  [l6h384-6e-4]="--model demo --layers 6 --hidden 384 --heads 6 --seq-len 128 --lr 6e-4 --min-lr 6e-5 --warmup 40 --dpu-warmup 40 --steps 400"
  [l6h384-2e-3]="--model demo --layers 6 --hidden 384 --heads 6 --seq-len 128 --lr 2e-3 --min-lr 2e-4 --warmup 40 --dpu-warmup 40 --steps 400"
)
all_rows="demo-2e-4,demo-6e-4,demo-3e-3,demo-3e-3-late,l6h384-6e-4,l6h384-2e-3"
rows="$all_rows" variants="off,exact,plain,predict,dc" steps="" seeds="1234,1,2" threads=2 kappa="" scale=""
state=fp32
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) rows="$2"; [ "$rows" = all ] && rows="$all_rows"; shift 2 ;;
    --variants) variants="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --seeds) seeds="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --kappa) kappa="$2"; shift 2 ;;
    --predict-scale) scale="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --state) state="$2"; shift 2 ;;
    *) echo "bench dpu: unknown option '$1'" >&2; exit 2 ;;
  esac
done
for r in ${rows//,/ }; do
  [ -n "${row_args[$r]:-}" ] || { echo "bench dpu: no row '$r' (rows: $all_rows)" >&2; exit 2; }
done
for v in ${variants//,/ }; do
  case "$v" in off|exact|plain|predict|dc) ;; *) echo "bench dpu: no variant '$v'" >&2; exit 2 ;; esac
done
case "$state" in
  fp32) state_args=() ;;
  bf16) state_args=(--main-params-dtype bf16 --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16) ;;
  bf16-moments) state_args=(--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16) ;;
  bf16-master) state_args=(--main-params-dtype bf16) ;;
  int8) state_args=(--main-params-dtype bf16 --exp-avg-dtype int8 --exp-avg-sq-dtype int8) ;;
  int8-moments) state_args=(--exp-avg-dtype int8 --exp-avg-sq-dtype int8) ;;
  *) echo "bench dpu: no state '$state' (fp32, bf16, bf16-moments, bf16-master, int8, int8-moments)" >&2; exit 2 ;;
esac
if [ -z "$out" ]; then out="$(mktemp -d)"; trap 'rm -rf "$out"' EXIT; fi
mkdir -p "$out"
first_seed="${seeds%%,*}"

# One run: prints the metrics file's path when done.
run() { # row variant seed
  local row="$1" variant="$2" seed="$3" file="$out/$1.$2.$3.jsonl" extra=()
  if [ "$variant" = off ]; then extra=(--dpu off); else extra=(--dpu on --dpu-schedule "$variant"); fi
  local args="${row_args[$row]}"
  # each option once: --steps given here replaces the row's
  [ -n "$steps" ] && args="$(sed -E 's/--steps [0-9]+//' <<<"$args")" && extra+=(--steps "$steps")
  [ -n "$kappa" ] && extra+=(--dpu-dc-kappa "$kappa")
  [ -n "$scale" ] && extra+=(--dpu-predict-scale "$scale")
  extra+=(${state_args[@]+"${state_args[@]}"})
  # shellcheck disable=SC2086 # the row's arguments are words
  OMP_NUM_THREADS="$threads" "$train" $args --micro-batch 8 --data "$corpus" \
    --seed "$seed" --log-every 100000 --progress lines --metrics "$file" "${extra[@]}" \
    >"$file.log" 2>&1 || { echo "bench dpu: $row $variant seed $seed failed:" >&2; tail -3 "$file.log" >&2; exit 1; }
  echo "$file"
}

analyse() { # row variant seed metrics reference-metrics dpu-warmup seconds state
  python3 - "$@" <<'PY'
import json, sys
row, variant, seed, path, ref, warm, secs, state = sys.argv[1:]
def lines(p):
    with open(p) as f:
        return [json.loads(l) for l in f if l.strip()]
m, n = lines(path), int(warm)
l, r = [x["loss"] for x in m], [x["loss"] for x in lines(ref)]
spike = max((a - b for a, b in zip(l[n:], r[n:])), default=0.0) if path != ref else 0.0
after = m[n:] or m
share = lambda key: round(sum(x.get(key, 0) for x in after) / len(after), 3)
mean = lambda key: round(sum(x[key] for x in after) / len(after), 2)
print(json.dumps({"bench": "dpu", "row": row, "variant": variant, "seed": int(seed), "state": state,
                  "steps": len(l), "last50_mean": round(sum(l[-50:]) / len(l[-50:]), 4),
                  "final_loss": round(l[-1], 4), "worst_spike_after_switch": round(spike, 4),
                  # after the switch: steps whose update overlapped (exact: held), redone ones,
                  # and the mean step and optimizer-call (the wait) times
                  "overlapped_share": share("overlapped"), "redone_share": share("redone"),
                  "ms_step": mean("ms"), "ms_optimizer": mean("ms_optimizer"),
                  "seconds": float(secs)}))
PY
}

results="$out/results.jsonl"
: >"$results"
for row in ${rows//,/ }; do
  warm=$(sed -E 's/.*--dpu-warmup ([0-9]+).*/\1/' <<<"${row_args[$row]}")
  for v in ${variants//,/ }; do
    for seed in ${seeds//,/ }; do
      [ "$v" != off ] && [ "$seed" != "$first_seed" ] && continue
      t0=$(date +%s.%N)
      file=$(run "$row" "$v" "$seed")
      secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
      ref="$out/$row.off.$seed.jsonl"
      [ -e "$ref" ] || ref="$file"
      analyse "$row" "$v" "$seed" "$file" "$ref" "$warm" "$secs" "$state" | tee -a "$results"
    done
  done
done
python3 - "$results" "$first_seed" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
first = int(sys.argv[2])
worst = {}
for row in dict.fromkeys(r["row"] for r in runs):
    mine = [r for r in runs if r["row"] == row]
    off = [r["last50_mean"] for r in mine if r["variant"] == "off"]
    base = [r["last50_mean"] for r in mine if r["variant"] == "off" and r["seed"] == first]
    out = {"bench": "dpu", "summary": "row", "row": row,
           "off_seed_spread": round(max(off) - min(off), 4) if off else None}
    for r in mine:
        if r["variant"] != "off" and base:
            gap = round(r["last50_mean"] - base[0], 4)
            out["gap_" + r["variant"]] = gap
            worst[r["variant"]] = max(worst.get(r["variant"], gap), gap)
    print(json.dumps(out))
print(json.dumps({"bench": "dpu", "summary": True, "rows": len(set(r["row"] for r in runs)),
                  "goal_gap": 0.05, "worst_gap": worst}))
PY
