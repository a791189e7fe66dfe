"""Tokenizers, datasets and the loader (include/zoe/tokenizer.h, data.h) from Python."""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from . import _zoe
from ._arrays import as_array


class Tokenizer:
    """A tokenizer.json (BPE, as Hugging Face ``tokenizers`` writes it) or, with no path, zoe's
    byte tokenizer. Encodes exactly as ``tokenizers`` does (no normaliser, no BOS)."""

    def __init__(self, tokenizer_json: str | None = None, eod_token: str | None = None) -> None:
        self._handle = _zoe.tokenizer_load(None if tokenizer_json is None else str(tokenizer_json),
                                           eod_token)
        info = _zoe.tokenizer_info(self._handle)
        self.vocab_size: int = info["vocab_size"]
        self.eod: int = info["eod"]  # -1: none

    @staticmethod
    def _bytes(text: str | bytes) -> bytes:
        return text.encode("utf-8") if isinstance(text, str) else bytes(text)

    def encode(self, text: str | bytes) -> np.ndarray:
        """int32 token ids of ``text`` (str, or bytes taken as UTF-8 with invalid bytes
        replaced, as Python decodes them)."""
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: Iterable[str | bytes]) -> list[np.ndarray]:
        """``encode`` of each text, with the GIL released while each is encoded."""
        raw = _zoe.tokenizer_encode_batch(self._handle, [self._bytes(t) for t in texts])
        return [np.frombuffer(r, dtype=np.int32) for r in raw]

    def decode(self, tokens: Any) -> str:
        """The text of int32 ``tokens`` (special tokens produce nothing)."""
        tokens = as_array(tokens, "tokens", np.int32, None)
        return _zoe.tokenizer_decode(self._handle, tokens).decode("utf-8", errors="replace")


class Dataset:
    """An indexed dataset (PREFIX.bin + PREFIX.idx, Megatron's format, as zoe-data writes it)
    or a .txt file tokenised with the byte tokenizer; memory-mapped, validated at open."""

    def __init__(self, prefix: str) -> None:
        self._handle = _zoe.dataset_open(str(prefix))
        info = _zoe.dataset_info(self._handle)
        self.name: str = info["name"]
        self.dtype: str = info["dtype"]
        self.tokens: int = info["tokens"]
        self.documents: int = info["documents"]
        self.sequences: int = info["sequences"]

    def __len__(self) -> int:
        return self.documents

    def read(self, offset: int, count: int) -> np.ndarray:
        """Stream tokens [offset, offset + count) as int32."""
        out = np.empty(int(count), dtype=np.int32)
        _zoe.dataset_read(self._handle, int(offset), int(count), out)
        return out

    def __getitem__(self, doc: int) -> np.ndarray:
        """Document ``doc``'s tokens."""
        offset, length = _zoe.dataset_document(self._handle, int(doc))
        return self.read(offset, length)

    def loader(self, *, seq_len: int, micro_batch: int, grad_accum: int = 1, dp_size: int = 1,
               dp_rank: int = 0, seed: int = 1234, vocab_size: int = 0) -> "Loader":
        """zoe-train's loader over this dataset (see :class:`Loader`)."""
        return Loader(self, seq_len=seq_len, micro_batch=micro_batch, grad_accum=grad_accum,
                      dp_size=dp_size, dp_rank=dp_rank, seed=seed, vocab_size=vocab_size)


class Loader:
    """zoe-train's batches: sequence windows of ``seq_len + 1`` tokens in a seeded order per
    epoch, DP rank ``dp_rank``'s share of each global batch. A pure function of its arguments, so
    ``fetch(step, micro)`` gives zoe-train's micro-batch ``micro`` of step ``step``."""

    def __init__(self, dataset: Dataset, *, seq_len: int, micro_batch: int, grad_accum: int = 1,
                 dp_size: int = 1, dp_rank: int = 0, seed: int = 1234,
                 vocab_size: int = 0) -> None:
        self.dataset = dataset  # the loader reads through it
        self._handle = _zoe.loader_create(dataset._handle, seq_len, micro_batch, dp_size,
                                          dp_rank, grad_accum, seed, vocab_size)
        self.shape = (micro_batch, seq_len)
        info = _zoe.loader_info(self._handle)
        self.sequences: int = info["sequences"]
        self.steps_per_epoch: int = info["steps_per_epoch"]

    def fetch(self, step: int, micro_step: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(tokens, targets), int32 [micro_batch, seq_len] each."""
        tokens = np.empty(self.shape, dtype=np.int32)
        targets = np.empty(self.shape, dtype=np.int32)
        _zoe.loader_fetch(self._handle, int(step), int(micro_step), tokens.size, tokens, targets)
        return tokens, targets


def count_targets(targets: Any) -> int:
    """Targets that count (not -1) in an int32 array (zoe_count_targets)."""
    return _zoe.count_targets(as_array(targets, "targets", np.int32, None))
