"""Arrays from numpy or torch without copies: a numpy array as it is, a torch CPU tensor (or
anything with ``__dlpack__``) through DLPack, which shares its memory. The wrong dtype, shape or
layout is an error naming the argument, never a silent conversion."""
from __future__ import annotations

from typing import Any

import numpy as np

from .errors import InvalidArgument


def as_array(x: Any, name: str, dtype: Any, shape: tuple[int, ...] | None) -> np.ndarray:
    """``x`` as a C-contiguous numpy array of ``dtype`` (and ``shape`` when given), sharing its
    memory."""
    if isinstance(x, np.ndarray):
        a = x
    elif hasattr(x, "__dlpack__"):
        try:
            a = np.from_dlpack(x)
        except (BufferError, RuntimeError, TypeError, ValueError) as e:
            raise InvalidArgument(f"{name}: cannot share the tensor's memory ({e}); a CPU "
                                  "tensor is needed (.cpu(), .detach())") from None
    else:
        raise InvalidArgument(f"{name}: a numpy array or a torch CPU tensor is needed, not "
                              f"{type(x).__name__}")
    want = np.dtype(dtype)
    if a.dtype != want:
        raise InvalidArgument(f"{name}: dtype {a.dtype}, {want} is needed "
                              f"(.astype(np.{want}) or .to(torch.{want}))")
    if shape is not None and a.shape != tuple(shape):
        raise InvalidArgument(f"{name}: shape {tuple(a.shape)}, {tuple(shape)} is needed")
    if not a.flags.c_contiguous:
        raise InvalidArgument(f"{name}: the array is not C-contiguous (np.ascontiguousarray or "
                              ".contiguous() makes a copy that is)")
    return a
