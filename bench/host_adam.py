"""bench host_adam [LOG2_N] [REPS]: zoe.torch.HostAdam's step against torch.optim.AdamW (foreach,
and fused where this torch has a CPU fused AdamW) and DeepSpeed's DeepSpeedCPUAdam (where the
`deepspeed` package imports and its CPU op builds), on one parameter of 2^LOG2_N elements
(default 26), fp32 and bf16, at every thread count from 1 to the cores this process may use.

On bf16 parameters HostAdam runs in three state layouts (zoe-train's flags, docs/offload.md):
  zoe             fp32 master and moments (the default, DeepSpeed's): 28 bytes a parameter moved
  zoe_bf16_state  main_params_dtype="bf16" (the parameter itself), bf16 moments: 14 bytes
  zoe_int8_state  bf16 master, int8 moments (and a scale per 256): 10 bytes
and DeepSpeed in two: its default fp32 states (22 bytes) and fp32_optimizer_states=False (bf16
moments, 14); torch's fused AdamW keeps bf16 moments and no master (14). The bytes are those read
and written per parameter: master or parameter, moments, the gradient, and a separate copy of the
weights written.

Each thread count runs in a process of its own with OMP_NUM_THREADS set, so that every OpenMP
runtime in the process (torch's, zoe's, DeepSpeed's op's) uses that many; the optimizers' steps
are interleaved rep by rep so a busy machine slows each alike, and each figure is the median of
REPS (default 5) after a warm-up step. One JSON object per (dtype, threads, optimizer), then a
summary of the ratios against the goals: on bf16 parameters HostAdam's step (the compressed
layouts) at most 0.9 of DeepSpeed's (default states) and at most torch fused's.

Run as: PYTHONPATH=BUILD/python python -P bench/host_adam.py (-P: bench/tokenize.py would
shadow the standard library's tokenize). DeepSpeed, where it can be installed, beside it:
  pip install --target DIR --no-deps --no-build-isolation deepspeed==0.19.8 hjson py-cpuinfo \
      psutil msgpack einops
and PYTHONPATH=BUILD/python:DIR (its CPU op is compiled with ninja at the first use and kept in
TORCH_EXTENSIONS_DIR)."""
import json
import os
import statistics
import subprocess
import sys
import time

log2_n = int(sys.argv[1]) if len(sys.argv) > 1 else 26
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
n = 1 << log2_n
ARGS = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
ZOE_STATES = {"zoe": {},
              "zoe_bf16_state": dict(main_params_dtype="bf16", exp_avg_dtype="bf16",
                                     exp_avg_sq_dtype="bf16"),
              "zoe_int8_state": dict(main_params_dtype="bf16", exp_avg_dtype="int8",
                                     exp_avg_sq_dtype="int8")}
BYTES = {("fp32", "zoe"): 28, ("fp32", "torch_foreach"): 28, ("fp32", "torch_fused"): 28,
         ("fp32", "deepspeed"): 28, ("bf16", "zoe"): 28, ("bf16", "zoe_bf16_state"): 14,
         ("bf16", "zoe_int8_state"): 10, ("bf16", "torch_foreach"): 14,
         ("bf16", "torch_fused"): 14, ("bf16", "deepspeed"): 22, ("bf16", "deepspeed_bf16_state"): 14}


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def deepspeed_adam():
    """DeepSpeedCPUAdam, or the reason it is not compared."""
    try:
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        import torch
        DeepSpeedCPUAdam([torch.nn.Parameter(torch.zeros(4))])  # builds its op (JIT) here
        return DeepSpeedCPUAdam, ""
    except Exception as e:  # not installed, or its op does not build here
        return None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def make(kind, dtype, threads, ds):
    import torch
    import zoe.torch
    gen = torch.Generator().manual_seed(1)
    p = torch.nn.Parameter((torch.rand(n, generator=gen) - 0.5).to(dtype))
    p.grad = ((torch.rand(n, generator=gen) - 0.5) * 1e-2).to(dtype)
    if kind in ZOE_STATES:
        return zoe.torch.HostAdam([p], threads=threads, **ZOE_STATES[kind], **ARGS)
    if kind.startswith("deepspeed"):
        return ds([p], fp32_optimizer_states=kind == "deepspeed", **ARGS)
    if kind == "torch_fused":
        return torch.optim.AdamW([p], fused=True, **ARGS)
    return torch.optim.AdamW([p], foreach=True, **ARGS)


def fused_available(dtype):
    import torch
    try:
        make("torch_fused", dtype, 1, None).step()
        return True
    except (RuntimeError, TypeError):
        return False


def one_thread_count(threads: int) -> None:
    """The measurements at `threads` threads (this process has OMP_NUM_THREADS=threads)."""
    import torch
    torch.set_num_threads(threads)
    ds, why = deepspeed_adam()
    if ds is None and threads == 1:
        print(json.dumps({"bench": "host_adam", "deepspeed": "not compared", "why": why}))
    for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        kinds = ["zoe"] + (list(ZOE_STATES)[1:] if name == "bf16" else []) + ["torch_foreach"]
        kinds += ["torch_fused"] if fused_available(dtype) else []
        kinds += (["deepspeed"] + (["deepspeed_bf16_state"] if name == "bf16" else [])) if ds else []
        runs = {k: make(k, dtype, threads, ds) for k in kinds}
        times = {k: [] for k in kinds}
        cpu = {k: [] for k in kinds}
        for k in kinds:
            runs[k].step()  # warm-up: the state is allocated here
        for _ in range(reps):
            for k in kinds:
                t0, c0 = time.perf_counter(), time.process_time()
                runs[k].step()
                times[k].append(time.perf_counter() - t0)
                cpu[k].append(time.process_time() - c0)
        for k in kinds:
            med, med_cpu = statistics.median(times[k]), statistics.median(cpu[k])
            print(json.dumps({"bench": "host_adam", "dtype": name, "threads": threads,
                              "optimizer": k, "n": n, "bytes_per_param": BYTES[name, k],
                              "step_ms": round(1e3 * med, 2),
                              "step_cpu_ms": round(1e3 * med_cpu, 2),
                              "ns_per_param": round(1e9 * med / n, 3),
                              "gb_s": round(BYTES[name, k] * n / med * 1e-9, 2)}), flush=True)
        del runs


def main() -> int:
    if len(sys.argv) > 3 and sys.argv[3] == "--threads":  # a child: one thread count
        one_thread_count(int(sys.argv[4]))
        return 0
    lines = []
    for threads in range(1, cores() + 1):
        # idle OpenMP workers sleep, as scripts/bench has them (on a shared machine a spinning
        # worker takes a core another process is waiting for)
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        env.setdefault("OMP_WAIT_POLICY", "passive")
        out = subprocess.run([sys.executable, "-P", __file__, str(log2_n), str(reps), "--threads",
                              str(threads)], env=env, check=True, capture_output=True,
                             text=True).stdout
        for line in out.splitlines():
            if line.startswith("{"):
                print(line, flush=True)
                lines.append(json.loads(line))
    summary = {"bench": "host_adam", "summary": True, "n": n,
               "goals_bf16": {"deepspeed": 0.9, "torch_fused": 1.0}}
    for field in ("step_ms", "step_cpu_ms"):  # wall time, and process CPU time (all threads)
        ms = {(r["dtype"], r["threads"], r["optimizer"]): r[field] for r in lines if field in r}
        ratios, met = {}, {}
        for (dtype, threads, k), t in sorted(ms.items()):
            if k.startswith("zoe"):
                continue
            for z in ZOE_STATES:
                if (dtype, threads, z) in ms:
                    ratios[f"{z}_over_{k}_{dtype}_t{threads}"] = round(ms[dtype, threads, z] / t, 3)
        for (dtype, threads, k), t in sorted(ms.items()):
            if dtype == "bf16" and k in ("zoe_bf16_state", "zoe_int8_state"):
                for other, goal in summary["goals_bf16"].items():
                    if (dtype, threads, other) in ms:
                        met[f"{k}_over_{other}_t{threads}"] = t <= goal * ms[dtype, threads, other]
        kind = "wall" if field == "step_ms" else "cpu"
        summary[f"ratios_{kind}"], summary[f"met_{kind}"] = ratios, met
    summary["loadavg"] = round(os.getloadavg()[0], 1)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
