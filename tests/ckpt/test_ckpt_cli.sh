#!/usr/bin/env bash
# zoe-train and zoe-ckpt with checkpoints, as a user drives them: keep-last; a crash at a chosen
# byte of a save and kill -9 at random moments, after which the previous checkpoint verifies and
# resumes; corrupted checkpoints (truncated file, flipped byte, bad header, missing file,
# another model), each refused with a message naming file and tensor, exit 2, nothing written;
# SIGTERM and SIGUSR1 to mpirun (a SIGCONT from elsewhere ignored) and SIGTERM to one rank of 4,
# each saving and resuming bit for bit; no --save; a second SIGINT.
# usage: test_ckpt_cli.sh ZOE_TRAIN ZOE_CKPT MPIEXEC CORPUS
set -uo pipefail
train=$1 ckpt=$2 mpiexec=$3 corpus=$4
work="$(mktemp -d /tmp/zoe_ckpt_cli_XXXXXX)"
trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
small=(--data "$corpus" --layers 2 --hidden 64 --heads 4 --seq-len 32 --micro-batch 2
       --dpu-warmup 2 --log-every 1000 --progress lines)
run() { "$mpiexec" -np "$1" --oversubscribe --bind-to none "${@:2}"; }
losses() { sed -E 's/.*"step":([0-9]+),"loss":([0-9.]+).*/\1 \2/' "$1"; }
under_way() { # metrics file: waits (10 s at most) until the run has logged a step
    for _ in $(seq 100); do [[ -s "$1" ]] && return; sleep 0.1; done
}

# ---- keep-last, and the run every later case resumes ----
run 2 "$train" "${small[@]}" --tp 2 --steps 12 --save ck --save-every 3 --keep-last 2 \
    --metrics ref.jsonl > keep.out 2>&1 || fail "training with --save failed: $(tail -3 keep.out)"
[[ "$(ls ck | tr '\n' ' ')" == "latest step-00000009 step-00000012 " ]] ||
    fail "--keep-last 2 left: $(ls ck | tr '\n' ' ')"
[[ "$(cat ck/latest)" == "step-00000012" ]] || fail "latest is '$(cat ck/latest)'"
"$ckpt" verify ck > verify.out 2>&1 || fail "verify of a good checkpoint: $(cat verify.out)"
"$ckpt" info ck | grep -q "TP 2 x DP 1" || fail "info does not show the grid"
"$ckpt" info ck | grep -q "(gpt): 2 layers, hidden 64, 4 heads, 4 KV heads" ||
    fail "info does not name the family and KV heads: $("$ckpt" info ck | grep model)"
# export into a directory whose parents do not exist yet (mkdir -p), naming the class it wrote
"$ckpt" export --hf deep/er/hf ck > export.out 2>&1 || fail "export into deep/er/hf: $(cat export.out)"
grep -q "wrote a Hugging Face GPT2LMHeadModel to deep/er/hf" export.out ||
    fail "export says: $(cat export.out)"
[[ -f deep/er/hf/config.json && -f deep/er/hf/model.safetensors ]] || fail "export wrote: $(ls -R deep)"
# the uninterrupted reference to 20 steps
run 2 "$train" "${small[@]}" --tp 2 --steps 20 --metrics full.jsonl > full.out 2>&1 ||
    fail "reference run failed"

# ---- a crash at a chosen byte of a save: the previous checkpoint survives ----
cp -r ck crash
ZOE_CKPT_TEST_CRASH_AT=300000 run 2 -x ZOE_CKPT_TEST_CRASH_AT "$train" "${small[@]}" --tp 2 \
    --steps 15 --save crash --save-every 3 --resume crash > crash.out 2>&1 &&
    fail "the crash hook did not crash the save"
[[ -d crash/step-00000015.partial && ! -d crash/step-00000015 ]] ||
    fail "after a crash mid-save: $(ls crash | tr '\n' ' ')"
[[ "$(cat crash/latest)" == "step-00000012" ]] || fail "latest moved to '$(cat crash/latest)'"
"$ckpt" verify crash > /dev/null 2>&1 || fail "the previous checkpoint does not verify after a crash"
run 2 "$train" "${small[@]}" --tp 2 --steps 15 --save crash --resume crash --metrics crash.jsonl \
    > crash2.out 2>&1 || fail "resume after a crash: $(tail -2 crash2.out)"
[[ -d crash/step-00000015 && ! -d crash/step-00000015.partial ]] || fail "the retried save"

# ---- kill -9 of a rank at random moments of a run that saves every step ----
cp -r ck kill
for i in 1 2 3 4 5; do
    before="$(cat kill/latest)"
    ZOE_CKPT_TEST_SLOW_MS=30 run 2 -x ZOE_CKPT_TEST_SLOW_MS "$train" "${small[@]}" --tp 2 \
        --steps 100000 --save kill --save-every 1 --keep-last 2 --resume kill > kill.out 2>&1 &
    # once the run has saved a step (10 s at most), a random moment of the next 2 s: a step and
    # its slowed save take about 0.15 s, so the kill falls anywhere in the save
    for _ in $(seq 100); do [[ "$(cat kill/latest 2>/dev/null)" != "$before" ]] && break; sleep 0.1; done
    sleep "$(awk -v s=$RANDOM 'BEGIN { printf "%.2f", (s % 200) / 100 }')"
    victim=$(pgrep -f "^$train .*--save kill" | shuf -n 1)
    [[ -n "$victim" ]] && kill -9 "$victim"
    wait
    "$ckpt" verify kill > kill-verify.out 2>&1 || fail "kill -9 round $i: $(cat kill-verify.out)"
    echo "kill -9 round $i: latest $(cat kill/latest), $(ls kill | grep -c partial) partial"
done
echo "kill -9 loop ended at $(cat kill/latest)"

# ---- corrupted checkpoints: message, exit 2, nothing written ----
expect_refused() { # name, fragment, zoe-train args...
    local name=$1 fragment=$2
    shift 2
    local before after
    before=$(find bad -type f -exec md5sum {} + | sort)
    local base=() k # small without the option the row changes: an option is given once
    for ((k = 0; k < ${#small[@]}; k += 2)); do
        [[ "${small[k]}" == "${1:-}" ]] || base+=("${small[k]}" "${small[k + 1]}")
    done
    # a refused run: mpirun ends it at once (cmake/ZoeTargets.cmake, ZOE_TEST_REFUSED_RUNS_ENV)
    run 2 --mca odls_base_sigkill_timeout 0 "$train" "${base[@]}" --tp 2 --steps 14 --save bad \
        --resume bad "$@" > "$name.out" 2>&1
    local code=$?
    [[ $code -eq 2 ]] || fail "$name: exit $code, not 2"
    grep -q -- "$fragment" "$name.out" || fail "$name: no '$fragment' in: $(grep zoe-train "$name.out")"
    after=$(find bad -type f -exec md5sum {} + | sort)
    [[ "$before" == "$after" ]] || fail "$name: the checkpoint directory changed"
}
fresh() { rm -rf bad && cp -r ck bad; }
size=$(stat -c %s ck/step-00000012/model.safetensors)
fresh && truncate -s $((size - 100)) bad/step-00000012/model.safetensors
expect_refused truncated "model.safetensors"
grep -q "previous checkpoint is bad/step-00000009" truncated.out || fail "no pointer to the previous checkpoint"
"$ckpt" verify bad > v.out 2>&1; [[ $? -eq 1 ]] || fail "verify of a truncated file: not exit 1"
fresh && printf '\x55' | dd of=bad/step-00000012/optimizer.safetensors bs=1 seek=$((size / 2 * 3)) conv=notrunc 2>/dev/null
expect_refused flipped "corrupted"
grep -qE "tensor [a-z_0-9.]+\.exp_avg" flipped.out || fail "flipped byte: the tensor is not named"
"$ckpt" verify bad > v.out 2>&1; [[ $? -eq 1 ]] && grep -q "checksum" v.out || fail "verify of a flipped byte"
fresh && printf 'X' | dd of=bad/step-00000012/model.safetensors bs=1 seek=12 conv=notrunc 2>/dev/null
expect_refused header "model.safetensors"
# a byte flipped inside a tensor's name in the header: said to be the header's damage, not another
# model (the name of the second layer's first tensor, "h.1.", turned into "h.7.")
at=$(grep -abo '"h\.1\.' ck/step-00000012/model.safetensors | head -1 | cut -d: -f1)
fresh && printf '7' | dd of=bad/step-00000012/model.safetensors bs=1 seek=$((at + 3)) conv=notrunc 2>/dev/null
expect_refused renamed "the safetensors header is corrupt: the entry of data bytes [0-9]*\.\.[0-9]* is named \"h\.7\."
fresh && rm bad/step-00000012/optimizer.safetensors
expect_refused missing "optimizer.safetensors"
fresh && expect_refused other-shape "tensor wte is F32 \[257, 64\] in the file but F32 \[257, 96\]" --hidden 96
fresh && expect_refused other-depth "has no tensor h.2" --layers 3
fresh && expect_refused other-batch "global batch" --micro-batch 4

# ---- signals ----
# SIGTERM to one rank of 4: the ranks agree, save, one line, exit 0, resumable bit for bit
# (mpirun is started directly in the background, so that $! is mpirun itself)
# A constant learning rate: the schedule then does not depend on --steps, so a reference run of
# stop + 3 steps follows the same trajectory as the endless run that was stopped.
flat="--warmup 0 --lr 1e-3 --min-lr 1e-3"
endless() { echo "$train" "${small[@]}" $flat --tp 2 --steps 20000 --save "$1" --metrics "$1.jsonl"; }
"$mpiexec" -np 4 --oversubscribe --bind-to none $(endless sig_rank) > sig_rank.out 2>&1 & mpid=$!
under_way sig_rank.jsonl
kill -TERM "$(pgrep -f "^$train .*--save sig_rank" | shuf -n 1)"
wait $mpid; code=$?
[[ $code -eq 0 ]] || fail "SIGTERM to one rank: exit $code"
[[ $(grep -c "saved step" sig_rank.out) -eq 1 ]] || fail "SIGTERM to one rank: $(tail -2 sig_rank.out)"
grep -q "Terminated: saved step [0-9]* to sig_rank/step-[0-9]*; resume with --resume sig_rank" sig_rank.out ||
    fail "SIGTERM line: $(grep saved sig_rank.out)"
stop=$(sed -n 's/.*saved step \([0-9]*\).*/\1/p' sig_rank.out)
run 4 "$train" "${small[@]}" $flat --tp 2 --steps $((stop + 3)) --metrics sig_full.jsonl > /dev/null 2>&1
cp sig_rank.jsonl sig_res.jsonl
run 4 "$train" "${small[@]}" $flat --tp 2 --steps $((stop + 3)) --resume sig_rank --metrics sig_res.jsonl \
    > sig_res.out 2>&1 || fail "resume after SIGTERM: $(tail -2 sig_res.out)"
diff <(losses sig_full.jsonl) <(losses sig_res.jsonl) > /dev/null ||
    fail "resumed after SIGTERM: losses differ from the uninterrupted run"
# SIGUSR1 to mpirun: forwarded to every rank
"$mpiexec" -np 4 --oversubscribe --bind-to none $(endless sig_usr1) > sig_usr1.out 2>&1 & mpid=$!
under_way sig_usr1.jsonl
# a SIGCONT from anyone but mpirun (a shell's fg) is no stop request
kill -CONT $(pgrep -P $mpid)
sleep 1.5
[[ ! -e sig_usr1/latest ]] || fail "a SIGCONT from the shell stopped the run"
kill -USR1 $mpid
wait $mpid; code=$?
[[ $code -eq 0 ]] && grep -q "saved step" sig_usr1.out || fail "SIGUSR1 to mpirun: exit $code, $(tail -1 sig_usr1.out)"
"$ckpt" verify sig_usr1 > /dev/null 2>&1 || fail "SIGUSR1 checkpoint does not verify"
# SIGTERM to mpirun (what a scheduler sends). Open MPI's mpirun kills the job: SIGCONT to the
# ranks at once, SIGTERM odls_base_sigkill_timeout (here 6) s later, SIGKILL as long after that.
# The ranks stop at the SIGCONT: the checkpoint is there before the SIGTERM is sent (on today's
# main with a long timeout they trained on until it). mpirun exits 1 after its own SIGTERM
# (Open MPI's rule); the ranks exit 0 and say so.
"$mpiexec" -np 4 --oversubscribe --bind-to none --mca odls_base_sigkill_timeout 6 \
    $(endless sig_mpirun) > sig_mpirun.out 2>&1 & mpid=$!
for _ in $(seq 100); do [[ -e sig_mpirun.jsonl ]] && break; sleep 0.1; done
sleep 1
kill -TERM $mpid
signalled=$SECONDS
for _ in $(seq 50); do [[ -e sig_mpirun/latest ]] && break; sleep 0.1; done
[[ -e sig_mpirun/latest ]] || fail "SIGTERM to mpirun: no checkpoint 5 s after it (before mpirun's SIGTERM)"
saved_after=$((SECONDS - signalled))
wait $mpid
grep -q "mpirun is ending the job: saved step" sig_mpirun.out ||
    fail "SIGTERM to mpirun: $(tail -2 sig_mpirun.out)"
"$ckpt" verify sig_mpirun > /dev/null 2>&1 || fail "SIGTERM-to-mpirun checkpoint does not verify"
echo "SIGTERM to mpirun: saved ${saved_after} s after the signal"
# without --save: a clear message, exit 0
"$mpiexec" -np 2 --oversubscribe --bind-to none "$train" "${small[@]}" --tp 2 --steps 20000 \
    --metrics nosave.jsonl > nosave.out 2>&1 & mpid=$!
under_way nosave.jsonl
kill -USR1 $mpid
wait $mpid; code=$?
[[ $code -eq 0 ]] && grep -q "nothing saved (no --save given)" nosave.out || fail "no --save: exit $code, $(tail -1 nosave.out)"
# a second SIGINT during the (slowed) save stops at once, and the save is not committed
ZOE_CKPT_TEST_SLOW_MS=3000 "$train" "${small[@]}" --steps 20000 --save twice --metrics twice.jsonl \
    > twice.out 2>&1 & tpid=$!
under_way twice.jsonl
kill -INT $tpid
sleep 1.5
kill -INT $tpid
wait $tpid; code=$?
[[ $code -eq 130 ]] || fail "second SIGINT: exit $code, not 130"
[[ ! -e twice/latest ]] || fail "a save interrupted by the second SIGINT was committed"

echo "test_ckpt_cli: $failures failed"
[[ $failures -eq 0 ]]
