# SPDX-License-Identifier: Apache-2.0
"""The exceptions tensorfetch raises: one class per CLI exit code, with a common base.

Every message names the file, tensor, URL and byte range involved, as the CLI's do.

- ``TensorfetchError`` (base; exit code 1: usage or other errors)
  - ``FormatError`` (2): not valid safetensors, or a bad index
  - ``NetworkError`` (3): network or remote error (not found, auth, rate limit after retries)
  - ``IntegrityError`` (4): a hash mismatch, or the source changed during the read
  - ``TensorNotFoundError`` (1, also a ``KeyError``): no tensor of that name or glob
  - ``NotFoundError`` (1, also a ``FileNotFoundError``): a local location that does not exist
  - ``NotFetchedError`` (1): offline, and the bytes are not in the cache
  - ``CancelledError`` (1): a progress callback returned False
  - ``DtypeError`` (1, also a ``TypeError``): the framework has no such dtype (BF16 in NumPy,
    F8 in torch < 2.1); the bytes are never reinterpreted as another type
  - ``SliceError`` (1, also an ``IndexError``): an index of ``get_slice(...)[...]`` out of range
    or not supported; with ``framework="np"`` in safetensors' words (its ``SafetensorError``)
- Ctrl-C during a fetch raises ``KeyboardInterrupt`` once the fetch has stopped.

And one warning class:

- ``StaleCacheWarning`` (a ``UserWarning``): on open, the cache held bytes of a file that differ
  from those its server sends now under the same URL, ETag and size (the file was rewritten
  without its ETag changing); they were retired (never served again) and the file is fetched
  afresh.
"""
from __future__ import annotations

__all__ = [
    "TensorfetchError",
    "FormatError",
    "NetworkError",
    "IntegrityError",
    "TensorNotFoundError",
    "NotFoundError",
    "NotFetchedError",
    "CancelledError",
    "DtypeError",
    "SliceError",
    "StaleCacheWarning",
]


class TensorfetchError(Exception):
    """Base of every tensorfetch error.

    Attributes:
        code: the library's error code name, e.g. ``"HoleOrOverlap"`` (``""`` when raised by the
            Python layer itself).
        exit_code: the CLI's exit code for this error (1, 2, 3 or 4).
    """

    exit_code: int = 1

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message


class FormatError(TensorfetchError):
    """The file is not valid safetensors, or the index is bad (CLI exit code 2)."""

    exit_code = 2


class NetworkError(TensorfetchError):
    """A network or remote error: unreachable, not found, unauthorized, rate limited after the
    retries, a response that breaks the protocol (CLI exit code 3)."""

    exit_code = 3


class IntegrityError(TensorfetchError):
    """A hash mismatch, or the file changed on the server during the read (CLI exit code 4)."""

    exit_code = 4


class TensorNotFoundError(TensorfetchError, KeyError):
    """No tensor has this name (or no tensor matches this glob)."""


class NotFoundError(TensorfetchError, FileNotFoundError):
    """A local file or directory that does not exist."""


class NotFetchedError(TensorfetchError):
    """A remote tensor's bytes are not in the cache, and cannot be fetched (offline)."""


class CancelledError(TensorfetchError):
    """A progress callback returned False; what arrived whole stays in the cache."""


class DtypeError(TensorfetchError, TypeError):
    """The framework asked for has no dtype for this tensor (e.g. BF16 in NumPy)."""


class SliceError(TensorfetchError, IndexError):
    """An index of ``get_slice(...)[...]`` that is out of range for the tensor's shape, or of a
    kind not supported (a non-empty list). Where safetensors raises its ``SafetensorError`` for
    the same index (``framework="np"``, and a non-empty list in both frameworks), the message
    is safetensors' own, e.g. ``Invalid index -6 for dimension 1 of size 5``."""


_BY_EXIT = {2: FormatError, 3: NetworkError, 4: IntegrityError}


def _from_library(code: str, exit_code: int, message: str, origin: str) -> TensorfetchError:
    """The exception for a library error (called by the binding)."""
    cls: type[TensorfetchError] = _BY_EXIT.get(exit_code, TensorfetchError)
    if code == "NotFound":
        cls = NotFoundError if origin == "open" else TensorNotFoundError
    elif code == "NotFetched":
        cls = NotFetchedError
    elif code == "Cancelled":
        cls = CancelledError
    err = cls(message, code)
    err.exit_code = exit_code
    return err


class StaleCacheWarning(UserWarning):
    """The cache held stale bytes of a remote file: a file rewritten on its server while its URL,
    ETag and size stayed the same (nginx's ETag is the modification time in seconds and the
    size). Told by ``warnings.warn`` when a checkpoint is opened; the stale bytes were retired
    (never served again, also to other processes sharing the cache) and the file is fetched
    afresh."""
