#!/usr/bin/env bash
# What zoe-train and zoe-ckpt refuse before they lose work, at 2 ranks:
# - --save on a file system without room for one checkpoint: exit 2 before training, naming the
#   directory, bytes needed and free, leaving no directory behind;
# - --metrics on a full file system: exit 2 up front, no file made; a metrics file whose disk
#   fills during the run: exit 1 naming it, only whole lines kept;
# - two runs saving into one directory at once: the second refused (exit 2) naming the holder;
# - a --save directory holding another run's checkpoints without --resume: exit 2 saying how to
#   go on; with --resume it goes on;
# - zoe-ckpt export onto a full disk: fails, the earlier export's files unchanged, no .tmp left.
# The small disks are tmpfs mounts in a private mount namespace (unshare); where mounting is not
# permitted (no CAP_SYS_ADMIN) the test skips (77).
# usage: test_ckpt_guards.sh ZOE_TRAIN ZOE_CKPT MPIEXEC CORPUS
set -uo pipefail
train=$1 ckpt=$2 mpiexec=$3 corpus=$4
source "$(dirname "$0")/mount_namespace.sh"
work="$(mktemp -d /tmp/zoe_ckpt_guards_XXXXXX)"
# a background run left by a failed check is ended with the test
trap 'kill $(jobs -p) 2> /dev/null; wait; umount "$work/small" "$work/full" 2> /dev/null; rm -rf "$work"' EXIT
cd "$work"
mount_tmpfs small 256k
mount_tmpfs full 64m
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
small=(--data "$corpus" --layers 2 --hidden 64 --heads 4 --seq-len 32 --micro-batch 2 --tp 2
       --log-every 1000 --progress lines)
run() { "$mpiexec" -np 2 --oversubscribe --bind-to none "$@"; }
# a refused run: mpirun ends it at once (cmake/ZoeTargets.cmake, ZOE_TEST_REFUSED_RUNS_ENV)
refused() { run --mca odls_base_sigkill_timeout 0 "$@"; }
under_way() { # metrics file: waits (20 s at most) until the run has logged a step
    for _ in $(seq 200); do [[ -s "$1" ]] && return; sleep 0.1; done
}
fill() { fallocate -l "$(df -B1 --output=avail "$1" | tail -1)" "$1/filler" 2> /dev/null || true; }

# ---- --save without room for one checkpoint (256 KiB; the checkpoint is about 1.4 MB) ----
refused "$train" "${small[@]}" --steps 2 --save small/ck > room.out 2>&1
code=$?
[[ $code -eq 2 ]] || fail "--save without room: exit $code, not 2"
grep -q "zoe-train: --save 'small/ck': a checkpoint needs [0-9]* bytes .* bytes .* are free there" room.out ||
    fail "--save without room says: $(grep zoe-train room.out | tail -1)"
grep -q "step 1/\|loss" room.out && fail "--save without room trained"
[[ ! -e small/ck ]] || fail "--save without room left small/ck behind"

# ---- --metrics on a full disk: refused up front ----
fill small
refused "$train" "${small[@]}" --steps 2 --metrics small/m.jsonl > metrics.out 2>&1
code=$?
[[ $code -eq 2 ]] || fail "--metrics on a full disk: exit $code, not 2"
grep -q "zoe-train: --metrics: cannot write 'small/m.jsonl': 2 steps' lines need up to 2048 bytes, 0 bytes are free there" metrics.out ||
    fail "--metrics on a full disk says: $(grep zoe-train metrics.out | tail -1)"
[[ ! -e small/m.jsonl ]] || fail "--metrics on a full disk made the file"
rm -f small/filler

# ---- --metrics whose disk fills during the run: exit 1, whole lines only ----
"$mpiexec" -np 2 --oversubscribe --bind-to none "$train" "${small[@]}" --steps 20000 \
    --metrics full/m.jsonl > later.out 2>&1 & mpid=$!
under_way full/m.jsonl
fill full
wait $mpid
code=$?
[[ $code -eq 1 ]] || fail "--metrics filled during the run: exit $code, not 1"
grep -q "zoe-train: rank 0: --metrics 'full/m.jsonl': writing the line of step [0-9]* failed: No space left on device" later.out ||
    fail "--metrics filled during the run says: $(grep zoe-train later.out | tail -2)"
[[ "$(tail -c 2 full/m.jsonl)" == "}" ]] || fail "the metrics file ends in a partial line"
rm -f full/filler full/m.jsonl

# ---- two runs saving into one directory at once; then another run into it ----
# (mpirun started directly in the background, so that $! is mpirun itself)
"$mpiexec" -np 2 --oversubscribe --bind-to none "$train" "${small[@]}" --steps 20000 --save lk \
    --metrics lk.jsonl > first.out 2>&1 & mpid=$!
under_way lk.jsonl
refused "$train" "${small[@]}" --steps 2 --save lk > second.out 2>&1
code=$?
[[ $code -eq 2 ]] || fail "a second run into a directory in use: exit $code, not 2"
grep -q "zoe-train: --save 'lk' is in use by another run (pid [0-9]* on .* holds lk/.zoe-save.lock)" second.out ||
    fail "a second run into a directory in use says: $(grep zoe-train second.out | tail -1)"
kill -USR1 $mpid
wait $mpid || fail "the first run, stopped with SIGUSR1: $(tail -2 first.out)"
saved=$(cat lk/latest)
refused "$train" "${small[@]}" --steps 2 --save lk > other.out 2>&1
code=$?
[[ $code -eq 2 ]] || fail "another run into a directory of checkpoints: exit $code, not 2"
grep -q "zoe-train: --save 'lk' already holds another run's checkpoints (newest $saved): give --resume lk to continue that run, or a new --save directory" other.out ||
    fail "another run into a directory of checkpoints says: $(grep zoe-train other.out | tail -1)"
[[ "$(cat lk/latest)" == "$saved" ]] || fail "the refused run moved latest"
step=$((10#${saved#step-}))
run "$train" "${small[@]}" --steps $((step + 1)) --save lk --resume lk > resumed.out 2>&1 ||
    fail "--resume into its own directory: $(tail -2 resumed.out)"

# ---- zoe-ckpt export onto a full disk ----
"$ckpt" export --hf full/hf lk > export.out 2>&1 || fail "export: $(cat export.out)"
before=$(md5sum full/hf/model.safetensors full/hf/config.json)
# ---- and into a directory that holds a model: refused without --force, one line, exit 2 ----
"$ckpt" export --hf full/hf lk > again.out 2>&1
code=$?
[[ $code -eq 2 && $(wc -l < again.out) -eq 1 ]] &&
    grep -q "^zoe-ckpt: export: 'full/hf' holds a model already (config.json or weights); --force overwrites it$" again.out ||
    fail "export over an export: exit $code, $(cat again.out)"
[[ "$(md5sum full/hf/model.safetensors full/hf/config.json)" == "$before" ]] ||
    fail "a refused export changed the earlier export"
fill full
"$ckpt" export --hf full/hf --force lk > export2.out 2>&1 && fail "export onto a full disk succeeded"
grep -q "full/hf/model.safetensors.tmp.*No space left on device.*the export needs [0-9]* bytes; 0 bytes are free in full/hf" export2.out ||
    fail "export onto a full disk says: $(cat export2.out)"
[[ "$(md5sum full/hf/model.safetensors full/hf/config.json)" == "$before" ]] ||
    fail "a failed export changed the earlier export"
[[ -z "$(ls full/hf | grep tmp)" ]] || fail "a failed export left $(ls full/hf | grep tmp)"

echo "test_ckpt_guards: $failures failed"
[[ $failures -eq 0 ]]
