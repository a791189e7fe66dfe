"""zoe from Python: tensor parallelism x ZeRO-Offload training, as a library.

    import zoe
    with zoe.Trainer(model="demo", micro_batch=4, dpu_warmup=0) as trainer:
        loss = trainer.micro_batch(tokens, targets)      # numpy or torch CPU int32
        stats = trainer.step(lr=1e-3)
        trainer.finalize()

``zoe.Trainer`` (zoe/trainer.py), ``zoe.plan`` (plan.py), ``zoe.Tokenizer``, ``zoe.Dataset``
(data.py), ``zoe.torch.HostAdam`` (torch.py, imported on demand: it needs torch), and
``python -m zoe.train`` (zoe-train itself).

The binding is a CPython C extension module (zoe/_zoe.c), built by the repository's CMake
through scikit-build-core and linked with the same libraries as zoe's programs: nothing is
compiled when Python imports it (DeepSpeed's ops build with ninja at first use), array
arguments pass by the buffer protocol and DLPack without copies, and it binds only the public C
API (include/zoe). ctypes or cffi over a shared libzoe would have had to copy the layout of
every versioned config struct into Python, which the C compiler checks here, and a
shared libzoe is a second build of every layer.
"""
from __future__ import annotations

import os

# zoe's OpenMP regions alternate with the BLAS's threads; spinning OpenMP workers take their
# cores (zoe-train does the same, tools/zoe-train). libgomp reads this once, when it loads.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

# A CUDA build of zoe links the system's NCCL and CUDA libraries, and torch's CUDA wheels carry
# their own, often newer, under the same sonames (libnccl.so.2 ...). Whichever loads first serves
# the process: zoe's first leaves torch without symbols it needs ("undefined symbol:
# ncclCommResume" at `import torch`), torch's first serves zoe too (NCCL and the CUDA runtime
# keep their API across minor versions). So where torch is installed it is imported first.
import importlib.util  # noqa: E402

if importlib.util.find_spec("torch") is not None:
    import torch  # noqa: E402,F401

from . import _zoe  # noqa: E402
from .data import Dataset, Loader, Tokenizer, count_targets  # noqa: E402
from .errors import (CUDAError, Error, InternalError, InvalidArgument, IOFailure,  # noqa: E402
                     MPIError, NCCLError, OutOfMemory, Unsupported)
from .plan import plan, train_config  # noqa: E402
from .trainer import StepStats, Trainer  # noqa: E402

__version__ = "0.1.0"
API_VERSION: int = _zoe.API_VERSION

__all__ = ["Trainer", "StepStats", "plan", "train_config", "Tokenizer", "Dataset", "Loader",
           "count_targets", "Error", "InvalidArgument", "OutOfMemory", "MPIError", "CUDAError",
           "NCCLError", "IOFailure", "Unsupported", "InternalError"]
