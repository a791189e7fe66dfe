"""Independent readers of zoe's checkpoints (run by test_ckpt_python.sh).

1. Python's safetensors opens model.safetensors and optimizer.safetensors of a checkpoint
   written at TP=2 and one at TP=1; every tensor equals zoe's own tensor exactly (the TP
   layer's gather at TP=2, the optimizer partition at TP=1), with the same names and shapes.
2. transformers.GPT2LMHeadModel loads the Hugging Face export of the TP=1 checkpoint, and its
   logits on a batch equal zoe's. Tolerance: both compute in fp32 but in other orders
   (BLAS blocking, attention's online softmax against torch's two-pass one, the tanh of GELU),
   a few ulps per op through 2 layers (measured: 3e-7 at most); logits are O(1), so atol 1e-5
   and rtol 1e-5 (about 100 fp32 ulps) pass rounding and fail any misplaced weight, which
   moves logits by O(0.1).
"""
import json
import sys

import numpy as np
from safetensors import safe_open


def read(path):
    out = {}
    with safe_open(path, framework="np") as f:
        for name in f.keys():
            out[name] = f.get_tensor(name)
    return out


def latest(d):
    with open(d + "/latest") as f:
        return d + "/" + f.read().strip()


def same(file, ref, what):
    got = read(file)
    assert sorted(got) == sorted(ref), f"{what}: names differ: {sorted(set(got) ^ set(ref))}"
    for name, want in ref.items():
        assert got[name].shape == want.shape, f"{what}: {name} shape {got[name].shape} != {want.shape}"
        assert got[name].dtype == np.float32, f"{what}: {name} dtype {got[name].dtype}"
        assert np.array_equal(got[name], want), f"{what}: {name} differs"
    print(f"{what}: {len(ref)} tensors equal zoe's")


def main(out, hf):
    tp2, tp1 = latest(out + "/tp2"), latest(out + "/tp1")
    same(tp2 + "/model.safetensors", read(out + "/tp2-ref.safetensors"), "TP=2 model.safetensors")
    ref1 = read(out + "/tp1-ref.safetensors")
    same(tp1 + "/model.safetensors", {k: v for k, v in ref1.items() if "exp_avg" not in k},
         "TP=1 model.safetensors")
    same(tp1 + "/optimizer.safetensors", {k: v for k, v in ref1.items() if "exp_avg" in k},
         "TP=1 optimizer.safetensors")
    meta = json.load(open(tp1 + "/trainer.json"))
    assert meta["format"] == "zoe-checkpoint" and meta["step"] == 3, meta["step"]

    import torch
    import transformers

    batch = read(out + "/logits.safetensors")
    model = transformers.GPT2LMHeadModel.from_pretrained(hf).eval()
    with torch.no_grad():
        got = model(torch.from_numpy(batch["tokens"].astype(np.int64))).logits.numpy()
    want = batch["logits"]
    assert got.shape == want.shape, (got.shape, want.shape)
    err = np.abs(got - want)
    bound = 1e-5 + 1e-5 * np.abs(want)
    worst = float((err / bound).max())
    print(f"transformers logits vs zoe: max |diff| {err.max():.3e}, worst diff/tolerance {worst:.3f}")
    assert worst <= 1.0, "transformers' logits differ from zoe's beyond fp32 rounding"
    assert float(np.abs(want).max()) > 0.1, "logits are not trivially small"


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
