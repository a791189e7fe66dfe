#!/usr/bin/env bash
# --offload nvme, a drive failing mid-run: zoe-train's scratch file is truncated under it after
# its first checkpoint, so the next read from it comes back short. The run must end with exit 1
# and one line naming the file and the offset, and every checkpoint it had saved must be as it
# was (the same bytes), with nothing half-written beside them.
#
# Twice: at 1 rank with the state on the drive; at 2 ranks (TP 1 x DP 2) with the state and the
# weights on it (--offload-params nvme), where only the last rank's file is truncated: its peer
# must not be left waiting for it (in the weight stream's gather over DP, say) but end too, within
# 120 s of the truncation (a run that ends does so in seconds).
# Usage: test_nvme_fault.sh ZOE_TRAIN CORPUS MPIEXEC
set -u
train="$1" corpus="$2" mpiexec="$3"
tmp="$(mktemp -d)"
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# fault NAME RANKS [ZOE-TRAIN OPTIONS...]
fault() {
  local name="$1" ranks="$2" dir="$tmp/$1"
  shift 2
  mkdir -p "$dir/drive" "$dir/save"
  local cmd=("$train")
  [ "$ranks" -gt 1 ] && cmd=("$mpiexec" -np "$ranks" --oversubscribe --bind-to none "$train")
  # --bucket-mb 1: several buckets, so that every step pages the state in from the drive (with
  # the demo's one bucket the exact schedule keeps it in the ring's slot and never reads it back).
  "${cmd[@]}" --data "$corpus" --model demo --steps 100000 --save "$dir/save" --save-every 3 \
    --bucket-mb 1 --offload nvme --nvme-path "$dir/drive" --progress lines --log-every 1000 "$@" \
    >"$dir/out" 2>&1 &
  local pid=$!
  for _ in $(seq 1500); do # up to 5 minutes on a loaded machine
    [ -e "$dir/save/step-00000003/trainer.json" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  [ -e "$dir/save/step-00000003/trainer.json" ] || { kill "$pid"; fail "$name: no checkpoint: $(tail -3 "$dir/out")"; }
  # the checkpoints complete now (a save in progress writes into a temporary directory)
  (cd "$dir/save" && md5sum step-*[0-9]/* >"$dir/sums")
  local last=("$dir"/drive/zoe-scratch.*."$((ranks - 1))")
  [ -e "${last[0]}" ] || { kill "$pid"; fail "$name: no scratch file of rank $((ranks - 1))"; }
  truncate -s 0 "${last[@]}"
  for _ in $(seq 600); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    fail "$name: still running 120 s after the drive failed: $(tail -3 "$dir/out")"
  fi
  wait "$pid"
  local rc=$?
  [ "$rc" -eq 1 ] || fail "$name: exit $rc, want 1: $(tail -3 "$dir/out")"
  # every rank that says why says the same: the first failing rank's error, agreed (some may be
  # cut short by the abort)
  local lines line
  lines="$(grep '^zoe-train: rank [0-9]*:' "$dir/out" | sed 's/^zoe-train: rank [0-9]*: //' | sort -u)"
  [ "$(printf '%s\n' "$lines" | grep -c .)" -eq 1 ] || fail "$name: not one line: '$lines'"
  line="$lines"
  [[ "$line" == *"$dir/drive/zoe-scratch."*"file offset"* ]] || fail "$name: the line names no file and offset: '$line'"
  (cd "$dir/save" && md5sum --quiet -c "$dir/sums") || fail "$name: a checkpoint changed"
  # (the run's lock on --save, where the failing rank's MPI_Abort killed rank 0 before it removed
  # it, may stay: harmless, as nobody holds its flock, which the next run takes)
  local lock="$dir/save/.zoe-save.lock"
  [ ! -e "$lock" ] || flock -n "$lock" true || fail "$name: $lock still held"
  local extra
  extra="$(cd "$dir/save" && ls -A | grep -v '^latest$' | grep -v '^step-' | grep -vx '.zoe-save.lock' || true)"
  [ -z "$extra" ] || fail "$name: left beside the checkpoints: $extra"
  echo "test_nvme_fault: $name: exit 1, '$line'; the checkpoints unchanged"
}

fault state 1
fault weights-dp2 2 --offload-params nvme
