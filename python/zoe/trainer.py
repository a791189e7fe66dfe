"""zoe.Trainer: zoe's trainer (include/zoe/train.h, checkpoint.h) driven from Python."""
from __future__ import annotations

import dataclasses
import json
import numbers
from typing import Any, Iterable

import numpy as np

from . import _zoe
from ._arrays import as_array
from ._options import as_flags
from .errors import InvalidArgument

_STEP_MAX = 2**31 - 1  # a step is a C int
_FLOAT32_MAX = float(np.finfo(np.float32).max)


@dataclasses.dataclass(frozen=True)
class StepStats:
    """One step's figures (``zoe_step_stats``): the loss over the global batch's counted
    targets, the gradient norm before clipping, where the step's time went (ms), and the most
    bytes the device allocator held at once since the trainer was created, on the fullest rank
    (``device_peak_bytes``; the ``device_memory`` keyword caps it). With the gradient on drives,
    ``ms_grad_wait`` is the time its accumulation waited for them (else 0), inside
    ``ms_backward`` and ``ms_offload``."""

    step: int
    loss: float
    lr: float
    grad_norm: float
    loss_scale: float
    skipped: bool
    overlapped: bool
    tokens: int
    ms_total: float
    ms_forward: float
    ms_backward: float
    ms_offload: float
    ms_host_step: float
    ms_refresh: float
    ms_optimizer: float
    redone: bool
    device_peak_bytes: int
    ms_grad_wait: float


def _comm_handle(comm: Any) -> int:
    """The MPI_Comm handle of an mpi4py communicator (any one: COMM_WORLD or a split of it);
    for None, mpi4py's COMM_WORLD, or MPI_COMM_WORLD initialised here without mpi4py."""
    if comm is None:
        try:
            from mpi4py import MPI
        except ImportError:
            return _zoe.comm_world()
        comm = MPI.COMM_WORLD
    try:
        from mpi4py import MPI
    except ImportError:
        raise InvalidArgument("comm: an mpi4py communicator needs mpi4py") from None
    if not isinstance(comm, MPI.Comm) or comm == MPI.COMM_NULL:
        raise InvalidArgument(f"comm: an mpi4py communicator is needed, not {comm!r}")
    return MPI._handleof(comm)


class Trainer:
    """A GPT or Llama trained with tensor parallelism and ZeRO-Offload on the ranks of ``comm``.

    ``options`` are zoe-train's flags as keyword arguments (``model="demo"``,
    ``micro_batch=4``, ``dpu_warmup=0``, ``config="run.json"``...), parsed and validated by the
    library, so a bad one raises the :class:`zoe.InvalidArgument` that zoe-train would print.
    Creating is collective over ``comm`` (an mpi4py communicator; None: COMM_WORLD).

    The outputs are zoe-train's too: ``metrics="run.jsonl"`` writes its line per step (rank 0;
    a resumed run keeps the lines of its earlier steps), ``save="ckpt"`` saves every
    ``save_every`` steps and at ``finalize`` (keeping ``keep_last``), ``resume=`` loads a
    checkpoint at creation. As zoe-train, creating refuses (with the one line zoe-train prints)
    a metrics file that cannot be written, a save directory that cannot be written, is in use
    by another run or holds another run's checkpoints (unless ``resume`` names it), and one
    whose disk cannot hold a checkpoint; rank 0 checks and every rank raises.

    A step is ``micro_batch`` ``grad_accum`` times, then ``step``; both collective over the grid
    as in the C API. ``finalize`` (collective) ends a run; ``destroy`` (local, also on leaving a
    ``with`` block or when collected) frees this rank's share, so an error path on one rank
    needs no other.
    """

    def __init__(self, *, comm: Any = None, **options: Any) -> None:
        self._handle = None
        self._handle = _zoe.trainer_create(_comm_handle(comm), as_flags(options))
        info = _zoe.trainer_info(self._handle)
        self.micro_batch_size: int = info["micro_batch"]
        self.seq_len: int = info["seq_len"]
        self.vocab: int = info["vocab"]
        self.grad_accum: int = info["grad_accum"]
        self._batch_shape = (self.micro_batch_size, self.seq_len)

    # ---- lifetime ----
    def _live(self):
        if self._handle is None:
            raise InvalidArgument("the trainer was destroyed")
        return self._handle

    def finalize(self) -> None:
        """Collective: lands a delayed update still in flight, so the weights are the latest."""
        _zoe.trainer_finalize(self._live())

    def destroy(self) -> None:
        """Local: frees this rank's trainer without communicating; later calls raise."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            _zoe.trainer_destroy(handle)

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.destroy()

    def __del__(self) -> None:
        self.destroy()

    # ---- facts ----
    @property
    def config(self) -> dict[str, Any]:
        """The run's configuration keyed by option name (zoe-train --config reads it back)."""
        return json.loads(_zoe.trainer_config_json(self._live()))

    def _info(self, key: str) -> int:
        return _zoe.trainer_info(self._live())[key]

    @property
    def param_count(self) -> int:
        """Parameters of the model as built (padded vocabulary), over all TP ranks."""
        return self._info("param_count")

    @property
    def rank(self) -> int:
        return self._info("rank")

    @property
    def dp_rank(self) -> int:
        return self._info("dp_rank")

    @property
    def dp_size(self) -> int:
        return self._info("dp_size")

    @property
    def steps_done(self) -> int:
        """Steps taken, counting those of a loaded checkpoint."""
        return self._info("steps_done")

    def lr_at(self, step: int) -> float:
        """The configured schedule's learning rate at 0-based ``step`` (zoe_train_lr_at), a step
        in [0, 2^31 - 1]."""
        if isinstance(step, bool) or not isinstance(step, numbers.Integral):
            raise InvalidArgument(f"lr_at: step={step!r} is not an integer")
        if not 0 <= step <= _STEP_MAX:
            raise InvalidArgument(f"lr_at: step={step} is out of range [0, {_STEP_MAX}]")
        return _zoe.trainer_lr_at(self._live(), int(step))

    # ---- training ----
    def _batch(self, tokens: Any, targets: Any, mask: Any = None):
        tokens = as_array(tokens, "tokens", np.int32, self._batch_shape)
        targets = as_array(targets, "targets", np.int32, self._batch_shape)
        if mask is not None:
            if not isinstance(mask, np.ndarray) and hasattr(mask, "__dlpack__"):
                mask = np.from_dlpack(mask)
            mask = np.asarray(mask)
            if mask.shape != self._batch_shape:
                raise InvalidArgument(f"mask: shape {mask.shape}, {self._batch_shape} is needed")
            targets = np.where(mask.astype(bool), targets, np.int32(-1)).astype(np.int32)
        return tokens, targets

    def begin_step(self, counted_targets: int) -> None:
        """Declares this rank's count of counted targets over the step's micro-batches, so the
        loss and gradient are the mean over the global batch's targets (zoe-train does this).
        Collective over the DP group."""
        _zoe.trainer_begin_step(self._live(), int(counted_targets))

    def micro_batch(self, tokens: Any, targets: Any, mask: Any = None) -> float:
        """Forward and backward of one micro-batch: int32 ``tokens`` and ``targets`` of shape
        (micro_batch, seq_len), numpy arrays or torch CPU tensors, used in place (no copy);
        ``targets`` may hold -1 to ignore a position, or ``mask`` (same shape, false: ignored)
        says which count. Returns this rank's micro-batch mean loss."""
        tokens, targets = self._batch(tokens, targets, mask)
        return _zoe.trainer_micro_batch(self._live(), tokens, targets)

    def step(self, lr: float | None = None) -> StepStats:
        """The optimizer step over the micro-batches since the last, at ``lr`` (None: the
        configured schedule's). Collective over the grid."""
        handle = self._live()
        if lr is None:
            lr = self.lr_at(self.steps_done)
        # the library takes a float32: a value it would round to infinity is refused as given
        if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or \
                not (0 <= float(lr) <= _FLOAT32_MAX):
            raise InvalidArgument(f"step: lr={lr!r} is not a learning rate in [0, {_FLOAT32_MAX:g}]")
        return StepStats(**_zoe.trainer_step(handle, float(lr)))

    def flush(self) -> None:
        """Waits for a delayed update in flight. Collective."""
        _zoe.trainer_flush(self._live())

    def eval(self, batches: Iterable[tuple[Any, Any]]) -> float:
        """The mean loss over every counted target of the (tokens, targets) micro-batches given
        on every rank, with the latest weights, leaving the run exactly as it was. Collective
        over the grid (each rank may pass its own share of the batches; TP ranks the same)."""
        handle = self._live()
        _zoe.trainer_eval_begin(handle)
        for tokens, targets in batches:
            tokens, targets = self._batch(tokens, targets)
            _zoe.trainer_eval_micro_batch(handle, tokens, targets)
        return _zoe.trainer_eval_end(handle)

    def logits(self, tokens: Any) -> np.ndarray:
        """fp32 logits [micro_batch, seq_len, vocab] of int32 ``tokens`` with the weights the next
        forward reads, on every rank. Collective over the TP group."""
        tokens = as_array(tokens, "tokens", np.int32, self._batch_shape)
        out = np.empty(self._batch_shape + (self.vocab,), dtype=np.float32)
        _zoe.trainer_logits(self._live(), tokens, out)
        return out

    # ---- checkpoints: the same files as zoe-train's --save and --resume ----
    def save(self, directory: str, keep_last: int = 0) -> str:
        """Saves the state after the last step into ``directory``/step-NNNNNNNN (collective)
        and keeps the ``keep_last`` newest (0: all). Returns the checkpoint's path."""
        return _zoe.trainer_save(self._live(), str(directory), int(keep_last))

    def load(self, path: str) -> str:
        """Loads a checkpoint, or a directory's newest (collective), saved at any grid. Returns
        the checkpoint's path."""
        return _zoe.trainer_load(self._live(), str(path))
