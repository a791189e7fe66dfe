#!/usr/bin/env bash
# zoe-train --init-from with broken Hugging Face directories: each stops with one line naming
# the problem and exit 2, before training. Made from the reference llama_scaled model in OUT.
# usage: bad_inputs.sh PYTHON MPIEXEC ZOE_TRAIN CORPUS OUT
set -euo pipefail
py=$1 mpiexec=$2 zoe_train=$3 corpus=$4 out=$5
good="$out/llama_scaled"
expect() { # NAME DIR TP WORDS...: zoe-train exits 2 and its message contains WORDS
    local name=$1 dir=$2 tp=$3
    shift 3
    set +e
    msg="$("$mpiexec" -np $tp --oversubscribe --bind-to none "$zoe_train" --init-from "$dir" \
        --tp $tp --data "$corpus" --steps 1 --warmup 0 --seq-len 16 --micro-batch 1 2>&1 >/dev/null)"
    code=$?
    set -e
    [[ $code -eq 2 ]] || { echo "FAIL $name: exit $code, want 2: $msg"; exit 1; }
    for w in "$@"; do
        [[ "$msg" == *"$w"* ]] || { echo "FAIL $name: '$w' not in: $msg"; exit 1; }
    done
    echo "ok $name: $msg"
}
variant() { rm -rf "$out/$1"; cp -r "$good" "$out/$1"; echo "$out/$1"; }

d=$(variant truncated)
truncate -s -100 "$d/model.safetensors"
expect truncated "$d" 1 model.safetensors

d=$(variant lying)
"$py" - "$d/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]
b = open(p, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
t = h["model.norm.weight"]
t["data_offsets"][1] += 4  # claims 4 more bytes than the data has
hb = json.dumps(h).encode()
hb += b" " * (-len(hb) % 8)
open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
PY
expect lying "$d" 1 model.safetensors

d=$(variant wrong_dtype)
"$py" - "$d/model.safetensors" <<'PY'
import sys
from safetensors.torch import load_file, save_file
p = sys.argv[1]
t = load_file(p)
t["model.norm.weight"] = t["model.norm.weight"].to(__import__("torch").float64)
save_file(t, p, metadata={"format": "pt"})
PY
expect wrong_dtype "$d" 1 model.norm.weight F64

d=$(variant missing)
"$py" - "$d/model.safetensors" <<'PY'
import sys
from safetensors.torch import load_file, save_file
p = sys.argv[1]
t = load_file(p)
del t["model.layers.1.self_attn.k_proj.weight"]
save_file(t, p, metadata={"format": "pt"})
PY
expect missing "$d" 1 "model.layers.1.self_attn.k_proj.weight"

d=$(variant unknown_arch)
sed -i 's/LlamaForCausalLM/MistralForCausalLM/' "$d/config.json"
expect unknown_arch "$d" 1 MistralForCausalLM

expect heads_tp "$good" 3 "not divisible" "tp=3"
