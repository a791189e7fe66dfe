#!/usr/bin/env bash
# --offload nvme, a drive failing mid-run: zoe-train's scratch file is truncated under it after
# its first checkpoint, so the next read of the state comes back short. The run must end with
# exit 1 and one line naming the file and the offset, and every checkpoint it had saved must be
# as it was (the same bytes), with nothing half-written beside them.
# Usage: test_nvme_fault.sh ZOE_TRAIN CORPUS
set -u
train="$1" corpus="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/drive" "$tmp/save"
fail() { echo "FAIL: $*"; exit 1; }
# --bucket-mb 1: several buckets, so that every step pages the state in from the drive (with the
# demo's one bucket the exact schedule keeps it in the ring's slot and never reads it back).
"$train" --data "$corpus" --model demo --steps 100000 --save "$tmp/save" --save-every 3 --bucket-mb 1 \
  --offload nvme --nvme-path "$tmp/drive" --progress lines --log-every 1000 >"$tmp/out" 2>&1 &
pid=$!
for _ in $(seq 1500); do # up to 5 minutes on a loaded machine
  [ -e "$tmp/save/step-00000003/trainer.json" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.2
done
[ -e "$tmp/save/step-00000003/trainer.json" ] || { kill "$pid"; fail "no checkpoint: $(tail -3 "$tmp/out")"; }
# the checkpoints complete now (a save in progress writes into a temporary directory)
(cd "$tmp/save" && md5sum step-*[0-9]/* >"$tmp/sums")
truncate -s 0 "$tmp"/drive/zoe-scratch.*
wait "$pid"
rc=$?
[ "$rc" -eq 1 ] || fail "exit $rc, want 1: $(tail -3 "$tmp/out")"
line="$(grep '^zoe-train: rank 0:' "$tmp/out")"
[ "$(printf '%s\n' "$line" | grep -c .)" -eq 1 ] || fail "not one line: '$line'"
[[ "$line" == *"$tmp/drive/zoe-scratch."*"file offset"* ]] || fail "the line names no file and offset: '$line'"
(cd "$tmp/save" && md5sum --quiet -c "$tmp/sums") || fail "a checkpoint changed"
extra="$(cd "$tmp/save" && ls -A | grep -v '^latest$' | grep -v '^step-' || true)"
[ -z "$extra" ] || fail "left beside the checkpoints: $extra"
echo "test_nvme_fault: exit 1, '$line'; the checkpoints unchanged"
