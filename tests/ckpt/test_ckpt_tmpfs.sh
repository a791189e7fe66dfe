#!/usr/bin/env bash
# A checkpoint directory on a small tmpfs that fills during a save, at NP ranks, with fp32 and
# with int8 moments. The tmpfs holds one checkpoint and about half of another; every run keeps
# one checkpoint (--keep-last 1), so a save of step 4 can only fit by pruning step 2 first, which
# it must not do. Three ways the disk is found full, each: exit non-zero with a message naming
# the file (or the directory), bytes needed and free; latest still step-00000002, which
# verifies; step-00000002 not pruned; no .partial left:
#   A. as shipped: the room check before the save refuses it, nothing written;
#   B. without the room checks (test hook): reserving optimizer.safetensors fails;
#   C. without the room checks and the reservation (test hooks): the writes of
#      optimizer.safetensors run out of room in the middle, found by their counts.
# Then the resume from latest saves step 4 with the same bytes as a run on a roomy disk.
# The tmpfs is mounted in a private mount namespace (unshare), so nothing outlives the test;
# where mounting is not permitted (no CAP_SYS_ADMIN: an unprivileged container) it skips (77).
# usage: test_ckpt_tmpfs.sh NP ZOE_TRAIN ZOE_CKPT MPIEXEC CORPUS
set -uo pipefail
np=$1 train=$2 ckpt=$3 mpiexec=$4 corpus=$5
source "$(dirname "$0")/mount_namespace.sh"
work="$(mktemp -d /tmp/zoe_ckpt_tmpfs_XXXXXX)"
trap 'umount "$work/disk" 2> /dev/null; rm -rf "$work"' EXIT
cd "$work"
mount_tmpfs disk 64m
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
tp=$((np > 1 ? 2 : 1))
small=(--data "$corpus" --layers 2 --hidden 64 --heads 4 --seq-len 32 --micro-batch 2
       --tp "$tp" --log-every 1000 --progress lines)
run() { "$mpiexec" -np "$np" --oversubscribe --bind-to none "$@"; }
bytes() { stat -c %s "$1"; }
page=4096
pages() { echo $(((($1) + page - 1) / page * page)); }

# the checks after a save that ran out of room: name, expected message fragment, output file
after_full() {
    local name=$1 fragment=$2 out=$3
    grep -q -- "$fragment" "$out" || fail "$name: no '$fragment' in: $(grep zoe-train "$out" | head -2)"
    grep -q "bytes are free\|bytes (.*) are free" "$out" || fail "$name: the message does not say what is free"
    [[ "$(cat disk/ck/latest)" == "step-00000002" ]] || fail "$name: latest is '$(cat disk/ck/latest)'"
    [[ -f disk/ck/step-00000002/trainer.json ]] || fail "$name: step-00000002 was pruned"
    [[ -z "$(ls disk/ck | grep partial)" ]] || fail "$name: left $(ls disk/ck | grep partial)"
    "$ckpt" verify disk/ck > verify.out 2>&1 || fail "$name: latest does not verify: $(tail -1 verify.out)"
}

for state in fp32 int8; do
    opts=()
    rm -f a.out b.out c.out
    [[ $state == int8 ]] && opts=(--exp-avg-dtype int8 --exp-avg-sq-dtype int8)
    # the reference on a roomy disk: steps 0-3, saved at 2 and 4
    rm -rf ref && run "$train" "${small[@]}" "${opts[@]}" --steps 4 --save ref --save-every 2 \
        > ref.out 2>&1 || fail "$state: the reference run: $(tail -2 ref.out)"
    model=$(bytes ref/step-00000002/model.safetensors)
    optim=$(bytes ref/step-00000002/optimizer.safetensors)
    json=$(bytes ref/step-00000002/trainer.json)
    # room for one checkpoint (its files, trainer.json, latest and the lock in pages), the
    # next one's model file and half its optimizer file
    one=$(($(pages $model) + $(pages $optim) + $(pages $json) + 2 * page))
    size=$((one + $(pages $model) + $(pages $((optim / 2))) + 16 * 1024))
    umount disk && mount_tmpfs disk $size

    # A: the check before the save of step 4 refuses it
    run "$train" "${small[@]}" "${opts[@]}" --steps 4 --save disk/ck --save-every 2 \
        --keep-last 1 > a.out 2>&1 && fail "$state A: the run succeeded on a full disk"
    after_full "$state A" "save into 'disk/ck': a checkpoint needs" a.out
    # B: the reservation of the optimizer file fails (the model file fits)
    if [[ $state == fp32 ]]; then
        ZOE_CKPT_TEST_NO_ROOM_CHECK=1 run -x ZOE_CKPT_TEST_NO_ROOM_CHECK "$train" "${small[@]}" \
            --steps 4 --save disk/ck --keep-last 1 --resume disk/ck > b.out 2>&1 &&
            fail "$state B: the run succeeded on a full disk"
        after_full "$state B" "cannot reserve the bytes of disk/ck/step-00000004.partial/optimizer.safetensors" b.out
    fi
    # C: the writes of the optimizer file run out of room in the middle
    ZOE_CKPT_TEST_NO_ROOM_CHECK=1 ZOE_CKPT_TEST_NO_RESERVE=1 run -x ZOE_CKPT_TEST_NO_ROOM_CHECK \
        -x ZOE_CKPT_TEST_NO_RESERVE "$train" "${small[@]}" "${opts[@]}" --steps 4 --save disk/ck \
        --keep-last 1 --resume disk/ck > c.out 2>&1 && fail "$state C: the run succeeded on a full disk"
    after_full "$state C" "disk/ck/step-00000004.partial/optimizer.safetensors" c.out
    grep -q "written\|a write was lost" c.out || fail "$state C: the lost write is not named: $(grep zoe-train c.out | head -1)"

    # the resume from latest, saved on a roomy disk, is the reference bit for bit
    rm -rf res && run "$train" "${small[@]}" "${opts[@]}" --steps 4 --resume disk/ck --save res \
        > res.out 2>&1 || fail "$state: resume from latest: $(tail -2 res.out)"
    for f in model.safetensors optimizer.safetensors; do
        cmp -s ref/step-00000004/$f res/step-00000004/$f || fail "$state: resumed $f differs from the reference"
    done
    echo "$state: tmpfs of $size bytes"; grep -h -m1 "zoe-train: rank 0" a.out b.out c.out 2> /dev/null
done
echo "test_ckpt_tmpfs (np $np): $failures failed"
[[ $failures -eq 0 ]]
