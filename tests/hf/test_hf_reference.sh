#!/usr/bin/env bash
# transformers writes tiny random GPT-2 and Llama models with their logits, loss and gradients
# (make_reference.py); zoe loads each at TP = 1, 2 and 4 and reproduces them
# (test_hf_reference.c). Then zoe-train's bad inputs: each a one-line error and exit 2.
# Needs the test environment's Python (ZOE_PYTHON): without it the test is skipped (77),
# except under CI=true, where it fails.
# Then import -> export bit-exact, and a fine-tune at TP=2 x DP=2 exported and loaded back.
# usage: test_hf_reference.sh TEST_BINARY MPIEXEC ZOE_TRAIN ZOE_CKPT CORPUS
set -euo pipefail
bin=$1 mpiexec=$2 zoe_train=$3 zoe_ckpt=$4 corpus=$5
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
        "$out/llama_tied" "$out/gpt2_fp16" "$out/llama_bf16"
done
bash "$here/bad_inputs.sh" "$py" "$mpiexec" "$zoe_train" "$corpus" "$out"

# Import -> export, bit-exact: each model through zoe-train at TP=2 x DP=2 with learning rate 0
# (the fp32 master weights stay the imported values), a checkpoint, zoe-ckpt export --hf; with
# the weights on the device and streamed from the host (imported a layer at a time through the
# stream's buffers into the host partition). At --seq-len 16 GPT-2's 64-row position table
# comes back whole.
for params in none cpu; do
    for m in gpt2 llama_scaled llama_tied; do
        seq=16
        "$mpiexec" -np 4 --oversubscribe --bind-to none "$zoe_train" --init-from "$out/$m" --tp 2 \
            --seq-len $seq --micro-batch 1 --steps 1 --warmup 0 --lr 0 --min-lr 0 \
            --dpu-warmup 0 --offload-params $params --data "$corpus" --save "$out/ck_${m}_$params" \
            --progress lines >/dev/null
        "$zoe_ckpt" export --hf "$out/exp_${m}_$params" "$out/ck_${m}_$params"
        "$py" "$here/same_tensors.py" "$out/$m" "$out/exp_${m}_$params"
    done
done

# Fine-tune at TP=2 x DP=2, export, and transformers' from_pretrained on the export agrees with
# zoe on the same directory: its logits, loss and gradients (made by transformers from the
# exported files) are what zoe computes after importing them, at TP = 1 and 2.
"$mpiexec" -np 4 --oversubscribe --bind-to none "$zoe_train" --init-from "$out/llama_scaled" \
    --tp 2 --seq-len 16 --micro-batch 2 --steps 5 --lr 1e-2 --warmup 1 --dpu-warmup 2 \
    --data "$corpus" --save "$out/ft" --progress lines >/dev/null
"$zoe_ckpt" export --hf "$out/ft_hf" "$out/ft" > "$out/export.out"
grep -q "wrote a Hugging Face LlamaForCausalLM" "$out/export.out" ||
    { echo "FAIL: a Llama export says: $(cat "$out/export.out")"; exit 1; }
"$zoe_ckpt" info "$out/ft" | grep -q "(llama): .* KV heads" ||
    { echo "FAIL: info of a Llama: $("$zoe_ckpt" info "$out/ft" | grep model)"; exit 1; }
"$py" "$here/make_reference.py" --from "$out/ft_hf" >/dev/null 2>&1
"$py" - "$out/llama_scaled" "$out/ft_hf" <<'PY'
import sys
from safetensors import safe_open
a = safe_open(sys.argv[1] + "/model.safetensors", "np")
b = safe_open(sys.argv[2] + "/model.safetensors", "np")
moved = sum(not (a.get_tensor(k) == b.get_tensor(k)).all() for k in b.keys())
assert moved == len(list(b.keys())), f"fine-tuning changed only {moved} tensors"
PY
for np in 1 2; do
    "$mpiexec" -np $np --oversubscribe --bind-to none "$bin" "$out/ft_hf"
done

# GPT-2 fine-tuned at TP=2 below its 64 positions, with weight decay: the export keeps the whole
# table (n_positions 64), rows 16..63 bit-identical to the import (no gradient, no decay), rows
# 0..15 trained; transformers' logits on the export are zoe's (test_hf_reference.c's tolerance).
"$mpiexec" -np 2 --oversubscribe --bind-to none "$zoe_train" --init-from "$out/gpt2" --tp 2 \
    --seq-len 16 --micro-batch 2 --steps 3 --lr 1e-2 --warmup 1 --weight-decay 0.1 \
    --data "$corpus" --save "$out/ft_gpt2" --progress lines >/dev/null
"$zoe_ckpt" info "$out/ft_gpt2" | grep -q "seq 16, positions 64," ||
    { echo "FAIL: info of a GPT-2 at seq 16: $("$zoe_ckpt" info "$out/ft_gpt2" | grep model)"; exit 1; }
"$zoe_ckpt" export --hf "$out/ft_gpt2_hf" "$out/ft_gpt2" >/dev/null
"$py" - "$out/gpt2" "$out/ft_gpt2_hf" <<'PY'
import sys
import torch
from transformers import GPT2LMHeadModel
a = GPT2LMHeadModel.from_pretrained(sys.argv[1]).transformer.wpe.weight.detach()
model = GPT2LMHeadModel.from_pretrained(sys.argv[2])
b = model.transformer.wpe.weight.detach()
assert model.config.n_positions == 64, f"n_positions {model.config.n_positions}"
assert b.shape == a.shape, f"wpe {tuple(b.shape)}, the import's {tuple(a.shape)}"
assert torch.equal(a[16:].view(torch.int32), b[16:].view(torch.int32)), "rows 16.. changed"
assert (a[:16] != b[:16]).any(dim=1).all(), "a trained row of wpe did not change"
PY
"$py" "$here/make_reference.py" --from "$out/ft_gpt2_hf" >/dev/null 2>&1
for np in 1 2; do
    "$mpiexec" -np $np --oversubscribe --bind-to none "$bin" "$out/ft_gpt2_hf"
done
