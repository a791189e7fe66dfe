"""zoe's errors: one class per ``zoe_status`` code (include/zoe/status.h), each carrying the
library's one-line message and the code.

Every failure of a zoe call raises a subclass of :class:`Error`; :class:`InvalidArgument` (also a
``ValueError``) is what bad input raises, whether the Python layer or the C library found it.
"""
from __future__ import annotations

from . import _zoe


class Error(Exception):
    """A zoe call failed. ``status`` is the ``zoe_status`` code, ``message`` the library's line."""

    status: int = 0

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status

    @property
    def status_name(self) -> str:
        """The code's English name, as ``zoe_status_string`` gives it ("invalid argument")."""
        return _zoe.status_string(self.status)


class InvalidArgument(Error, ValueError):
    """ZOE_ERR_INVALID_ARGUMENT: a value out of range or inconsistent with others."""
    status = 1


class OutOfMemory(Error, MemoryError):
    """ZOE_ERR_OUT_OF_MEMORY: a host or device allocation failed."""
    status = 2


class MPIError(Error):
    """ZOE_ERR_MPI: an MPI call failed."""
    status = 3


class CUDAError(Error):
    """ZOE_ERR_CUDA: a CUDA runtime or cuBLAS call failed."""
    status = 4


class NCCLError(Error):
    """ZOE_ERR_NCCL: an NCCL call failed."""
    status = 5


class IOFailure(Error):
    """ZOE_ERR_IO: a file could not be opened, read or written."""
    status = 6


class Unsupported(Error):
    """ZOE_ERR_UNSUPPORTED: a valid request that this build or backend cannot do."""
    status = 7


class InternalError(Error):
    """ZOE_ERR_INTERNAL: a broken invariant, a bug in zoe."""
    status = 8


# Indexed by status code, for the extension module to raise.
_BY_STATUS = (Error, InvalidArgument, OutOfMemory, MPIError, CUDAError, NCCLError, IOFailure,
              Unsupported, InternalError)
_zoe._register_errors(_BY_STATUS)
