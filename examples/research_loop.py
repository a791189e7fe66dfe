"""examples/research_loop.c in Python: a research trainer's own loop on zoe -- its own batches
(arithmetic progressions modulo the vocabulary, which a small GPT picks up in a few dozen steps)
and learning-rate rule, zoe doing TP x DP and ZeRO-Offload underneath.
    mpirun -np 2 python examples/research_loop.py
with the package installed (pip install .) or PYTHONPATH=build/python (a build that knows a
Python: docs/python.md). mpi4py is optional: without it zoe initialises MPI itself, and the world
size, which picks the grid, comes from the launcher's environment.
"""
import os

import numpy as np

import zoe

try:
    from mpi4py import MPI
except ImportError:
    MPI = None

SEQ, BATCH, VOCAB, STEPS = 32, 4, 64, 40


def make_batch(rng):
    """Each DP rank draws its own batches; the TP ranks of a DP group must see the same ones."""
    start, stride = rng.integers(0, VOCAB, (BATCH, 1)), rng.integers(1, 5, (BATCH, 1))
    seq = (start + stride * np.arange(SEQ + 1)) % VOCAB
    targets = seq[:, 1:].copy()
    targets[:, -1] = -1  # the last position has no next token: ignored
    return seq[:, :-1].astype(np.int32), targets.astype(np.int32)




def world_size():
    """mpi4py's COMM_WORLD size, or (without mpi4py) what Open MPI or a PMI launcher exports."""
    if MPI is not None:
        return MPI.COMM_WORLD.size
    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"):
        if name in os.environ:
            return int(os.environ[name])
    return 1  # a singleton: python examples/research_loop.py


with zoe.Trainer(model="demo", layers=2, hidden=64, heads=4, seq_len=SEQ, vocab=VOCAB,
                 tp=2 if world_size() % 2 == 0 else 1, micro_batch=BATCH,
                 dpu_warmup=10) as trainer:
    for step in range(STEPS):
        for micro in range(2):  # gradient accumulation, by hand
            trainer.micro_batch(*make_batch(np.random.default_rng(
                1000 * step + 10 * micro + trainer.dp_rank)))
        stats = trainer.step(lr=2e-3 * min(1.0, (step + 1) / 5))  # our own schedule
        if trainer.rank == 0 and step % 10 == 9:
            print(f"step {step + 1:2d}  loss {stats.loss:.3f}  grad norm {stats.grad_norm:.3f}")
    trainer.finalize()  # collective: lands the last update
