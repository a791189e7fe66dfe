#!/usr/bin/env bash
# zoe-generate as a user drives it, on a tiny GPT trained here for a few seconds on the demo
# corpus and saved: greedy output identical at TP 1, 2 and 4; the same seed gives the same
# sampled text at TP 1 and 2, another seed other text, and top-k 1 the greedy text; the
# generated text's per-token loss below random text's (generate_score); generation past the
# context alike at TP 1 and 2; bad input exits 2 with a line naming the value, and writes nothing
# to stdout.
# usage: test_generate_cli.sh ZOE_TRAIN ZOE_GENERATE GENERATE_SCORE MPIEXEC CORPUS
set -uo pipefail
train=$1 gen=$2 score=$3 mpiexec=$4 corpus=$5
work="$(mktemp -d /tmp/zoe_generate_cli_XXXXXX)"
trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
run() { "$mpiexec" -np "$1" --oversubscribe --bind-to none "${@:2}"; }
# one rank without mpirun (an MPI singleton): quicker to start
run1() { if [[ $1 == 1 ]]; then "${@:2}"; else run "$@"; fi; }

run 2 "$train" --data "$corpus" --layers 2 --hidden 64 --heads 4 --seq-len 128 --micro-batch 4 \
    --steps 60 --warmup 5 --dpu off --tp 2 --log-every 1000 --progress lines --save ck \
    > train.out 2>&1 || fail "training the tiny model failed: $(tail -3 train.out)"
tail -2 train.out

prompt="The old bear chases the leaf in the park. Then the bear"
for np in 1 2 4; do
    run $np "$gen" --checkpoint ck --prompt "$prompt" --max-new-tokens 60 --temperature 0 \
        > greedy$np.out 2> greedy$np.err || fail "greedy at TP $np: $(cat greedy$np.err)"
done
cmp -s greedy1.out greedy2.out || fail "greedy TP 2 differs from TP 1"
cmp -s greedy1.out greedy4.out || fail "greedy TP 4 differs from TP 1"
[[ -s greedy1.out ]] || fail "greedy produced nothing"
echo "greedy: $(head -c 200 greedy1.out | tr '\n' '|')"
run 1 "$gen" --checkpoint ck --prompt "$prompt" --max-new-tokens 60 --temperature 1.3 --top-k 1 \
    > top1.out 2>/dev/null || fail "top-k 1 failed"
cmp -s greedy1.out top1.out || fail "top-k 1 differs from greedy"

for np in 1 2; do
    run $np "$gen" --checkpoint ck --prompt "$prompt" --max-new-tokens 60 --seed 5 \
        > seed5_$np.out 2>/dev/null || fail "sampling at TP $np failed"
done
run 1 "$gen" --checkpoint ck --prompt "$prompt" --max-new-tokens 60 --seed 5 > seed5_again.out \
    2>/dev/null
run 1 "$gen" --checkpoint ck --prompt "$prompt" --max-new-tokens 60 --seed 6 --temperature 1.5 \
    --top-p 1 > seed6.out 2>/dev/null
cmp -s seed5_1.out seed5_again.out || fail "the same seed sampled different text"
cmp -s seed5_1.out seed5_2.out || fail "seed 5 at TP 2 differs from TP 1"
cmp -s seed5_1.out seed6.out && fail "seeds 5 and 6 sampled the same text"
echo "sampled: $(head -c 200 seed5_1.out | tr '\n' '|')"
printf '%s' "$prompt" > prompt.txt
run 2 "$gen" --checkpoint ck --prompt-file prompt.txt --max-new-tokens 60 --temperature 0 \
    > file.out 2>/dev/null || fail "--prompt-file failed"
cmp -s greedy1.out file.out || fail "--prompt-file differs from --prompt"

# past the context of 128: the cache rebuilt from its newest half, alike at TP 1 and 2
for np in 1 2; do
    run $np "$gen" --checkpoint ck --prompt "$prompt" --max-new-tokens 300 --seed 3 \
        > long$np.out 2>/dev/null || fail "300 new tokens at TP $np failed"
done
cmp -s long1.out long2.out || fail "300 new tokens: TP 2 differs from TP 1"
[[ $(wc -c < long1.out) -gt 150 ]] || fail "300 new tokens gave $(wc -c < long1.out) bytes"

for np in 1 2; do
    run $np "$score" ck "$corpus" || fail "generated text not below random text at $np ranks"
done

# bad input: exit 2, one line naming the value, nothing on stdout
bad() {
    local want=$1 np=$2
    shift 2
    run1 "$np" "$gen" "$@" > bad.out 2> bad.err
    local rc=$?
    [[ $rc == 2 ]] || fail "'$*' exited $rc, want 2"
    grep -q -- "$want" bad.err || fail "'$*' does not say '$want': $(head -2 bad.err)"
    [[ -s bad.out ]] && fail "'$*' wrote to stdout"
}
bad "no-such-dir" 1 --checkpoint no-such-dir --prompt x
bad "top-p 0" 1 --checkpoint ck --prompt x --top-p 0
bad "temperature -1" 1 --checkpoint ck --prompt x --temperature -1
bad "max-new-tokens 0" 1 --checkpoint ck --prompt x --max-new-tokens 0
bad "top-k 2.5" 1 --checkpoint ck --prompt x --top-k 2.5
bad "unknown option '--bogus'" 1 --checkpoint ck --prompt x --bogus
bad "tp 2 with 1 ranks" 1 --checkpoint ck --prompt x --tp 2
bad "exactly one of --prompt" 1 --checkpoint ck
bad "exactly one of --prompt" 1 --checkpoint ck --prompt x --prompt-file prompt.txt
bad "not divisible by --tp=3" 3 --checkpoint ck --prompt x
bad "nope.json" 1 --checkpoint ck --prompt x --tokenizer nope.json
bad "needs a value" 1 --checkpoint ck --prompt
bad "backend gpu" 1 --checkpoint ck --prompt x --backend gpu

if ((failures)); then
    echo "test_generate_cli: $failures failed"
    exit 1
fi
echo "test_generate_cli: passed"
