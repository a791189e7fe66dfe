#!/usr/bin/env bash
# transformers writes tiny random GPT-2 and Llama models with their logits, loss and gradients
# (make_reference.py); zoe loads each at TP = 1, 2 and 4 and reproduces them
# (test_hf_reference.c). Then zoe-train's bad inputs: each a one-line error and exit 2.
# Needs the test environment's Python (ZOE_PYTHON): without it the test is skipped (77),
# except under CI=true, where it fails.
# usage: test_hf_reference.sh TEST_BINARY MPIEXEC ZOE_TRAIN CORPUS
set -euo pipefail
bin=$1 mpiexec=$2 zoe_train=$3 corpus=$4
here="$(cd "$(dirname "$0")" && pwd)"
py="${ZOE_PYTHON:-}"
if [[ -z "$py" ]] || ! "$py" -c "import safetensors, torch, transformers" 2>/dev/null; then
    echo "test_hf_reference: no Python with safetensors, torch, transformers (ZOE_PYTHON='$py')"
    [[ "${CI:-}" == "true" ]] && exit 1
    exit 77
fi
out="$(mktemp -d /tmp/zoe_hf_XXXXXX)"
trap 'rm -rf "$out"' EXIT
"$py" "$here/make_reference.py" "$out" >/dev/null 2>&1
for np in 1 2 4; do
    "$mpiexec" -np $np --oversubscribe --bind-to none "$bin" "$out/gpt2" "$out/llama_scaled" \
        "$out/llama_tied"
done
bash "$here/bad_inputs.sh" "$py" "$mpiexec" "$zoe_train" "$corpus" "$out"
