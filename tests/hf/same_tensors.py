"""Import -> export is bit-exact: every tensor of the exported model.safetensors equals the
original Hugging Face file's, same names, shapes, dtype and bytes (a tied head's lm_head copy,
which zoe does not export, and causal-mask buffers excepted).
usage: same_tensors.py ORIGINAL_DIR EXPORTED_DIR"""
import sys

import numpy as np
from safetensors import safe_open


def read(d):
    with safe_open(d + "/model.safetensors", framework="np") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


a, b = read(sys.argv[1]), read(sys.argv[2])
skip = {"lm_head.weight"} - set(b)
names = sorted(set(a) - skip)
assert names == sorted(b), f"names differ: {sorted(set(names) ^ set(b))}"
for n in names:
    assert a[n].dtype == b[n].dtype and a[n].shape == b[n].shape, f"{n}: {a[n].shape} {b[n].shape}"
    assert np.array_equal(a[n].view(np.uint8), b[n].view(np.uint8)), f"{n}: bytes differ"
print(f"{sys.argv[2]}: {len(names)} tensors bit-exact with {sys.argv[1]}")
