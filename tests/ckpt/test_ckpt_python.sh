#!/usr/bin/env bash
# Python's safetensors and transformers read zoe's checkpoints and its Hugging Face export
# (check_ckpt.py says what is compared). Needs the test environment's Python (ZOE_PYTHON):
# without it the test is skipped (77), except under CI=true, where it fails.
# usage: test_ckpt_python.sh HELPER ZOE_CKPT MPIEXEC CORPUS
set -euo pipefail
helper=$1 zoe_ckpt=$2 mpiexec=$3 corpus=$4
here="$(cd "$(dirname "$0")" && pwd)"
py="${ZOE_PYTHON:-}"
if [[ -z "$py" ]] || ! "$py" -c "import numpy, safetensors, torch, transformers" 2>/dev/null; then
    echo "test_ckpt_python: no Python with numpy, safetensors, torch, transformers (ZOE_PYTHON='$py');" \
        "scripts/test creates it in build/venv"
    [[ "${CI:-}" == "true" ]] && exit 1
    exit 77
fi
out="$(mktemp -d /tmp/zoe_ckpt_py_XXXXXX)"
trap 'rm -rf "$out"' EXIT
"$mpiexec" -np 2 --oversubscribe --bind-to none "$helper" "$out" "$corpus"
"$zoe_ckpt" export --hf "$out/hf" "$out/tp1"
"$py" "$here/check_ckpt.py" "$out" "$out/hf"
