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
check max-model 0 "largest scaled GPT: .*B parameters" -- "$plan" --max-model --model 10b --hardware v100-32g --offload-ratio 0
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
