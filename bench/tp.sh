#!/usr/bin/env bash
# scripts/bench tp [ARGS...]: one TP layer forward+backward at GPT-2-124M width, as 1 rank x 2
# threads and as 2 ranks x 1 thread (TP=2), same machine, same run; then a summary line with
# the ratio. ARGS go to bench_tp (--batch B --seq T --iters N).
set -euo pipefail
build="$1"; shift
bin="$build/bench/bench_tp"
mpi=(mpirun --oversubscribe --bind-to none)
if [ "$(id -u)" = 0 ]; then mpi+=(--allow-run-as-root); fi
one=$(OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 "${mpi[@]}" -np 1 "$bin" --label 1rank_x_2threads "$@")
two=$(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "${mpi[@]}" -np 2 "$bin" --label 2ranks_x_1thread_tp2 "$@")
echo "$one"
echo "$two"
field() { sed -E "s/.*\"$2\":([0-9.eE+-]+).*/\1/" <<<"$1"; }
l1=$(field "$one" layer_s); l2=$(field "$two" layer_s); share=$(field "$two" collective_share)
bytes=$(( $(field "$two" bytes_forward) + $(field "$two" bytes_backward) ))
awk -v l1="$l1" -v l2="$l2" -v s="$share" -v b="$bytes" 'BEGIN {
  printf "{\"bench\":\"tp\",\"summary\":true,\"layer_s_1rank_2threads\":%s,\"layer_s_tp2\":%s,", l1, l2
  printf "\"speedup_tp2_over_2threads\":%.3f,\"tp2_bytes_per_layer_step\":%d,\"tp2_collective_share\":%s}\n", l1 / l2, b, s
}'
