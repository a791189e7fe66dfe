#!/usr/bin/env bash
# The program outputs that README.md and docs/ quote, where the program is deterministic and
# quick: each row names the file, the text it quotes and the command that prints it. The test
# fails when the file no longer quotes the text or the program no longer prints it, so a figure
# that moves is corrected in the docs in the same change. (The demo's final loss is deterministic
# too, but its 600 steps take a minute or more on 2 cores; `scripts/demo` prints it.)
# In a sanitizer build (SANITIZE, the build's ZOE_SANITIZE, not empty) only zoe-plan's rows run:
# test_plan_paper and test_plan_state run there as tests of their own, and this build's quotes
# are checked in scripts/test's build; under ASan each of those runs costs half a minute.
set -u
usage="usage: test_quoted_outputs.sh REPO_ROOT BUILD_DIR [SANITIZE]"
root="${1:?$usage}"
build="$(cd "${2:?$usage}" && pwd)"
sanitize="${3:-}"
plan="$build/tools/zoe-plan/zoe-plan"
paper="$build/tests/plan/test_plan_paper"
state="$build/tests/plan/test_plan_state"
# file | quoted text | command
rows=(
  "README.md|host 1079.5 of 1382.4 GiB available (29.7% of host memory spare); a step takes 21.24 s, host adam binds.|$plan --model 70b --hardware dgx2 --tp 16"
  "README.md|GPU 20.02 of 32|$plan --model 70b --hardware dgx2 --tp 16"
  "README.md|51.97B|$plan --max-model --hardware dgx2 --tp 16 --state fp32"
  "README.md|101.21B|$plan --max-model --hardware dgx2 --tp 16 --state bf16"
  "README.md|101.21B|$plan --max-model --hardware dgx-a100-80g --tp 8 --state fp32"
  "README.md|174.60B|$plan --max-model --hardware dgx-a100-80g --tp 8 --state bf16"
  "README.md|2211.34B|$plan --max-model --hardware dgx2 --tp 16 --offload nvme --offload-params nvme --state int8 --main-grads-dtype fp16"
  "README.md|528.98B|$plan --max-model --hardware v100-32g --offload nvme --offload-params nvme --state int8 --main-grads-dtype fp16"
  "docs/plan.md|4698.61B|$plan --max-model --hardware dgx-a100-80g --tp 8 --offload nvme --offload-params nvme --state int8 --main-grads-dtype bf16"
  "docs/plan.md|32.3 TFLOPS predicted|$paper"
  "docs/plan.md|1.47B (19 x 2432|$paper"
  "docs/plan.md|fits, host 1080 of 1536 GiB (29.7% spare)|$paper"
  "docs/plan.md|70.8B with offload|$paper"
  "docs/plan.md|22.1B with TP alone (48 x 6144|$paper"
  "README.md|174.60B|$plan --max-model --hardware dgx2 --tp 16 --state int8"
  "README.md|174.60B|$plan --max-model --hardware dgx2 --tp 16 --state int8 --main-grads-dtype fp16"
  "docs/offload.md|174.60B|$plan --max-model --hardware dgx2 --tp 16 --state auto"
  "README.md|221.87B|$plan --max-model --hardware dgx-a100-80g --tp 8 --state int8"
  "README.md|276.99B|$plan --max-model --hardware dgx-a100-80g --tp 8 --state int8 --main-grads-dtype bf16"
  "docs/plan.md|13.83B|$plan --max-model --hardware v100-32g --state int8 --main-grads-dtype fp16"
  "README.md|241.59B|$plan --max-model --hardware v100-32g --offload-params cpu --state int8 --main-grads-dtype fp16"
  "README.md|323.85B|$plan --max-model --hardware dgx-a100-80g --offload-params cpu --state int8 --main-grads-dtype bf16"
  "docs/plan.md|241.59B|$plan --max-model --hardware v100-32g --offload-params cpu --state int8 --main-grads-dtype fp16"
  "docs/plan.md|GPU 11.5 GiB, host 1345.1 GiB|$plan --max-model --hardware dgx2 --tp 16 --state int8 --seq-len 4096 --vocab 128256 --offload-params cpu"
  "docs/plan.md|19.45B|$plan --max-model --hardware h200 --offload-params cpu --state int8 --main-grads-dtype bf16"
  "docs/plan.md|131.91 s|$plan --max-model --hardware v100-32g --offload-params cpu --state int8 --main-grads-dtype fp16"
  "docs/plan.md|175.59B|$plan --max-model --hardware dgx2 --tp 16 --state int8 --seq-len 4096 --vocab 128256"
  "docs/offload.md|DGX-2 TP=16 51.97B -> 101.21B -> 174.60B -> 174.60B|$state"
  "docs/offload.md|A100-80GB TP=8 101.21B -> 174.60B -> 221.87B -> 276.99B|$state"
  "docs/offload.md|host Adam 5.18 s (0.467 of fp32's|$state"
  "docs/offload.md|host Adam 11.10 s -> 6.66 s (0.600)|$state"
)
fails=0
declare -A printed # command -> its output: each command runs once, however many rows quote it
for row in "${rows[@]}"; do
  IFS='|' read -r file quote cmd <<<"$row"
  [[ -n "$sanitize" && "$cmd" != "$plan "* ]] && continue
  if ! grep -qF -- "$quote" "$root/$file"; then
    echo "FAIL $file no longer quotes: $quote"
    fails=$((fails + 1))
    continue
  fi
  [[ -v printed["$cmd"] ]] || printed["$cmd"]="$($cmd 2>&1)"
  out="${printed["$cmd"]}"
  if ! grep -qF -- "$quote" <<<"$out"; then
    echo "FAIL $file quotes '$quote' but '$cmd' prints:"
    echo "$out" | tail -5
    fails=$((fails + 1))
  fi
done
n=${#rows[@]}
[[ -n "$sanitize" ]] && n=$(printf '%s\n' "${rows[@]}" | grep -c "|$plan ")
echo "test_quoted_outputs: $((n - fails)) passed, $fails failed"
exit $((fails > 0))
