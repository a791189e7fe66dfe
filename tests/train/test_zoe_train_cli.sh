#!/usr/bin/env bash
# zoe-train's bad input: each case exits 2 with a one-line message naming the bad value, decided
# before any rank allocates. Usage: test_zoe_train_cli.sh ZOE_TRAIN MPIEXEC CORPUS
set -u
train="$1" mpiexec="$2" corpus="$3"
fails=0 passes=0
expect() { # ranks, message fragment, args...
  local np="$1" want="$2"; shift 2
  local out err rc
  out="$("$mpiexec" -np "$np" --oversubscribe --bind-to none "$train" "$@" 2>&1 >/dev/null)"
  rc=$?
  err="$(printf '%s\n' "$out" | grep '^zoe-train:')"
  if [ "$rc" -ne 2 ] || [ "$(printf '%s\n' "$err" | grep -c .)" -ne 1 ] || [[ "$err" != *"$want"* ]]; then
    echo "FAIL: zoe-train $* (np $np): exit $rc, message '$err', want exit 2 and '$want'"
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}
expect 1 "unknown option '--wings'" --wings 3 --data "$corpus"
expect 1 "--lr=-0.5 is out of range" --lr -0.5 --data "$corpus"
expect 1 "--steps=0 is out of range" --steps 0 --data "$corpus"
expect 1 "'fp64' is not fp32, bf16 or fp16" --dtype fp64 --data "$corpus"
expect 4 "--tp=3 does not divide the 4 ranks" --tp 3 --data "$corpus"
expect 2 "--tp=8 does not divide the 2 ranks" --tp 8 --data "$corpus"
expect 2 "--heads=3 is not divisible by --tp=2" --heads 3 --hidden 96 --tp 2 --data "$corpus"
expect 1 "'gpu' is not cpu, none or nvme" --offload gpu --data "$corpus"
expect 1 "--offload=nvme without --nvme-path" --offload nvme --data "$corpus"
expect 1 "--nvme-path=/dev/shm without --offload nvme" --nvme-path /dev/shm --data "$corpus"
expect 1 "--nvme-path=/dev/shm,: an empty directory name" --offload nvme --nvme-path /dev/shm, --data "$corpus"
expect 1 "--offload=nvme with --offload-ratio=below 1" --offload nvme --nvme-path /dev/shm --offload-ratio 0.5 --data "$corpus"
expect 1 "--offload-params=nvme with --offload=cpu: the weights on drives live in the state's" --offload-params nvme --data "$corpus"
expect 1 "--offload-params=nvme with --offload=none" --offload-params nvme --offload none --data "$corpus"
expect 1 "--offload-params=nvme with --offload-ratio=below 1" --offload nvme --nvme-path /dev/shm --offload-params nvme --offload-ratio 0.5 --data "$corpus"
expect 1 "--offload=nvme without --nvme-path" --offload nvme --offload-params nvme --data "$corpus"
expect 1 "--nvme-path: '/nonexistent-zoe-drive' cannot be read" --offload nvme --nvme-path /nonexistent-zoe-drive --data "$corpus"
expect 1 "--offload-params: 'gpu' is not one of" --offload-params gpu --data "$corpus"
expect 1 "--offload-params=cpu with --offload=none" --offload-params cpu --offload none --data "$corpus"
expect 1 "--offload-params=cpu with --offload-ratio=below 1" --offload-params cpu --offload-ratio 0.5 --data "$corpus"
expect 1 "--offload-params=cpu with --offload-ratio=auto" --offload-params cpu --offload-ratio auto --data "$corpus"
expect 1 "--prefetch-layers=-1 is out of range" --prefetch-layers -1 --data "$corpus"
expect 1 "'/nonexistent/corpus' is neither a file" --data /nonexistent/corpus
expect 1 "--data is required"
expect 1 "unknown model 'gpt9'" --model gpt9 --data "$corpus"
# --backend cuda where no GPU is (or in a build without CUDA): every rank stops alike, before
# the plan
if ! nvidia-smi -L >/dev/null 2>&1; then
  expect 2 "--backend=cuda: " --backend cuda --data "$corpus"
fi
# data checks, before the model is built
tmp="$(mktemp -d)"
: > "$tmp/empty.txt"
printf 'hello\n' > "$tmp/tiny.txt"
expect 1 "token 84 at stream position 0 (document 0) is outside the vocabulary [0, 60)" --vocab 60 --data "$corpus"
expect 1 "holds no tokens" --data "$tmp/empty.txt"
expect 2 "fewer than one global batch of 8 (dp 2 x grad_accum 1 x micro_batch 4)" --data "$tmp/tiny.txt"
# validation: a source for --eval-every, --split as two percentages, one source, one global batch
for i in $(seq 1 20); do printf 'document %d, with enough words in it to be about sixty bytes long\n\n' "$i"; done > "$tmp/twenty.txt"
expect 1 "--eval-every=5 without a validation set: give --val-data PREFIX or --split" --eval-every 5 --data "$corpus"
expect 1 "--split: '98' is not two percentages T,V summing to 100" --split 98 --data "$corpus"
expect 1 "--split: '98,2,1' is not two percentages" --split 98,2,1 --data "$corpus"
expect 1 "--split: '-2,102' is not two percentages" --split=-2,102 --data "$corpus"
expect 1 "--split=50,40 is not two positive percentages summing to 100" --split 50,40 --data "$corpus"
expect 1 "--split=100,0 is not two positive percentages summing to 100" --split 100,0 --data "$corpus"
expect 1 "--split=98,2 and --val-data '$corpus' are two validation sets: give one" --split 98,2 --val-data "$corpus" --data "$corpus"
expect 1 "--val-data: '/nonexistent/val' is neither a file" --val-data /nonexistent/val --data "$corpus"
expect 1 "--eval-iters=0 is out of range" --eval-iters 0 --split 98,2 --data "$corpus"
expect 2 "tiny.txt': 6 tokens make 0 sequences" --val-data "$tmp/tiny.txt" --eval-every 10 --data "$corpus"
expect 1 "documents 19-19': " --split 95,5 --eval-every 10 --data "$tmp/twenty.txt"
expect 1 "--split=99,1 of 20 documents leaves validation without a document" --split 99,1 --data "$tmp/twenty.txt"
printf '{"split": "97,4"}' > "$tmp/split.json"
expect 1 "--split=97,4 is not two positive percentages summing to 100" --config "$tmp/split.json" --data "$corpus"
rm -rf "$tmp"
# an explicit warm-up longer than the run is an error (the default shrinks to the run)
expect 1 "--lr-warmup-iters=5 is longer than the run (--steps=3)" --steps 3 --warmup 5 --data "$corpus"
expect 1 "--lr-warmup-iters=50 is longer than the run (--steps=20)" --steps 20 --lr-warmup-iters 50 --data "$corpus"
expect 1 "--lr-decay-style: 'step' is not one of" --lr-decay-style step --data "$corpus"
expect 1 "'0x3' is not a number" --tp 0x3 --data "$corpus"
expect 1 "'+2' is not a number" --micro-batch +2 --data "$corpus"
expect 1 "--stall-timeout=-1 is out of range" --stall-timeout -1 --data "$corpus"
cfgdir="$(mktemp -d)"
expect 1 "is a directory, not a JSON file" --config "$cfgdir" --data "$corpus"
printf '{"micro-batch": 2, "micro_batch": 3}' >"$cfgdir/dup.json"
expect 1 "is given twice" --config "$cfgdir/dup.json" --data "$corpus"
printf '{"tp": 1} trailing' >"$cfgdir/trail.json"
expect 1 "text after the JSON object" --config "$cfgdir/trail.json" --data "$corpus"
# metrics that cannot be written: refused before the model is built (exit 2, not 1 later)
expect 2 "--metrics: cannot write '$cfgdir/missing/m.jsonl'" --metrics "$cfgdir/missing/m.jsonl" --data "$corpus"
readonly_dir="$cfgdir/ro"; mkdir "$readonly_dir"; chmod 555 "$readonly_dir"
[ "$(id -u)" -eq 0 ] && readonly_dir=/sys # root writes anywhere chmod allows; sysfs refuses
expect 1 "--metrics: cannot write '$readonly_dir/m.jsonl'" --metrics "$readonly_dir/m.jsonl" --data "$corpus"
chmod 755 "$cfgdir/ro"
# --save that cannot be written: refused up front (exit 2), not after the training it was to keep
printf 'x' >"$cfgdir/afile"
expect 1 "--save: '$cfgdir/afile' is not a directory" --save "$cfgdir/afile" --data "$corpus"
expect 2 "--save: cannot create '$cfgdir/no/such/dir': its parent '$cfgdir/no/such' is not a directory" --save "$cfgdir/no/such/dir" --data "$corpus"
expect 1 "--save: cannot write in '/proc'" --save /proc --data "$corpus"
# a run refused on the way leaves an existing metrics file as it was, and makes none
printf '{"step": 1}\n' >"$cfgdir/kept.jsonl"
expect 1 "is outside the vocabulary" --metrics "$cfgdir/kept.jsonl" --vocab 60 --data "$corpus"
expect 1 "is outside the vocabulary" --metrics "$cfgdir/new.jsonl" --vocab 60 --data "$corpus"
check() { # description, command...
  local what="$1"; shift
  if "$@"; then passes=$((passes + 1)); else echo "FAIL: $what"; fails=$((fails + 1)); fi
}
check "a refused run truncated the metrics file" test "$(cat "$cfgdir/kept.jsonl")" = '{"step": 1}'
check "a refused run left a metrics file" test ! -e "$cfgdir/new.jsonl"
# runs that must go: lr 0 with a constant schedule (min-lr is never read), and a resume at the end
tiny=(--model demo --layers 1 --hidden 32 --heads 2 --seq-len 16 --micro-batch 2 --data "$corpus")
out="$("$mpiexec" -np 1 "$train" "${tiny[@]}" --steps 2 --lr 0 --lr-decay-style constant 2>&1)"
check "--lr 0 --lr-decay-style constant refused: $out" test $? -eq 0
"$mpiexec" -np 1 "$train" "${tiny[@]}" --steps 2 --save "$cfgdir/ck" >/dev/null 2>&1
out="$("$mpiexec" -np 1 "$train" "${tiny[@]}" --steps 2 --resume "$cfgdir/ck" 2>&1)"
rc=$?
check "resume at the last step: exit $rc, '$out'" test $rc -eq 0
check "resume at the last step says so: '$out'" grep -q "is already at step 2 (--steps=2): nothing to train" <<<"$out"
# streamed weights train, recomputation on by default (the printed configuration says so) and off
# when asked, whatever the order of the flags
out="$("$mpiexec" -np 2 --oversubscribe --bind-to none "$train" "${tiny[@]}" --steps 2 --recompute=false --offload-params cpu --prefetch-layers 2 2>&1)"
check "--offload-params cpu --recompute=false: exit $?, '$out'" test $? -eq 0
check "--recompute=false before --offload-params cpu is kept: '$out'" grep -q "recompute.*off" <<<"$out"
out="$("$mpiexec" -np 1 "$train" "${tiny[@]}" --steps 2 --offload-params cpu 2>&1)"
check "--offload-params cpu: exit $?, '$out'" test $? -eq 0
check "--offload-params cpu turns recompute on: '$out'" grep -q "recompute.*on" <<<"$out"
rm -rf "$cfgdir"
echo "test_zoe_train_cli: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
