"""bench host_adam [LOG2_N] [REPS]: zoe.torch.HostAdam's step against torch.optim.AdamW (foreach,
and fused where this torch has a CPU fused AdamW) on one parameter of 2^LOG2_N elements (default
26), fp32 and bf16, at 1 and 2 threads; the optimizers' steps are interleaved rep by rep so a
busy machine slows each alike, and each figure is the median of REPS (default 5) after a warm-up
step. One JSON object per (dtype, threads, optimizer), then a summary of the ratios.
DeepSpeed's CPU Adam is compared, in C on the same driver, by `scripts/bench deepspeed_adam`.
Run as: PYTHONPATH=BUILD/python python -P bench/host_adam.py (-P: bench/tokenize.py would
shadow the standard library's tokenize)."""
import json
import statistics
import sys
import time

import torch

import zoe.torch

log2_n = int(sys.argv[1]) if len(sys.argv) > 1 else 26
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
n = 1 << log2_n


def make(kind, dtype, threads):
    gen = torch.Generator().manual_seed(1)
    p = torch.nn.Parameter((torch.rand(n, generator=gen) - 0.5).to(dtype))
    p.grad = ((torch.rand(n, generator=gen) - 0.5) * 1e-2).to(dtype)
    args = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    if kind == "zoe":
        return p, zoe.torch.HostAdam([p], threads=threads, **args)
    if kind == "torch_fused":
        return p, torch.optim.AdamW([p], fused=True, **args)
    return p, torch.optim.AdamW([p], foreach=True, **args)


def fused_available(dtype):
    try:
        p, opt = make("torch_fused", dtype, 1)
        opt.step()
        return True
    except (RuntimeError, TypeError):
        return False


ratios = {}
for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
    kinds = ["zoe", "torch_foreach"] + (["torch_fused"] if fused_available(dtype) else [])
    for threads in (1, 2):
        torch.set_num_threads(threads)
        runs = {k: make(k, dtype, threads) for k in kinds}
        times = {k: [] for k in kinds}
        for k in kinds:
            runs[k][1].step()  # warm-up: the state is allocated here
        for _ in range(reps):
            for k in kinds:
                t0 = time.perf_counter()
                runs[k][1].step()
                times[k].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        for k in kinds:
            print(json.dumps({"bench": "host_adam", "dtype": name, "threads": threads,
                              "optimizer": k, "n": n, "step_ms": round(1e3 * med[k], 2),
                              "ns_per_param": round(1e9 * med[k] / n, 3)}))
        for k in kinds[1:]:
            ratios[f"{k}_over_zoe_{name}_t{threads}"] = round(med[k] / med["zoe"], 2)
        del runs
print(json.dumps({"bench": "host_adam", "summary": True, "ratios": ratios, "goal_torch": 3.0}))
