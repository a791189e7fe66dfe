#!/usr/bin/env bash
# zoe-train's validation loss end to end on 2 ranks (TP=1 x DP=2, the delayed parameter update
# on after 1 step, the default warm-up of a 4-step run): --split 90,10 --eval-every 2 puts
# "val_loss" on the metrics lines of steps 2 and 4 only (the other fields kept), "val" in their
# progress lines and a closing line; the checkpoint records the options, a run resumed at step 2
# evaluates on the same schedule with the same losses, and a resume with another split is
# refused; --val-data evaluates a separate dataset. Usage: test_zoe_train_eval.sh ZOE_TRAIN
# MPIEXEC CORPUS
set -u
train="$1" mpiexec="$2" corpus="$3"
fails=0 passes=0
check() { # description, condition (evaluated)
  if eval "$2"; then passes=$((passes + 1)); else echo "FAIL: $1"; fails=$((fails + 1)); fi
}
dir="$(mktemp -d)"; trap 'rm -rf "$dir"' EXIT
run() { "$mpiexec" -np 2 --oversubscribe --bind-to none "$train" --data "$corpus" --steps "${STEPS:-4}" \
  --micro-batch 2 --dpu-warmup 1 --progress lines "$@"; }
fields() { # the step, loss and val_loss of each metrics line
  sed -e 's/.*"step":\([0-9]*\),"loss":\([0-9.]*\),.*/\1 \2 &/' -e 's/ {.*"val_loss":\([0-9.]*\)}$/ \1/' \
      -e 's/ {.*}$//' "$1"
}
run --split 90,10 --eval-every 2 --eval-iters 2 --metrics "$dir/m.jsonl" --save "$dir/ck" \
  --save-every 2 --keep-last 0 >"$dir/out" 2>&1; rc=$?
check "the run exits 0 (got $rc: $(tail -3 "$dir/out"))" '[ "$rc" -eq 0 ]'
check "val_loss on the lines of steps 2 and 4 only" \
  '[ "$(grep -c "\"val_loss\":" "$dir/m.jsonl")" -eq 2 ] && [ "$(grep "\"val_loss\":" "$dir/m.jsonl" | cut -d, -f1 | tr "\n" " ")" = "{\"step\":2 {\"step\":4 " ]'
check "the metrics lines keep their fields" \
  '[ "$(grep -c "\"tokens_per_s\":.*\"overlapped\":[01]" "$dir/m.jsonl")" -eq 4 ]'
check "progress lines of steps 2 and 4 show val" \
  '[ "$(grep -cE "^step [24]/4  loss [0-9.]+  val [0-9.]+ " "$dir/out")" -eq 2 ]'
check "a closing line names the validation loss" \
  'grep -q "^zoe-train: validation loss [0-9.]* after step 4 (2 global batches of .*documents" "$dir/out"'
check "the banner says what validates" 'grep -q "^zoe-train: validation on .* every 2 steps and at the end" "$dir/out"'
tj="$dir/ck/step-00000002/trainer.json"
check "trainer.json records split, eval-every and eval-iters" \
  'grep -q "\"split\":[[:space:]]*\"90,10\"" "$tj" && grep -q "\"eval-every\":[[:space:]]*2" "$tj" && grep -q "\"eval-iters\":[[:space:]]*2" "$tj"'
cp "$dir/m.jsonl" "$dir/r.jsonl"
run --split 90,10 --eval-every 2 --eval-iters 2 --metrics "$dir/r.jsonl" --save "$dir/ck2" \
  --resume "$dir/ck/step-00000002" >"$dir/out2" 2>&1; rc=$?
check "the resumed run exits 0 (got $rc: $(tail -3 "$dir/out2"))" '[ "$rc" -eq 0 ]'
check "resumed: the same losses and validation losses at every step" \
  '[ "$(fields "$dir/m.jsonl")" = "$(fields "$dir/r.jsonl")" ] && [ "$(fields "$dir/r.jsonl" | wc -l)" -eq 4 ]'
out="$(run --split 80,20 --eval-every 2 --resume "$dir/ck/step-00000002" 2>&1 >/dev/null)"; rc=$?
check "a resume with another split is refused (rc $rc: $out)" \
  '[ "$rc" -eq 2 ] && [[ "$out" == *"was written with --split 90,10, this run has 80,20"* ]]'
STEPS=2 run --val-data "$corpus" --eval-every 1 --eval-iters 1 --metrics "$dir/v.jsonl" >"$dir/out3" 2>&1; rc=$?
check "--val-data: val_loss on both steps (rc $rc)" '[ "$rc" -eq 0 ] && [ "$(grep -c "\"val_loss\":" "$dir/v.jsonl")" -eq 2 ]'
echo "test_zoe_train_eval: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
