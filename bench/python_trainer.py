"""bench python_trainer [STEPS] [ROUNDS]: the per-step cost of driving zoe from Python. The same
run (the demo model on the demo corpus, 1 rank, no DPU) trained by zoe-train and by zoe-train's
loop written in Python over zoe.Trainer (batches from zoe.Dataset's loader, as zoe-train takes
them), ROUNDS times each, alternating; each figure is the median wall time per step of a round,
both sides timed over the same steps after the first 10: zoe-train's from its metrics file (the
trainer's own step time, which leaves its loader out, so the ratio bounds the Python cost from
above), Python's around the whole loop body, the loader's fetch included; and, from the same Python run,
the loop body over the C trainer's own time for the step (StepStats.ms_total): what the binding
and the Python loader add. Prints one JSON object per round and a summary (goal: Python within
2% of zoe-train). Run as: PYTHONPATH=BUILD/python python -P bench/python_trainer.py BUILD."""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import zoe

build = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 200
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
run = dict(model="demo", data=os.path.join(root, "data", "demo-corpus.txt"), steps=steps,
           dpu="off", seed=1234, lr=3e-3, micro_batch=8)
flags = [f"--{k.replace('_', '-')}={v}" for k, v in run.items()]
skip = 10


def zoe_train_ms() -> float:
    with tempfile.TemporaryDirectory() as d:
        metrics = os.path.join(d, "m.jsonl")
        subprocess.run([os.path.join(build, "tools", "zoe-train", "zoe-train"), *flags,
                        "--progress=lines", "--log-every=1000", f"--metrics={metrics}"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows = [json.loads(line) for line in open(metrics)]
    return statistics.median(r["ms"] for r in rows[skip:])


def python_ms() -> float:
    with zoe.Trainer(**run) as tr:
        loader = zoe.Dataset(run["data"]).loader(
            seq_len=tr.seq_len, micro_batch=tr.micro_batch_size, grad_accum=tr.grad_accum,
            dp_size=tr.dp_size, dp_rank=tr.dp_rank, seed=run["seed"], vocab_size=tr.vocab)
        times, inside = [], []
        for step in range(steps):
            t0 = time.perf_counter()
            batches = [loader.fetch(step, m) for m in range(tr.grad_accum)]
            tr.begin_step(sum(zoe.count_targets(y) for _, y in batches))
            for x, y in batches:
                tr.micro_batch(x, y)
            stats = tr.step(tr.lr_at(step))
            times.append(time.perf_counter() - t0)
            inside.append(stats.ms_total)
        tr.finalize()
    return (statistics.median(1e3 * t for t in times[skip:]), statistics.median(inside[skip:]))


ratios = []
for r in range(rounds):
    c = zoe_train_ms()
    p, p_inside = python_ms()
    ratios.append((p / c, p / p_inside))
    print(json.dumps({"bench": "python_trainer", "round": r, "steps": steps,
                      "zoe_train_ms": round(c, 3), "python_ms": round(p, 3),
                      "python_trainer_ms": round(p_inside, 3), "ratio": round(p / c, 4),
                      "ratio_to_own_trainer": round(p / p_inside, 4)}))
print(json.dumps({"bench": "python_trainer", "summary": True,
                  "median_ratio": round(statistics.median(x for x, _ in ratios), 4),
                  "median_ratio_to_own_trainer": round(statistics.median(y for _, y in ratios), 4),
                  "goal": 1.02}))
