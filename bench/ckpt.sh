#!/usr/bin/env bash
# scripts/bench ckpt [MODEL] [TP] [DIR]: bench_ckpt on ZOE_BENCH_RANKS (4) MPI ranks; the
# default model is gpt2-350m at TP=2 x DP=2 (the figure). The checkpoint is removed after.
set -euo pipefail
build=$1
shift
ranks="${ZOE_BENCH_RANKS:-4}"
dir="${3:-/tmp/zoe-bench-ckpt}"
mpirun -np "$ranks" --oversubscribe --bind-to none -x OMP_WAIT_POLICY "$build/bench/bench_ckpt" "$@"
rm -rf "$dir"
