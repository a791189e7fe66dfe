#!/usr/bin/env bash
# zoe-train --pinned-memory: with a pin limit of 1 byte every page-locked host buffer falls back
# to pageable memory, each with one warning naming it, its size and RLIMIT_MEMLOCK, and the run
# trains bit for bit as without the limit (losses, gradient norms and validation losses equal to
# the printed digit): without and with DPU (its plain schedule evaluates on a copy of the stale
# weights), at 1 and 2 ranks. The plan's pinned bytes of a GPU box over the limit give one
# warning line at start.
# Usage: test_pinned_memory.sh ZOE_TRAIN MPIEXEC CORPUS
set -u
train="$1" mpiexec="$2" corpus="$3"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
run() { # ranks, output name, args...: zoe-train's exit status; its stdout and stderr in $tmp/NAME.out
  local np="$1" name="$2"; shift 2
  "$mpiexec" -np "$np" --oversubscribe --bind-to none "$train" --data "$corpus" --model demo \
    --steps 4 --split 90,10 --eval-every 2 --eval-iters 1 --progress lines \
    --metrics "$tmp/$name.jsonl" "$@" >"$tmp/$name.out" 2>&1
}
numbers() { grep -o '"\(loss\|grad_norm\|val_loss\)":[^,}]*' "$1"; }

for np in 1 2; do
  for dpu in "--dpu off" "--dpu on --dpu-warmup 1 --dpu-schedule plain"; do
    what="np $np $dpu"
    # shellcheck disable=SC2086
    run "$np" base $dpu || { fail "$what: the run without a pin limit failed"; cat "$tmp/base.out"; continue; }
    # shellcheck disable=SC2086
    run "$np" paged $dpu --pinned-memory 1 || { fail "$what: --pinned-memory 1 failed"; cat "$tmp/paged.out"; continue; }
    ! grep -q "pageable" "$tmp/base.out" || fail "$what: a fall-back without a pin limit"
    warned="$(grep -c "warn: .* for .* ([0-9]* bytes): the pin limit 1 bytes would be passed (0 bytes pinned already); RLIMIT_MEMLOCK [0-9a-z.]*[ A-Za-z]*\. Using pageable host memory instead" "$tmp/paged.out")"
    [ "$warned" -ge "$np" ] || { fail "$what: $warned fall-back lines"; cat "$tmp/paged.out"; }
    grep -q "warn: .* for a page-locked host buffer" "$tmp/paged.out" && fail "$what: an allocation not named"
    twice="$(grep -o "r[0-9]* .*warn: .* for [^(]*" "$tmp/paged.out" | sed 's/warn: [^ ]* [^ ]* for/for/' | sort | uniq -d)"
    [ -z "$twice" ] || fail "$what: warned twice on a rank: $twice"
    [ "$(numbers "$tmp/base.jsonl" | grep -c val_loss)" -eq 2 ] || fail "$what: not 2 evaluations"
    [ "$(numbers "$tmp/base.jsonl")" = "$(numbers "$tmp/paged.jsonl")" ] ||
      fail "$what: pageable buffers changed the numbers: $(diff <(numbers "$tmp/base.jsonl") <(numbers "$tmp/paged.jsonl") | tr '\n' ' ')"
  done
done

# The plan of a GPU box (--hardware; this machine trains on its CPU) pins more than the limit.
run 1 plan --hardware dgx-h100 --pinned-memory 4096 ||
  { fail "--hardware dgx-h100 --pinned-memory 4096 failed"; cat "$tmp/plan.out"; }
line="$(grep '^zoe-train: warning: the run pins' "$tmp/plan.out")"
[ "$(printf '%s\n' "$line" | grep -c .)" -eq 1 ] &&
  [[ "$line" == *"of host memory on each rank, more than --pinned-memory (4096 bytes): the buffers past it are pageable"* ]] ||
  fail "the plan's warning: '$line'"
run 1 plan --hardware dgx-h100 || fail "--hardware dgx-h100 failed"
! grep -q 'warning: the run pins' "$tmp/plan.out" || fail "a pinning warning without a limit"

[ "$fails" -eq 0 ] && echo "test_pinned_memory: all cases passed"
exit $((fails > 0))
