#!/usr/bin/env bash
# scripts/bench state_curve [STEPS] [STATES]: the 12-layer gpt2-124m shape trained on real text
# with each host optimizer state (docs/offload.md, "Compressed state"), one run after another on
# 1 rank with the machine's threads, the same seed and batches; prints one JSON object per run
# (mean loss of the last 50 steps, final validation loss) and a summary with each state's gap
# to fp32's, and plots the curves to $build/state_curve/state-curve.png.
#
# The text: the reStructuredText sources of the Python documentation (Debian's python3.X-doc,
# installed when missing: English prose with code, about 11 MB), one document per file. The
# tokenizer: byte-level BPE with 8192 tokens trained on that text by `tokenizers`, so the model
# is gpt2-124m's 12 x 768 with an 8192-token vocabulary (92M parameters). STEPS defaults to
# 1000 (micro-batch 2 x seq 128: 256K tokens); STATES to "fp32 bf16" (bf16: master, m and v;
# int8: a bf16 master with int8 m and v).
set -euo pipefail
build="$1"; shift
steps="${1:-1000}"
states="${2:-fp32 bf16}"
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${ZOE_PYTHON:-$build/venv/bin/python}"
work="$build/state_curve"
mkdir -p "$work"

sources="$(ls -d /usr/share/doc/python3.*/html/_sources 2>/dev/null | head -1 || true)"
if [ -z "$sources" ]; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get install -y python3-doc >/dev/null 2>&1 ||
    { $sudo apt-get update >/dev/null && $sudo apt-get install -y python3-doc >/dev/null; } ||
    { echo "bench state_curve: cannot install python3-doc (the text)" >&2; exit 2; }
  sources="$(ls -d /usr/share/doc/python3.*/html/_sources | head -1)"
fi
if [ ! -x "$python" ] || ! "$python" -c 'import tokenizers' 2>/dev/null; then
  echo "bench state_curve: needs a Python with tokenizers (ZOE_PYTHON, or scripts/test's $build/venv)" >&2
  exit 2
fi

if [ ! -f "$work/text.idx" ]; then
  "$python" - "$sources" "$work" <<'EOF'
import json, pathlib, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
sources, work = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
docs = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(sources.rglob("*.rst.txt"))]
with open(work / "text.jsonl", "w") as f:
    for d in docs:
        f.write(json.dumps({"text": d}) + "\n")
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(docs, trainers.BpeTrainer(
    vocab_size=8192, special_tokens=["<|endoftext|>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
tok.save(str(work / "tokenizer.json"))
print(f"bench state_curve: {len(docs)} documents, {sum(map(len, docs)) / 1e6:.1f} MB", file=sys.stderr)
EOF
  "$build/tools/zoe-data/zoe-data" --tokenizer "$work/tokenizer.json" --input "$work/text.jsonl" \
    --append-eod --output-prefix "$work/text" --threads "$(nproc)" >&2
fi

threads="$(nproc)"
export OMP_NUM_THREADS="$threads" OMP_WAIT_POLICY=passive OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for state in $states; do
  metrics="$work/state-$state.jsonl"
  case "$state" in # int8: a bf16 master with int8 moments
    fp32 | bf16) state_args=(--main-params-dtype "$state" --exp-avg-dtype "$state" --exp-avg-sq-dtype "$state") ;;
    int8) state_args=(--main-params-dtype bf16 --exp-avg-dtype int8 --exp-avg-sq-dtype int8) ;;
    *) echo "bench state_curve: no state '$state' (fp32, bf16, int8)" >&2; exit 2 ;;
  esac
  "$build/tools/zoe-train/zoe-train" --model gpt2-124m --vocab 8192 --seq-len 128 --micro-batch 2 \
    --data "$work/text" --split 99,1 --eval-every 250 --eval-iters 8 --steps "$steps" \
    --lr 6e-4 --min-lr 6e-5 --warmup 50 --seed 1234 --dpu auto --progress lines --log-every 100 \
    "${state_args[@]}" \
    --metrics "$metrics" >&2
  "$python" - "$metrics" "$state" "$threads" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
losses = [r["loss"] for r in rows if "loss" in r]
val = [r["val_loss"] for r in rows if "val_loss" in r]
print(json.dumps({"bench": "state_curve", "state": sys.argv[2], "threads": int(sys.argv[3]),
                  "steps": len(losses), "last50_mean": round(sum(losses[-50:]) / 50, 4),
                  "final_val_loss": round(val[-1], 4) if val else None}))
EOF
done | tee "$work/runs.jsonl"
"$python" - "$work/runs.jsonl" <<'EOF'
import json, sys
runs = {r["state"]: r for r in map(json.loads, open(sys.argv[1]))}
base = runs.get("fp32")
gaps = {s: round(r["last50_mean"] - base["last50_mean"], 4) for s, r in runs.items() if base and s != "fp32"}
print(json.dumps({"bench": "state_curve", "summary": True, "gap_last50": gaps, "goal": 0.05}))
EOF
files=()
for state in $states; do files+=("$state=$work/state-$state.jsonl"); done
"$root/scripts/plot-loss" "${files[0]}" "$work/state-curve.png" \
  "gpt2-124m (12 x 768, vocab 8192) on the Python docs: host optimizer state" "${files[@]:1}" >&2
