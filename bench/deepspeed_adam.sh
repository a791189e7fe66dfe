#!/usr/bin/env bash
# scripts/bench deepspeed_adam [N] [REPS]: zoe's host Adam over bf16 state against DeepSpeed's CPU
# Adam with bf16 optimizer states, on this machine, in one run (docs/offload.md, "Against
# DeepSpeed's CPU Adam"). N parameters (default 16777216), REPS steps per measurement (default
# 15, 2..999), at 1 and 2 threads.
#
# DeepSpeed comes from PyPI as a source distribution (pip download, pinned below, cached in
# $build/deepspeed); its csrc/adam/cpu_adam_impl.cpp is compiled as DeepSpeed's CPU op builder
# compiles it (-O3 -march=native -fopenmp and the SIMD macro it picks from the CPU flags:
# __AVX512__ with avx512f, else __AVX256__ with avx2), but against bench/deepspeed_adam/torch/
# extension.h, a few torch/c10 names written for zoe, instead of libtorch; DeepSpeed's Python
# setup does not run. bench/deepspeed_adam/harness.cpp calls its ds_adam_step as
# DeepSpeedCPUAdam.step does. Nothing of DeepSpeed is kept in the repository.
#
# What each side moves per parameter and step:
#   zoe        bench_cpu_adam --mode bf16_state: bf16 master, m and v read and written, the fp32
#              gradient read, the bf16 weights written: 18 bytes. Stochastic rounding.
#   deepspeed  bf16 parameters, bf16 exp_avg and exp_avg_sq (DeepSpeedCPUAdam with
#              fp32_optimizer_states=False): its kernel gives the gradient the parameters' type,
#              so the gradient is bf16 too (an fp32 gradient with bf16 parameters is not one of
#              its combinations), and the parameters are the weights (no copy out): 14 bytes.
#              Round to nearest even.
# The two run in two rounds, zoe first in the first and last in the second; each figure is the
# geometric mean of the two rounds' medians of REPS steps. One JSON line per implementation and
# thread count (ns per parameter, GB/s at its own bytes, zoe over DeepSpeed), then a summary.
# Exit 2 on bad arguments, or when DeepSpeed's source cannot be fetched or built (the message
# names what is missing).
set -euo pipefail
build="$1"; shift
root="$(cd "$(dirname "$0")/.." && pwd)"
ds_version=0.19.8

usage() { echo "usage: scripts/bench deepspeed_adam [N > 0] [REPS in 2..999]" >&2; exit 2; }
[ $# -le 2 ] || usage
n="${1:-16777216}"
reps="${2:-15}"
[[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -gt 0 ] || usage
[[ "$reps" =~ ^[0-9]+$ ]] && [ "$reps" -ge 2 ] && [ "$reps" -le 999 ] || usage

fail() { echo "bench deepspeed_adam: $*" >&2; exit 2; }
# As scripts/bench sets it: idle OpenMP workers sleep (and are not counted in CPU time).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

zoe_bench="$build/bench/bench_cpu_adam"
[ -x "$zoe_bench" ] || fail "no $zoe_bench (scripts/bench builds it)"

# DeepSpeed's sdist, downloaded once.
cache="$build/deepspeed"
sdist="$cache/deepspeed-$ds_version.tar.gz"
src="$cache/deepspeed-$ds_version"
mkdir -p "$cache"
if [ ! -f "$sdist" ]; then
  py=""
  for p in "$build/venv/bin/python" python3; do
    if "$p" -m pip --version >/dev/null 2>&1; then py="$p"; break; fi
  done
  [ -n "$py" ] || fail "no pip to fetch DeepSpeed with (tried $build/venv/bin/python, python3)"
  echo "bench deepspeed_adam: fetching deepspeed==$ds_version (sdist) from PyPI" >&2
  tmp="$(mktemp -d "$cache/download.XXXXXX")"
  if ! "$py" -m pip download --no-deps --no-binary :all: "deepspeed==$ds_version" -d "$tmp" \
      >"$tmp/pip.log" 2>&1; then
    tail -5 "$tmp/pip.log" >&2
    rm -rf "$tmp"
    fail "pip download --no-deps --no-binary :all: deepspeed==$ds_version failed (PyPI unreachable?)"
  fi
  [ -f "$tmp/deepspeed-$ds_version.tar.gz" ] || { rm -rf "$tmp"; fail "pip gave no deepspeed-$ds_version.tar.gz"; }
  mv "$tmp/deepspeed-$ds_version.tar.gz" "$sdist"
  rm -rf "$tmp"
fi
needed=(csrc/adam/cpu_adam_impl.cpp csrc/includes/cpu_adam.h csrc/includes/simd.h
        csrc/includes/sve.h)
if [ ! -f "$src/${needed[0]}" ]; then
  tar -xzf "$sdist" -C "$cache" "${needed[@]/#/deepspeed-$ds_version/}" \
    || fail "$sdist lacks ${needed[*]}"
fi
for f in "${needed[@]}"; do [ -f "$src/$f" ] || fail "no $f in $sdist"; done

# DeepSpeed's SIMD choice (op_builder/builder.py, simd_width): AVX512 where the CPU has avx512f.
if grep -qw avx512f /proc/cpuinfo; then simd=-D__AVX512__
elif grep -qw avx2 /proc/cpuinfo; then simd=-D__AVX256__
else simd=-D__SCALAR__; fi
simd_name="${simd#-D__}" simd_name="${simd_name%__}"
# Its bf16 store (csrc/includes/simd.h) rounds to nearest even; say so from the source itself.
if grep -q store_16_f32_as_bf16_nearest "$src/csrc/includes/simd.h"; then ds_rounding=nearest
else ds_rounding=unknown; fi

cxx="${CXX:-g++}"
command -v "$cxx" >/dev/null || fail "no C++ compiler ($cxx)"
shim="$root/bench/deepspeed_adam"
harness="$cache/deepspeed_adam_harness"
# Rebuilt when the sources, the compiler or the CPU (-march=native) change.
stamp="$simd $("$cxx" --version | head -1) $(grep -m1 "model name" /proc/cpuinfo)
$(cat "$shim/harness.cpp" "$shim/torch/extension.h" | cksum)"
if [ ! -x "$harness" ] || [ "$(cat "$harness.stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "bench deepspeed_adam: compiling DeepSpeed $ds_version's cpu_adam_impl.cpp ($simd)" >&2
  # DeepSpeed's file on its own with its CPU op flags (op_builder/cpu/builder.py; torch's
  # extension builder would add the -std), so its warnings stay its own; the harness apart, with
  # -Wall -Wextra.
  "$cxx" -O3 -std=c++17 -g -Wno-reorder -march=native -fopenmp "$simd" -I "$shim" \
    -I "$src/csrc/includes" -c "$src/csrc/adam/cpu_adam_impl.cpp" -o "$cache/cpu_adam_impl.o" \
    || fail "DeepSpeed's csrc/adam/cpu_adam_impl.cpp did not compile against $shim/torch/extension.h"
  "$cxx" -O3 -std=c++17 -march=native -fopenmp "$simd" -Wall -Wextra -I "$shim" \
    -c "$shim/harness.cpp" -o "$cache/harness.o" || fail "bench/deepspeed_adam/harness.cpp did not compile"
  "$cxx" -fopenmp "$cache/harness.o" "$cache/cpu_adam_impl.o" -o "$harness" || fail "link failed"
  echo "$stamp" >"$harness.stamp"
fi

field() { sed -n "s/.*\"$2\":\"\{0,1\}\([^,\"}]*\).*/\1/p" <<<"$1"; }

# Two rounds in opposite orders; each run's medians (wall, process CPU) kept per implementation
# and thread count.
declare -A ms cpu
zoe_run() {
  local out line t
  out="$("$zoe_bench" "$n" "$reps" --no-naive --mode bf16_state)"
  while read -r line; do
    [ "$(field "$line" mode)" = bf16_state ] || continue
    t="$(field "$line" threads)"
    ms[zoe,$t]+=" $(field "$line" step_median_ms)"
    cpu[zoe,$t]+=" $(field "$line" step_cpu_median_ms)"
    zoe_isa="$(field "$line" isa)" zoe_bytes="$(field "$line" bytes_per_param)"
  done <<<"$out"
  [ -n "${ms[zoe,1]:-}" ] || fail "$zoe_bench printed no bf16_state line"
}
ds_run() {
  local t line
  for t in 1 2; do
    line="$(OMP_NUM_THREADS=$t "$harness" "$n" "$reps")"
    ms[deepspeed,$t]+=" $(field "$line" step_median_ms)"
    cpu[deepspeed,$t]+=" $(field "$line" step_cpu_median_ms)"
    ds_unchanged="$(field "$line" unchanged_frac)"
  done
}
zoe_run; ds_run
ds_run; zoe_run
[ -n "${ms[zoe,2]:-}" ] || fail "$zoe_bench ran on one thread only (one core?)"

geomean() { awk '{ s = 0; for (i = 1; i <= NF; i++) s += log($i); printf "%.4f", exp(s / NF) }' <<<"$1"; }
declare -A step step_cpu bytes
bytes[zoe]="$zoe_bytes" bytes[deepspeed]=14
for t in 1 2; do
  for impl in zoe deepspeed; do
    step[$impl,$t]="$(geomean "${ms[$impl,$t]}")" step_cpu[$impl,$t]="$(geomean "${cpu[$impl,$t]}")"
  done
done
for t in 1 2; do
  for impl in zoe deepspeed; do
    read -r rounds <<<"${ms[$impl,$t]}"
    awk -v impl="$impl" -v t="$t" -v n="$n" -v reps="$reps" -v s="${step[$impl,$t]}" \
        -v c="${step_cpu[$impl,$t]}" -v b="${bytes[$impl]}" -v rounds="$rounds" \
        -v zs="${step[zoe,$t]}" -v ds="${step[deepspeed,$t]}" -v zc="${step_cpu[zoe,$t]}" \
        -v dc="${step_cpu[deepspeed,$t]}" -v ver="$ds_version" -v isa="$zoe_isa" \
        -v simd="$simd_name" -v unch="$ds_unchanged" -v dsr="$ds_rounding" 'BEGIN {
      gsub(/ /, ",", rounds)
      if (impl == "zoe")
        desc = "\"isa\":\"" isa "\",\"master\":\"bf16\",\"grad\":\"fp32\",\"state\":\"bf16\"," \
               "\"weights_out\":\"bf16\",\"rounding\":\"stochastic\""
      else
        desc = "\"version\":\"" ver "\",\"simd\":\"" simd "\",\"params\":\"bf16\",\"grad\":\"bf16\"," \
               "\"state\":\"bf16\",\"weights_out\":\"none (the params)\",\"rounding\":\"" dsr "\"," \
               "\"unchanged_frac\":" unch
      printf "{\"bench\":\"deepspeed_adam\",\"impl\":\"%s\",\"threads\":%d,\"n\":%d,\"reps\":%d,%s," \
             "\"bytes_per_param\":%d,\"step_ms\":%.3f,\"rounds_ms\":[%s],\"ns_per_param\":%.3f," \
             "\"gb_s\":%.2f,\"step_cpu_ms\":%.3f,\"cpu_gb_s\":%.2f,\"zoe_over_deepspeed_time\":%.3f," \
             "\"zoe_over_deepspeed_cpu_time\":%.3f}\n",
             impl, t, n, reps, desc, b, s, rounds, s * 1e6 / n, b * n / s * 1e-6, c,
             b * n / c * 1e-6, zs / ds, zc / dc
    }'
  done
done
awk -v n="$n" -v ver="$ds_version" -v zb="$zoe_bytes" -v z1="${step[zoe,1]}" \
    -v d1="${step[deepspeed,1]}" -v z2="${step[zoe,2]}" -v d2="${step[deepspeed,2]}" \
    -v zc1="${step_cpu[zoe,1]}" -v dc1="${step_cpu[deepspeed,1]}" -v zc2="${step_cpu[zoe,2]}" \
    -v dc2="${step_cpu[deepspeed,2]}" 'BEGIN {
  printf "{\"bench\":\"deepspeed_adam\",\"summary\":true,\"n\":%d,\"deepspeed_version\":\"%s\"," \
         "\"zoe_bytes_per_param\":%d,\"deepspeed_bytes_per_param\":14," \
         "\"zoe_over_deepspeed_time_1t\":%.3f,\"zoe_over_deepspeed_time_2t\":%.3f," \
         "\"zoe_over_deepspeed_cpu_time_1t\":%.3f,\"zoe_over_deepspeed_cpu_time_2t\":%.3f," \
         "\"zoe_over_deepspeed_gb_s_1t\":%.3f,\"zoe_over_deepspeed_gb_s_2t\":%.3f}\n",
         n, ver, zb, z1 / d1, z2 / d2, zc1 / dc1, zc2 / dc2, (zb / z1) / (14 / d1), (zb / z2) / (14 / d2)
}'
