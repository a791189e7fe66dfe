#!/usr/bin/env bash
# The scripts a user runs first: scripts/bench with no argument or `list` lists the benchmarks
# and exits 0; scripts/plot-loss refuses an output in a missing directory with a message and
# exit 2, and never prints PNG bytes; it draws the validation loss as a second curve when the
# metrics have one; scripts/gpu-check on a GPU its toolkits cannot build for says so (exit 2).
# Usage: test_scripts.sh ROOT
set -u
root="$1"
fails=0 passes=0
check() { # description, condition (evaluated)
  if eval "$2"; then passes=$((passes + 1)); else echo "FAIL: $1"; fails=$((fails + 1)); fi
}
for args in "" list; do
  out="$("$root/scripts/bench" $args 2>&1)"; rc=$?
  check "scripts/bench $args exits 0 (got $rc)" '[ "$rc" -eq 0 ]'
  check "scripts/bench $args lists train_step and cpu_adam" \
    '[[ "$out" == *train_step* && "$out" == *cpu_adam* ]]'
done
"$root/scripts/bench" no-such-bench >/dev/null 2>&1; rc=$?
check "scripts/bench no-such-bench exits 2 (got $rc)" '[ "$rc" -eq 2 ]'
dir="$(mktemp -d)"; trap 'rm -rf "$dir"' EXIT
printf '{"step":0,"loss":5.5}\n{"step":1,"loss":4.0}\n' >"$dir/m.jsonl"
out="$("$root/scripts/plot-loss" "$dir/m.jsonl" "$dir/missing/loss.png" 2>"$dir/err")"; rc=$?
check "plot-loss into a missing directory exits 2 (got $rc)" '[ "$rc" -eq 2 ]'
check "plot-loss names the directory" 'grep -q "output directory .*missing.* does not exist" "$dir/err"'
check "plot-loss prints no PNG bytes" '[ -z "$out" ]'
if command -v gnuplot >/dev/null; then
  out="$("$root/scripts/plot-loss" "$dir/m.jsonl" "$dir/loss.png" 2>&1)"; rc=$?
  check "plot-loss writes a PNG (rc $rc: $out)" '[ "$rc" -eq 0 ] && head -c 4 "$dir/loss.png" | grep -q PNG'
  check "plot-loss leaves no temporary file" '[ -z "$(ls -A "$dir" | grep plot-loss)" ]'
  check "plot-loss without val_loss draws the training loss alone ($out)" '[[ "$out" == *"(training loss)" ]]'
  printf '{"step":0,"loss":5.5}\n{"step":1,"loss":4.0,"val_loss":4.2}\n' >"$dir/v.jsonl"
  out="$("$root/scripts/plot-loss" "$dir/v.jsonl" "$dir/v.png" 2>&1)"; rc=$?
  check "plot-loss with val_loss draws both curves (rc $rc: $out)" \
    '[ "$rc" -eq 0 ] && [[ "$out" == *"(training and validation loss)" ]] && head -c 4 "$dir/v.png" | grep -q PNG'
fi
# scripts/gpu-check on a V100 (a stand-in nvidia-smi) where every CUDA toolkit is 13 or later:
# it says which capability and what the toolkits build for, instead of stopping at nvcc fatal,
# exits 2, and prints the table's heading last.
nvccs="$(command -v nvcc; ls /usr/local/cuda*/bin/nvcc 2>/dev/null)"
if [ -n "$nvccs" ] && ! for n in $nvccs; do "$n" --list-gpu-arch; done 2>/dev/null | grep -qx compute_70; then
  mkdir -p "$dir/bin"
  printf '#!/bin/sh\ncase "$*" in *compute_cap*) echo 7.0 ;; *) echo "Tesla V100-SXM2-32GB, 32768 MiB" ;; esac\n' >"$dir/bin/nvidia-smi"
  chmod +x "$dir/bin/nvidia-smi"
  out="$(PATH="$dir/bin:$PATH" ZOE_GPU_BUILD_DIR="$dir/gpu-build" "$root/scripts/gpu-check" 2>"$dir/err")"; rc=$?
  check "gpu-check on sm_70 with CUDA 13 exits 2 (got $rc)" '[ "$rc" -eq 2 ]'
  check "gpu-check names the capability and CUDA 12 ($(cat "$dir/err"))" \
    'grep -q "is sm_70, and no CUDA toolkit here can build for it" "$dir/err" && grep -q "needs a CUDA 12 toolkit" "$dir/err"'
  check "gpu-check prints the table heading last ($out)" '[[ "$out" == *"## zoe on Tesla V100-SXM2-32GB (sm_70"*"not run"* ]]'
  check "gpu-check built nothing" '[ ! -e "$dir/gpu-build" ]'
fi
echo "test_scripts: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
