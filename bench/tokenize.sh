#!/usr/bin/env bash
# scripts/bench tokenize [ROUNDS] [MB]: MB/s of zoe-data against the tokenizers package's batch
# encode, same threads (2), same text, same run, GPT-2-style and Llama-3-style tokenizers
# trained on the spot; rounds alternate the two so a busy machine slows both alike. zoe's time
# includes reading the JSON lines and writing the dataset; tokenizers' is the faster of
# encode_batch and encode_batch_fast alone.
# The interpreter is $ZOE_PYTHON (or the build's venv) with tokenizers installed.
set -euo pipefail
build="$1"; shift
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${ZOE_PYTHON:-$build/venv/bin/python}"
export RAYON_NUM_THREADS="${THREADS:-2}" TOKENIZERS_PARALLELISM=true OMP_NUM_THREADS="${THREADS:-2}"
exec "$python" "$root/bench/tokenize.py" "$build/tools/zoe-data/zoe-data" "$root/data/demo-corpus.txt" "$@"
