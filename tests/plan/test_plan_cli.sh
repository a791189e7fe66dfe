#!/usr/bin/env bash
# zoe-plan's report, JSON, search and max-model, its errors, and zoe-train's plan options
# (--offload-ratio q and auto, --dpu auto, --no-plan-check's neighbours in the option table).
# Arguments: zoe-plan, zoe-train, mpiexec, a data file.
set -u
plan="$1" train="$2" mpiexec="$3" data="$4"
fails=0
check() { # check NAME EXPECTED_EXIT PATTERN -- command...
    local name="$1" want="$2" pattern="$3"
    shift 4
    local out
    out="$("$@" 2>&1)"
    local rc=$?
    if [[ $rc -ne $want ]] || ! grep -qE -- "$pattern" <<<"$out"; then
        echo "FAIL $name: exit $rc (want $want), pattern '$pattern' in:"
        echo "$out" | head -20
        fails=$((fails + 1))
    else
        echo "ok   $name"
    fi
}
check headline 0 "The run fits: GPU 20.0. of 32.00 GiB" -- "$plan" --model 70b --hardware dgx2 --tp 16
check headline-why 0 "host adam binds" -- "$plan" --model 70b --hardware dgx2 --tp 16
check no-offload 0 "does not fit: GPU: .* > 32.0 GiB" -- "$plan" --model 70b --hardware dgx2 --tp 16 --offload-ratio 0
check json 0 '^\{"model":\{"name":"70b".*"fits":true' -- "$plan" --model 70b --hardware dgx2 --tp 16 --json
check search 0 "^ +16 +1 +8 +on +on" -- "$plan" --search --model 70b --hardware dgx2
# nothing fits: exit 1 and a line saying so (the JSON form printed nothing at all)
check search-none 1 "^zoe-plan --search: none of [0-9]+ combinations fits" -- "$plan" --search --model 70b --hardware v100-32g
check search-none-json 1 "^zoe-plan --search: none of [0-9]+ combinations fits" -- "$plan" --search --model 70b --hardware v100-32g --json
check max-model 0 "largest GPT of GPT-3's family .*: 19 layers x hidden 2432: 1.48B parameters" -- "$plan" --max-model --hardware v100-32g --offload-ratio 0
check max-model-run 0 "micro-batch 1 x seq 2048, vocabulary 50257, fp16, recompute on" -- "$plan" --max-model --hardware v100-32g
check max-model-json 0 '"seq_len":4096,"vocab":128256,"micro_batch":2,"recompute":false,.*"scaled_layers":[0-9]+,"scaled_hidden":[0-9]+' -- "$plan" --max-model --hardware h200 --seq-len 4096 --vocab 128256 --micro-batch 2 --no-recompute --json
check max-model-preset-run 0 "largest preset: 70b .* at its documented run: micro-batch 8 x seq 1024" -- "$plan" --max-model --hardware dgx2 --tp 16 --state int8
check max-model-model 2 "max-model scales GPT-3's family" -- "$plan" --max-model --model 10b
check stream 0 "weights ring \(fp16\) .* streamed: 1 \+ 1 layer parts of 0.04, the embedding's 0.07 held" -- "$plan" --model 70b --hardware dgx2 --tp 16 --offload-params cpu --state int8
check stream-json 0 '"offload_params":"cpu".*"stream":\{"prefetch":[0-9]+,.*"hide_micro_batch":[0-9]+' -- "$plan" --model 13b --hardware h200 --offload-params cpu --json
check stream-max 0 "copies hide behind compute from micro-batch [0-9]+" -- "$plan" --max-model --hardware v100-32g --offload-params cpu --state int8 --main-grads-dtype fp16
check bad-offload-params 2 "--offload-params: 'gpu' is not cpu, nvme or none" -- "$plan" --offload-params gpu
# the drive tier (docs/plan.md, "Drives"): its goal, its JSON, its search, its refusals in one line
check nvme-max 0 "224 layers x hidden 28672: 2211.34B parameters; .*does not fit: GPU memory" -- "$plan" --max-model --hardware dgx2 --tp 16 --offload nvme --offload-params nvme --state int8 --main-grads-dtype fp16
check nvme-max-ring 0 "2 \+ 1 layer parts in a ring \(1.43 GiB with the embedding\)" -- "$plan" --max-model --hardware dgx2 --tp 16 --offload nvme --offload-params nvme --state int8 --main-grads-dtype fp16
check nvme-json 0 '"offload_params":"nvme","offload":"nvme".*"drives":\{"drives":8,.*"grads":false' -- "$plan" --model 13b --hardware dgx2 --offload nvme --offload-params nvme --json
check nvme-search 0 "^ +1 +1 +[0-9]+ +o[nf]+ +o[nf]+ +1.00 +(gpu|host|drives) +drives" -- "$plan" --search --model 13b --hardware h200 --tiers all --top 3
check_one() { # a refusal: exit 2, one line
    local name="$1" pattern="$2"
    shift 3
    check "$name" 2 "$pattern" -- "$@"
    local lines
    lines="$("$@" 2>&1 | wc -l)"
    if [[ $lines -ne 1 ]]; then
        echo "FAIL $name: $lines lines, want one"
        fails=$((fails + 1))
    fi
}
check_one nvme-no-drives "--offload nvme on dgx2: 0 drives" -- "$plan" --model 13b --hardware dgx2 --offload nvme --drives 0
check_one nvme-local "--offload nvme on local: 0 drives" -- "$plan" --model demo --offload nvme
check_one nvme-params-alone "--offload-params nvme without --offload nvme" -- "$plan" --model 13b --hardware dgx2 --offload-params nvme
check_one nvme-grads-alone "gradient partition on drives without --offload nvme" -- "$plan" --model 13b --hardware dgx2 --offload-grads nvme
check_one nvme-ratio "--offload nvme with --offload-ratio 0.5" -- "$plan" --model 13b --hardware dgx2 --offload nvme --offload-ratio 0.5
check_one nvme-bad-drives "--drive-tb=-1 is not a positive figure" -- "$plan" --drive-tb -1
check prefetch-alone 2 "--prefetch-layers=2 needs --offload-params cpu" -- "$plan" --prefetch-layers 2
check stream-ratio 2 "with --offload-ratio 0.5: streamed weights keep" -- "$plan" --model 13b --hardware h200 --offload-params cpu --offload-ratio 0.5
check auto-ratio 0 "--offload-ratio auto chose" -- "$plan" --model 13b --hardware v100-32g --offload-ratio auto
check local 0 "^on local: this machine" -- "$plan" --model demo
check bad-hardware 2 "unknown hardware 'nope'" -- "$plan" --hardware nope
check bad-tp 2 "exceeds the 16 GPUs" -- "$plan" --model 70b --hardware dgx2 --tp 32
check bad-ratio 2 "offload-ratio=2" -- "$plan" --offload-ratio 2
check missing-value 2 "^zoe-plan: option --model needs a value" -- "$plan" --model
run=("$train" --model demo --data "$data" --steps 2 --warmup 0 --progress lines)
check ratio-half 0 "optimizer on the host for 50%" -- "${run[@]}" --offload-ratio 0.5
check ratio-auto 0 "offload-ratio auto: 0 of the optimizer state on the host" -- "${run[@]}" --offload-ratio auto
check dpu-auto 0 "dpu auto: off .*DPU hides nothing" -- "${run[@]}" --dpu auto
check dpu-off 0 "DPU off" -- "${run[@]}" --dpu off
check plan-logged 0 "zoe-train: plan on local: fits" -- "${run[@]}"
check train-bad-ratio 2 "--offload-ratio=1.5 is out of range" -- "${run[@]}" --offload-ratio 1.5
check train-bad-dpu 2 "--dpu: 'maybe' is not on, off or auto" -- "${run[@]}" --dpu maybe
check train-hardware 2 "the run does not fit: GPU" -- "$train" --model 70b --hardware dgx2 \
  --data "$data" --steps 2 --warmup 0 --progress lines
[[ $fails -eq 0 ]] && echo "test_plan_cli: all passed" || echo "test_plan_cli: $fails failed"
exit $((fails > 0))
