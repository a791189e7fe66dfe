#!/usr/bin/env bash
# The scripts a user runs first: scripts/bench with no argument or `list` lists the benchmarks
# and exits 0; scripts/plot-loss refuses an output in a missing directory with a message and
# exit 2, and never prints PNG bytes; it draws the validation loss as a second curve when the
# metrics have one; scripts/gpu-check on a GPU its toolkits cannot build for says so (exit 2), and
# on a fresh box (stand-ins) checks each dependency's version first, finds the capability where
# nvidia-smi lacks it, keeps its time shares within its total and runs the key GPU tests first.
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
printf '{"step":1,"loss":5.5}\n{"step":2,"loss":4.0}\n' >"$dir/m.jsonl"
out="$("$root/scripts/plot-loss" "$dir/m.jsonl" "$dir/missing/loss.png" 2>"$dir/err")"; rc=$?
check "plot-loss into a missing directory exits 2 (got $rc)" '[ "$rc" -eq 2 ]'
check "plot-loss names the directory" 'grep -q "output directory .*missing.* does not exist" "$dir/err"'
check "plot-loss prints no PNG bytes" '[ -z "$out" ]'
if command -v gnuplot >/dev/null; then
  out="$("$root/scripts/plot-loss" "$dir/m.jsonl" "$dir/loss.png" 2>&1)"; rc=$?
  check "plot-loss writes a PNG (rc $rc: $out)" '[ "$rc" -eq 0 ] && head -c 4 "$dir/loss.png" | grep -q PNG'
  check "plot-loss leaves no temporary file" '[ -z "$(ls -A "$dir" | grep plot-loss)" ]'
  # the PNG's mode is what the umask gives a new file, as gnuplot's own output would be
  for mask in 022 077; do
    (umask "$mask" && "$root/scripts/plot-loss" "$dir/m.jsonl" "$dir/mode$mask.png" >/dev/null 2>&1)
    mode="$(stat -c %a "$dir/mode$mask.png" 2>/dev/null)"
    want="$(printf '%o' $((0666 & ~0$mask)))"
    check "plot-loss under umask $mask writes mode $want (got ${mode:-no file})" '[ "$mode" = "$want" ]'
  done
  check "plot-loss without val_loss draws the training loss alone ($out)" '[[ "$out" == *"(training loss)" ]]'
  printf '{"step":1,"loss":5.5}\n{"step":2,"loss":4.0,"val_loss":4.2}\n' >"$dir/v.jsonl"
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

# scripts/gpu-check on a fresh box, with stand-ins for the driver, nvcc (a CUDA 12.8 toolkit with
# NCCL and cuBLAS: empty files with their version lines), cmake and ctest; the rest of the
# dependencies are this machine's. Nothing is configured, built or run for real.
gc="$dir/gc" gcroot="$dir/gc-cuda" gcalls="$dir/gc-calls"
mkdir -p "$gc" "$gcroot/bin" "$gcroot/include" "$gcroot/lib64"
gstub() { # name, body run after logging the call
  printf '#!/bin/bash\necho "%s $*" >>"%s"\n%s\n' "$1" "$gcalls" "$2" >"$gc/$1"
  chmod +x "$gc/$1"
}
gstub nvidia-smi 'case "$*" in
  *compute_cap*) [ -n "$FAKE_NO_CAP" ] && { echo "Field \"compute_cap\" is not a valid field to query."; exit 2; }; echo 9.0 ;;
  *) [ -n "$FAKE_NO_CAP" ] && echo "Tesla V100-SXM2-32GB, 32768 MiB" || echo "NVIDIA H100 80GB HBM3, 81559 MiB" ;;
esac'
gstub cmake '[ "$1" = --version ] && echo "cmake version ${FAKE_CMAKE:-3.28.1}"; [ "$1" = -S ] && mkdir -p "$4"; exit 0'
gstub ctest 'if [[ " $* " == *" -N "* ]]; then
  n=0; for t in test_kernels_cuda test_optimizer_cuda_np1 test_optimizer_cuda_np2 test_device_cuda_np1 \
    test_device_cuda_np2 test_device_cuda_np4 test_train_cuda_np1 test_train_cuda_np4; do
    n=$((n + 1)); echo "  Test #$n: $t"; done; exit 0; fi
echo "1/1 Test #1: $(sed -n "s/.*-R ^\([A-Za-z0-9_]*\)\$.*/\1/p" <<<"$*") ...   Passed    1.00 sec"'
# nvcc: its version and architectures, and the capability query: a program printing $FAKE_CAP
printf '#!/bin/bash\necho "nvcc $*" >>"%s"\n%s\n' "$gcalls" 'case "$1" in
  --version) echo "Cuda compilation tools, release 12.8, V12.8.93" ;;
  --list-gpu-arch) printf "compute_%s\n" 70 75 80 86 89 90 ;;
  -o) [ -n "$FAKE_NVCC_FAILS" ] && { echo "capability.c:1: error: cuda.h: No such file" >&2; exit 1; }
      printf "#!/bin/sh\necho %s\n" "$FAKE_CAP" >"$2"; chmod +x "$2" ;;
esac' >"$gcroot/bin/nvcc"
chmod +x "$gcroot/bin/nvcc"
printf '#define NCCL_MAJOR 2\n#define NCCL_MINOR 19\n#define NCCL_PATCH 3\n' >"$gcroot/include/nccl.h"
printf '#define CUBLAS_VER_MAJOR 12\n#define CUBLAS_VER_MINOR 8\n#define CUBLAS_VER_PATCH 4\n' >"$gcroot/include/cublas_api.h"
: >"$gcroot/include/cublas_v2.h"
: >"$gcroot/lib64/libnccl.so"
: >"$gcroot/lib64/libcublas.so"
gpu_check() { # [VAR=value ...]: runs gpu-check with the stand-ins; out, err, rc, calls in $gcalls
  : >"$gcalls"
  rm -rf "$dir/gc-build"
  out="$(env -u ZOE_CUDA_ARCHS -u NCCL_ROOT PATH="$gc:$gcroot/bin:${GC_PATH:-$PATH}" \
    ZOE_GPU_BUILD_DIR="$dir/gc-build" FAKE_CAP=70 "$@" bash "$root/scripts/gpu-check" 2>"$dir/gc-err")"
  rc=$?
  err="$(cat "$dir/gc-err")"
}
gpu_check
check "gpu-check with every dependency exits 1 here: no benchmark was built (rc $rc: $err)" '[ "$rc" -eq 1 ]'
check "gpu-check names each dependency with its version before configuring ($err)" \
  '[[ "$err" == *"build dependencies: cmake 3.28.1; pkg-config "[0-9]*"; C compiler "*"; OpenMP 20"*"; OpenBLAS "[0-9]*"; MPI "*"; hwloc "[0-9]*"; libcjson "[0-9]*"; nvcc 12.8 "*"; NCCL 2.19.3; cuBLAS 12.8.4"* ]]'
shares="$(sed -n 's/.*gpu-check: time: \(.*\) = \([0-9]*\) s at most/\1 = \2/p' <<<"$err")"
sum="$(grep -oE '[0-9]+ s \+|[0-9]+ s =' <<<"$shares" | awk '{s += $1} END {print s}')" stated="${shares##*= }"
check "gpu-check's time shares add up to its total ($shares)" \
  '[ -n "$stated" ] && [ "$sum" = "$stated" ] && [ "$stated" -le 570 ]'
check "gpu-check gives no test more than the total ($(grep -o -- "--timeout [0-9]*" "$gcalls" | sort -u | tr '\n' ' '))" \
  '[ -n "$stated" ] && ! grep -o -- "--timeout [0-9]*" "$gcalls" | awk -v t="$stated" "\$2 > t {bad = 1} END {exit !bad}"'
order="$(sed -n 's/^ctest .*-R ^\([A-Za-z0-9_]*\)\$.*/\1/p' "$gcalls" | tr '\n' ' ')"
check "gpu-check runs the GPU tests that matter most first ($order)" \
  '[[ "$order" == "test_train_cuda_np1 test_kernels_cuda test_optimizer_cuda_np1 test_device_cuda_np1 "* ]] &&
   [ "$(wc -w <<<"$order")" -eq 8 ]'
check "gpu-check configures for sm_90 with the toolkit that builds it" \
  'grep -q "^cmake -S .*-DCMAKE_CUDA_COMPILER=$gcroot/bin/nvcc -DZOE_CUDA_ARCHS=90" "$gcalls"'
gpu_check FAKE_CMAKE=3.22.1
check "gpu-check with cmake 3.22 exits 2 naming it and the version needed (rc $rc: $err)" \
  '[ "$rc" -eq 2 ] && [[ "$err" == *"missing or too old: cmake >= 3.25 (found 3.22.1"* ]]'
check "gpu-check with cmake 3.22 configures nothing" '! grep -q "^cmake -S" "$gcalls" && [ ! -e "$dir/gc-build" ]'
# no pkg-config: this machine's tools but that one
mkdir -p "$dir/nopc"
for f in /usr/local/bin/* /usr/bin/* /bin/*; do
  case "${f##*/}" in *pkg-config* | pkgconf*) continue ;; esac
  [ -e "$dir/nopc/${f##*/}" ] || ln -s "$f" "$dir/nopc/${f##*/}"
done
GC_PATH="$dir/nopc" gpu_check
check "gpu-check without pkg-config exits 2 naming it (rc $rc: $err)" \
  '[ "$rc" -eq 2 ] && [[ "$err" == *"missing or too old: pkg-config (CMake finds hwloc and cJSON with it"* ]] && ! grep -q "^cmake -S" "$gcalls"'
# an older driver: nvidia-smi without compute_cap; the CUDA query says 7.0 (a V100)
gpu_check FAKE_NO_CAP=1 FAKE_CMAKE=3.22.1
check "gpu-check without compute_cap asks the driver through a CUDA query (rc $rc: $err)" \
  '[[ "$err" == *"sm_70, from the driver through a CUDA query"* ]] && grep -q "^nvcc -o .*capability .*-lcuda" "$gcalls"'
check "gpu-check without compute_cap builds for what the query says, not sm_90 ($out)" \
  '[[ "$out" == *"## zoe on Tesla V100-SXM2-32GB (sm_70"* ]] && [[ "$err" != *sm_90* ]]'
gpu_check FAKE_NO_CAP=1 FAKE_NVCC_FAILS=1
check "gpu-check that cannot tell the capability exits 2 saying so (rc $rc: $err)" \
  '[ "$rc" -eq 2 ] && [[ "$err" == *"cannot tell the GPU'"'"'s compute capability"*"set ZOE_CUDA_ARCHS"* ]] && ! grep -q "^cmake -S" "$gcalls"'

# The README's two commands and scripts/build, with stand-ins for the tools they call (each logs
# its arguments to $calls): nothing is installed, configured or run for real.
fake="$dir/fake" calls="$dir/calls"
mkdir -p "$fake" "$dir/gpu"
stub() { # name, body run after logging the call
  printf '#!/bin/bash\necho "%s $*" >>"%s"\n%s\n' "$1" "$calls" "$2" >"$fake/$1"
  chmod +x "$fake/$1"
}
stub dpkg-query 'for m in $FAKE_MISSING; do [ "${*: -1}" = "$m" ] && exit 1; done; printf "install ok installed"'
stub apt-get ''
stub sudo 'exec "$@"'
stub cmake ''
stub ctest ''
stub nvidia-smi 'exit 9' # no GPU
stub python3 '[ "$1 $2" = "-m venv" ] || exit 0; mkdir -p "$3/bin"
for t in pip python; do printf "#!/bin/bash\necho \"venv-$t \$*\" >>%s\n" "'"$calls"'" >"$3/bin/$t"; chmod +x "$3/bin/$t"; done'
stub mpirun 'while [ $# -gt 1 ]; do [ "$1" = --metrics ] && printf "{\"step\":0,\"loss\":5.5}\n{\"step\":1,\"loss\":4.0}\n" >"$2"; shift; done'
stub gnuplot 'out="$(sed -n "s/^set output \"\(.*\)\"$/\1/p")"; echo PNG >"$out"'
printf '#!/bin/bash\necho "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"\n' >"$dir/gpu/nvidia-smi"
chmod +x "$dir/gpu/nvidia-smi"
faked() { env -u ZOE_PYTHON -u ZOE_CUDA -u CI PATH="$fake:$PATH" ZOE_BUILD_DIR="$dir/fbuild" "$@"; }
calls_of() { grep -n "^$1 " "$calls" | head -1 | cut -d: -f1; } # the line of its first call

# scripts/test installs the Debian packages before it makes the Python environment: mpi4py is
# built from source against libopenmpi-dev's mpi.h (on a fresh machine the venv came first).
: >"$calls"
out="$(faked FAKE_MISSING="libopenmpi-dev python3-venv" "$root/scripts/test" -R none 2>&1)"; rc=$?
check "scripts/test with stand-ins exits 0 (rc $rc: $out)" '[ "$rc" -eq 0 ]'
check "scripts/test installs libopenmpi-dev and python3-venv ($(cat "$calls"))" \
  'grep -q "^apt-get install .*libopenmpi-dev python3-venv" "$calls"'
apt_line="$(calls_of "apt-get install")" venv_line="$(calls_of "python3 -m venv")"
check "scripts/test installs them before python3 -m venv (lines ${apt_line:-none} and ${venv_line:-none})" \
  '[ -n "$apt_line" ] && [ -n "$venv_line" ] && [ "$apt_line" -lt "$venv_line" ]'
check "scripts/test fills the venv from the requirements" \
  'grep -q "^venv-pip install .*-r $root/tests/python/requirements.txt" "$calls"'
check "scripts/test runs ctest with its arguments" 'grep -q "^ctest .*-R none" "$calls"'
check "scripts/test builds the Python package's tests with its venv, whoever configured first" \
  'grep -q "^cmake -S .* -DZOE_PYTHON=$dir/fbuild/venv/bin/python -DZOE_PYTHON_MODULE=ON" "$calls"'

# scripts/build: CUDA where a GPU is, else only when ZOE_CUDA asks; a bad ZOE_CUDA is named.
: >"$calls"
out="$(faked "$root/scripts/build" 2>&1)"; rc=$?
check "scripts/build without a GPU configures ZOE_CUDA=OFF (rc $rc: $out)" \
  '[ "$rc" -eq 0 ] && grep -q "^cmake -S .* -DZOE_CUDA=OFF" "$calls" && [[ "$out" == *"CUDA backend OFF: no GPU here"* ]]'
check "scripts/build builds every target by default" \
  'grep -q "^cmake --build $dir/fbuild -j [0-9]*$" "$calls"'
: >"$calls"
out="$(faked PATH="$dir/gpu:$fake:$PATH" "$root/scripts/build" 2>&1)"; rc=$?
check "scripts/build with a GPU configures ZOE_CUDA=AUTO (rc $rc: $out)" \
  '[ "$rc" -eq 0 ] && grep -q "^cmake -S .* -DZOE_CUDA=AUTO" "$calls"'
: >"$calls"
out="$(faked ZOE_CUDA=ON "$root/scripts/build" -DFOO=1 2>&1)"; rc=$?
check "scripts/build takes ZOE_CUDA=ON and passes cmake arguments (rc $rc: $out)" \
  '[ "$rc" -eq 0 ] && grep -q "^cmake -S .* -DZOE_CUDA=ON -DFOO=1" "$calls"'
: >"$calls"
: >"$calls"
out="$(faked ZOE_CUDA=OFF "$root/scripts/build" -DZOE_CUDA=AUTO 2>&1)"; rc=$?
check "scripts/build -DZOE_CUDA=AUTO wins over the environment, as in cmake (rc $rc: $out)" \
  '[ "$rc" -eq 0 ] && grep -q "^cmake -S .* -DZOE_CUDA=AUTO -DZOE_CUDA=AUTO" "$calls" && [[ "$out" == *"CUDA backend AUTO: -DZOE_CUDA=AUTO"* ]]'
: >"$calls"
out="$(faked ZOE_CUDA=maybe "$root/scripts/build" 2>&1)"; rc=$?
check "scripts/build refuses ZOE_CUDA=maybe, named, exit 2, nothing configured (rc $rc: $out)" \
  '[ "$rc" -eq 2 ] && [[ "$out" == *"'"'"'maybe'"'"' is not AUTO, ON or OFF"* ]] && ! grep -q "^cmake" "$calls"'
out="$(faked "$root/scripts/build" --target 2>&1)"; rc=$?
check "scripts/build --target without a name exits 2 (rc $rc: $out)" '[ "$rc" -eq 2 ]'

# scripts/demo builds what it runs (zoe-train, and zoe-generate for the README's next command),
# says so, then trains and plots.
: >"$calls"
out="$(faked ZOE_DEMO_OUT="$dir/demo-out" "$root/scripts/demo" 2>&1)"; rc=$?
check "scripts/demo with stand-ins exits 0 (rc $rc: $out)" '[ "$rc" -eq 0 ]'
check "scripts/demo builds zoe-train and zoe-generate only ($(grep "^cmake --build" "$calls"))" \
  '[ "$(grep -c "^cmake --build" "$calls")" -eq 1 ] &&
   grep -q "^cmake --build $dir/fbuild -j [0-9]* --target=zoe-train --target=zoe-generate$" "$calls"'
check "scripts/demo says what it builds and about how long" \
  '[[ "$out" == *"building zoe-train and zoe-generate first (about "*" minutes"* ]]'
build_line="$(calls_of "cmake --build")" mpirun_line="$(calls_of mpirun)"
check "scripts/demo trains after the build and plots" \
  '[ -n "$mpirun_line" ] && [ "$build_line" -lt "$mpirun_line" ] && [ -s "$dir/demo-out/demo-loss.png" ]'

# scripts/fresh-check refuses what it cannot do before making anything.
out="$(faked "$root/scripts/fresh-check" --fast 2>&1)"; rc=$?
check "fresh-check --fast exits 2 naming it (rc $rc: $out)" '[ "$rc" -eq 2 ] && [[ "$out" == *"'"'"'--fast'"'"'"* ]]'
stub id 'echo 1000'
out="$(faked "$root/scripts/fresh-check" --quick 2>&1)"; rc=$?
check "fresh-check as a user exits 2: needs root (rc $rc: $out)" '[ "$rc" -eq 2 ] && [[ "$out" == *"needs root"* ]]'
check "fresh-check refused before making anything" '[ ! -e "$dir/fbuild/fresh-check" ]'
rm -f "$fake/id"

echo "test_scripts: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
