"""examples/research_loop.c in Python: a research trainer's own loop on zoe -- its own batches
(arithmetic progressions modulo the vocabulary, which a small GPT picks up in a few dozen steps)
and learning-rate rule, zoe doing TP x DP and ZeRO-Offload underneath.
    mpirun -np 2 python examples/research_loop.py      (PYTHONPATH=build/python, or pip install .)
"""
import numpy as np
from mpi4py import MPI

import zoe

SEQ, BATCH, VOCAB, STEPS = 32, 4, 64, 40


def make_batch(rng):
    """Each DP rank draws its own batches; the TP ranks of a DP group must see the same ones."""
    start, stride = rng.integers(0, VOCAB, (BATCH, 1)), rng.integers(1, 5, (BATCH, 1))
    seq = (start + stride * np.arange(SEQ + 1)) % VOCAB
    targets = seq[:, 1:].copy()
    targets[:, -1] = -1  # the last position has no next token: ignored
    return seq[:, :-1].astype(np.int32), targets.astype(np.int32)


world = MPI.COMM_WORLD
with zoe.Trainer(comm=world, model="demo", layers=2, hidden=64, heads=4, seq_len=SEQ,
                 vocab=VOCAB, tp=2 if world.size % 2 == 0 else 1, micro_batch=BATCH,
                 dpu_warmup=10) as trainer:
    for step in range(STEPS):
        for micro in range(2):  # gradient accumulation, by hand
            trainer.micro_batch(*make_batch(np.random.default_rng(
                1000 * step + 10 * micro + trainer.dp_rank)))
        stats = trainer.step(lr=2e-3 * min(1.0, (step + 1) / 5))  # our own schedule
        if world.rank == 0 and step % 10 == 9:
            print(f"step {step + 1:2d}  loss {stats.loss:.3f}  grad norm {stats.grad_norm:.3f}")
    trainer.finalize()  # collective: lands the last update
