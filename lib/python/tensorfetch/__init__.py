# SPDX-License-Identifier: Apache-2.0
"""tensorfetch: read safetensors checkpoints where they live, fetching only what you ask for.

A drop-in for ``safetensors.safe_open`` that also opens Hugging Face Hub repos and http(s) URLs,
fetching only the tensors (or slices of tensors) asked for into a crash-safe local cache::

    import tensorfetch
    with tensorfetch.safe_open("hf://Org/Model", framework="pt") as f:
        f.prefetch("model.layers.0.*")                # one parallel fetch, progress bar on a tty
        w = f.get_tensor("model.layers.0.mlp.up_proj.weight")   # zero copy, from the cache
        rows = f.get_slice("lm_head.weight")[:128]    # fetches only those rows

Tensors are zero-copy views of the memory-mapped file or cache blob: NumPy arrays are read-only
and keep the open checkpoint alive; torch tensors are writable over a private copy-on-write
mapping (as safetensors' are: a write never reaches the file, the cache or another handle), which
they keep alive themselves. Locations and options are the CLI's (``tensorfetch --help``):
keyword arguments ``endpoint``, ``token``, ``cacert``, ``window``, ``connections`` (fixed; unset:
adaptive), ``max_connections`` (the adaptive ceiling), ``header_connections``, ``retries``, ``stall_timeout`` (ms), ``min_rate``, ``max_rate``,
``cache_dir``, ``offline``, ``shared_cache``, ``hf_hub_cache``, ``warm_connections``,
``chunk_size``, ``coalesce_gap``, ``coalesce_overfetch_percent``; for ``s3://`` locations
``s3_endpoint``, ``no_sign_request`` and ``presign_expires`` (seconds), the last two also for
``az://`` ones. ``warm_connections=True`` opens
the data connections of an http(s) location while its headers are read, for a fetch right after
(``load`` and ``download`` set it unless told otherwise). ``max_rate`` caps every fetch of the
checkpoint at that many bytes per second, all connections together (0 or None: no cap; else at
least 1024, or ``ValueError``).
"""
from __future__ import annotations

import contextlib
import fnmatch
import json
import numbers
import operator
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from . import _tensorfetch as _tf
from . import errors as _errors
from .errors import (
    CancelledError,
    DtypeError,
    FormatError,
    IntegrityError,
    NetworkError,
    NotFetchedError,
    NotFoundError,
    SliceError,
    StaleCacheWarning,
    TensorfetchError,
    TensorNotFoundError,
)

__version__: str = _tf.__version__

__all__ = [
    "safe_open",
    "SafeSlice",
    "TpSelection",
    "FetchProgress",
    "load",
    "inspect",
    "plan",
    "download",
    "mount",
    "Mount",
    "trace",
] + list(_errors.__all__)  # the exception classes, as errors.py lists them

# Keyword options: name -> (kind, minimum, maximum), with the CLI's ranges.
_OPEN_OPTIONS: Dict[str, Tuple[str, int, int]] = {
    "endpoint": ("str", 0, 0),
    "token": ("str", 0, 0),
    "cacert": ("path", 0, 0),
    "window": ("int", 64, 1 << 30),
    "connections": ("int", 1, 256),
    "max_connections": ("int", 1, 256),
    "header_connections": ("int", 1, 1024),
    "retries": ("int", 0, 100),
    "stall_timeout": ("int", 1000, 3_600_000),
    "min_rate": ("int", 0, 1 << 40),
    "max_rate": ("int", 0, 1 << 40),
    "cache_dir": ("path", 0, 0),
    "offline": ("bool", 0, 0),
    "shared_cache": ("bool", 0, 0),
    "hf_hub_cache": ("path", 0, 0),
    "warm_connections": ("bool", 0, 0),
    "s3_endpoint": ("str", 0, 0),
    "no_sign_request": ("bool", 0, 0),
    "presign_expires": ("int", 1, 604800),
}
# The smallest non-zero max_rate (bytes per second), as the library's kMinMaxRate.
_MIN_MAX_RATE = 1024
_FETCH_OPTIONS: Dict[str, Tuple[str, int, int]] = {
    "chunk_size": ("int", 4096, 1 << 34),
    "coalesce_gap": ("int", 0, 1 << 34),
    "coalesce_overfetch_percent": ("int", 0, 1000),
}


def _options(kwargs: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Splits keyword options into open and fetch options, checking names, types and ranges."""
    open_opts: Dict[str, Any] = {}
    fetch_opts: Dict[str, Any] = {}
    for name, value in kwargs.items():
        if name in _OPEN_OPTIONS:
            spec, target = _OPEN_OPTIONS[name], open_opts
        elif name in _FETCH_OPTIONS:
            spec, target = _FETCH_OPTIONS[name], fetch_opts
        else:
            known = ", ".join(sorted([*_OPEN_OPTIONS, *_FETCH_OPTIONS]))
            raise TypeError(f"unexpected keyword argument {name!r} (options: {known})")
        if value is None:
            continue
        kind, lo, hi = spec
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"{name} must be an integer, not {type(value).__name__}")
            value = int(value)
            if not lo <= value <= hi:
                raise ValueError(f"{name} must be between {lo} and {hi}, not {value}")
            if name == "max_rate" and 0 < value < _MIN_MAX_RATE:
                raise ValueError(f"max_rate must be 0 (no cap) or at least {_MIN_MAX_RATE} bytes/s, not {value}")
        elif kind == "bool":
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be True or False, not {value!r}")
        elif kind == "path":
            if not isinstance(value, (str, os.PathLike)):
                raise TypeError(f"{name} must be a path, not {type(value).__name__}")
            value = os.fspath(value)
        elif not isinstance(value, str):
            raise TypeError(f"{name} must be a string, not {type(value).__name__}")
        target[name] = value
    return open_opts, fetch_opts


def _framework(framework: str) -> int:
    if framework in ("pt", "torch", "pytorch"):
        return 1
    if framework in ("np", "numpy"):
        return 0
    raise ValueError(f"framework {framework!r} is not supported: use \"pt\" (torch) or \"np\" (NumPy)")


def _location(location: Union[str, "os.PathLike[str]"]) -> str:
    """The location as the library takes it. As in safetensors, a string without a scheme
    (``hf://``, ``http://``, ``https://``) is a local path, always: a missing one raises
    ``NotFoundError`` (a ``FileNotFoundError``) with safetensors' message, and nothing is asked
    of any server. The Hub is named ``hf://ORG/NAME``."""
    if isinstance(location, os.PathLike):
        location = os.fspath(location)
    if not isinstance(location, str):
        raise TypeError(f"location must be a string or a path, not {type(location).__name__}")
    if "://" not in location and "\0" not in location and not os.path.exists(location):
        raise NotFoundError(f"No such file or directory: {location}", "NotFound")
    return location


def _patterns(names: Union[None, str, Iterable[str]]) -> Tuple[List[str], bool]:
    """(patterns, all): None selects every tensor."""
    if names is None:
        return [], True
    if isinstance(names, str):
        return [names], False
    out = list(names)
    for n in out:
        if not isinstance(n, str):
            raise TypeError(f"tensor names must be strings, not {type(n).__name__}")
    return out, False


class FetchProgress:
    """Progress of a fetch, as given to a ``progress`` callable (about every 50 ms and at the end).

    Attributes: ``bytes_done``, ``bytes_total`` (bytes to transfer: what the cache lacked),
    ``bytes_cached`` (wanted bytes the cache already held), ``files_done``, ``files_total``,
    ``seconds`` (since the fetch started), ``waiting_seconds`` (a wait a server asked for, e.g.
    a rate limit; else 0).
    """

    __slots__ = ("bytes_done", "bytes_total", "bytes_cached", "files_done", "files_total", "seconds",
                 "waiting_seconds")

    def __init__(self, d: Dict[str, Any]) -> None:
        for k in self.__slots__:
            setattr(self, k, d[k])

    def __repr__(self) -> str:
        return ("FetchProgress(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")")


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


class _Bar:
    """A one-line progress bar on a terminal (stderr); silent when stderr is not one."""

    def __init__(self) -> None:
        self.drawn = False
        try:
            self.enabled = sys.stderr is not None and sys.stderr.isatty()
        except (AttributeError, ValueError):
            self.enabled = False

    def __call__(self, d: Dict[str, Any]) -> None:
        if not self.enabled or d["bytes_total"] == 0:
            return
        done, total, secs = d["bytes_done"], d["bytes_total"], max(d["seconds"], 1e-6)
        rate = done / secs
        eta = f"ETA {int((total - done) / rate)} s" if rate > 0 and done < total else ""
        wait = f"  waiting {d['waiting_seconds']:.0f} s (server asked)" if d["waiting_seconds"] > 0 else ""
        line = (f"\rtensorfetch: {_human(done)} / {_human(total)}  {100 * done // total:3d}%  "
                f"{_human(rate)}/s  {eta}  files {d['files_done']}/{d['files_total']}{wait}")
        sys.stderr.write(line.ljust(100)[:160])
        sys.stderr.flush()
        self.drawn = True

    def finish(self) -> None:
        if self.drawn:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self.drawn = False


def _progress(progress: Union[bool, None, Callable[[FetchProgress], Any]]) -> Tuple[Any, Optional[_Bar]]:
    """(callable for the binding, bar to finish) for a ``progress`` argument."""
    if progress is True:
        bar = _Bar()
        return (bar if bar.enabled else None), bar
    if progress is None or progress is False:
        return None, None
    if callable(progress):
        user = progress
        return (lambda d: user(FetchProgress(d))), None
    raise TypeError("progress must be True, False or a callable taking a FetchProgress")


def _fetch(ckpt: Any, names: Union[None, str, Iterable[str]], progress: Any) -> Dict[str, int]:
    patterns, all_ = _patterns(names)
    callback, bar = _progress(progress)
    try:
        return ckpt.fetch(patterns, all_, callback)
    finally:
        if bar is not None:
            bar.finish()


def _bound_text(v: Any) -> str:
    return "" if v is None else str(operator.index(v))


def _normalize_index(key: Any, shape: Sequence[int], name: str,
                     checked: bool) -> Tuple[list, Optional[list]]:
    """Turns an index of ``SafeSlice`` into the byte-range slice the binding fetches and the step
    applied afterwards: (dims, post) where dims holds (is_index, index, start, stop) per
    dimension, and post (or None) the slices with steps, relative to the fetched box, per kept
    dimension.

    ``checked`` (``framework="np"``) applies safetensors' rules and messages for its Rust
    indexer: an explicit slice bound outside the dimension is a ``SliceError``, not clipped.
    Otherwise (``"pt"``, where safetensors hands the index to torch) bounds are clipped as torch
    and NumPy do. Both: ``[]`` selects nothing along the first dimension, a non-empty list is
    safetensors' "Non empty lists are not implemented", an integer out of range a
    ``SliceError``."""
    ndim = len(shape)
    if isinstance(key, list):
        if key:
            raise SliceError("Non empty lists are not implemented")
        if ndim == 0:
            raise SliceError(f"tensor {name!r}: too many indices for a tensor of 0 dimensions: 1 given")
        return [(False, 0, 0, 0)], None  # A[[]]: nothing along dimension 0, the rest whole
    if not isinstance(key, tuple):
        key = (key,)
    n_ellipsis = sum(1 for k in key if k is Ellipsis)
    if n_ellipsis > 1:
        raise SliceError("an index can only have a single ellipsis ('...')")
    explicit = len(key) - n_ellipsis
    if explicit > ndim:
        raise SliceError(f"tensor {name!r}: too many indices for a tensor of {ndim} dimensions: {len(key)} given")
    # Each given item with its axis (an ellipsis spans several, and is rendered as given).
    expanded: List[Any] = []
    given: List[Tuple[int, Any]] = []
    for k in key:
        if k is Ellipsis:
            given.append((-1, k))
            expanded.extend([slice(None)] * (ndim - explicit))
        else:
            given.append((len(expanded), k))
            expanded.append(k)
    expanded.extend([slice(None)] * (ndim - len(expanded)))
    for axis, (k, size) in enumerate(zip(expanded, shape)):
        if isinstance(k, slice):
            k.indices(size)  # a bound that is not an integer, a zero step: as Python says
        elif isinstance(k, numbers.Integral) and not isinstance(k, bool):
            i = int(k)
            if i < -size:
                raise SliceError(f"Invalid index {i} for dimension {axis} of size {size}" if checked else
                                 f"tensor {name!r}: index {i} is out of bounds for axis {axis} with size {size}")
            if i >= size and not checked:
                raise SliceError(f"tensor {name!r}: index {i} is out of bounds for axis {axis} with size {size}")
        else:
            raise TypeError(f"tensor {name!r}: only integers, slices (':'), and an ellipsis ('...') are valid "
                            f"indices, not {type(k).__name__}")
    if checked:
        _check_bounds(given, shape)
    dims: list = []
    post: list = []
    stepped = False
    for k, size in zip(expanded, shape):
        if isinstance(k, slice):
            start, stop, step = k.indices(size)
            count = len(range(start, stop, step))
            if count == 0:
                lo = hi = 0
            elif step > 0:
                lo, hi = start, start + (count - 1) * step + 1
            else:
                lo, hi = start + (count - 1) * step, start + 1
            dims.append((False, 0, lo, hi))
            post.append(slice(None, None, step))
            stepped = stepped or (step != 1 and count > 1)
        else:
            i = int(k)
            dims.append((True, i + size if i < 0 else i, 0, 0))
    return dims, (post if stepped else None)


def _check_bounds(given: List[Tuple[int, Any]], shape: Sequence[int]) -> None:
    """safetensors' bounds rule (its ``SliceIterator::new``), dimensions checked last to first:
    an index or explicit slice start must be below the size, an explicit stop at most the size
    (negative ones counted from the end, which safetensors refuses). Unlike there, an omitted
    bound is never out of range (safetensors refuses even ``[:]`` of a dimension of size 0)."""
    def text(axis: int, k: Any) -> str:
        if k is Ellipsis:
            return "..."
        if isinstance(k, slice):
            return (_bound_text(k.start) + ":" + _bound_text(k.stop)
                    + ("" if k.step is None else ":" + _bound_text(k.step)))
        i = int(k)
        return str(i + shape[axis] if i < 0 else i)

    for axis, k in reversed(given):
        if k is Ellipsis:
            continue
        size = shape[axis]
        asked: Optional[int] = None
        if isinstance(k, slice):
            start = None if k.start is None else operator.index(k.start)
            stop = None if k.stop is None else operator.index(k.stop)
            if start is not None and not 0 <= (start + size if start < 0 else start) < size:
                asked = start
            elif stop is not None and not 0 <= (stop + size if stop < 0 else stop) <= size:
                asked = stop - 1 if stop > 0 else stop
        else:
            i = int(k)
            if (i + size if i < 0 else i) >= size:
                asked = i
        if asked is not None:
            rendered = "[" + ", ".join(text(a, g) for a, g in given) + "]"
            raise SliceError(f"Error during slicing {rendered} with shape {list(shape)}: "
                             f"index {asked} out of bounds for tensor dimension #{axis} of size {size}")


def _apply_steps(t: Any, post: list, torch_framework: bool) -> Any:
    if not torch_framework:
        return t[tuple(post)]
    # torch refuses negative steps: reverse the (fetched) box, then step forward.
    for axis, s in enumerate(post):
        if s.step < 0:
            t = t.flip(axis)[(slice(None),) * axis + (slice(None, None, -s.step),)]
        elif s.step > 1:
            t = t[(slice(None),) * axis + (s,)]
    return t


class SafeSlice:
    """A tensor not yet read, as ``safe_open.get_slice`` returns it (safetensors' ``PySafeSlice``).

    ``get_shape()`` and ``get_dtype()`` come from the header; indexing (``s[0:128, :]``,
    ``s[-1]``, ``s[..., 4:8]``, steps too, ``s[[]]``) fetches only the byte ranges of the rows
    and columns asked for (the bounding box when there are steps) and returns a new tensor
    holding a copy. Indices out of range raise ``SliceError`` as safetensors raises its
    ``SafetensorError`` (with ``framework="np"`` in its words; ``"pt"`` clips slice bounds as
    torch does): see docs/python.md, "Slices".
    """

    def __init__(self, owner: "safe_open", name: str) -> None:
        self._owner = owner
        self._name = name
        dtype, shape, _, _ = owner._handle().info(name)
        self._dtype: str = dtype
        self._shape: List[int] = list(shape)

    def get_shape(self) -> List[int]:
        """The shape of the whole tensor."""
        return list(self._shape)

    def get_dtype(self) -> str:
        """The safetensors dtype of the tensor, e.g. ``"BF16"``."""
        return self._dtype

    @property
    def shape(self) -> List[int]:
        """As ``get_shape()``."""
        return list(self._shape)

    @property
    def dtype(self) -> str:
        """As ``get_dtype()``."""
        return self._dtype

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __getitem__(self, key: Any) -> Any:
        owner = self._owner
        dims, post = _normalize_index(key, self._shape, self._name, owner._fw == 0)
        t = owner._handle().get_slice(self._name, dims, owner._fw)
        if post is not None:
            t = _apply_steps(t, post, owner._fw == 1)
        return owner._to_device(t)

    def __repr__(self) -> str:
        return f"SafeSlice({self._name!r}, dtype={self._dtype}, shape={self._shape})"


def _tp_rules(rules: Union[None, str, "os.PathLike[str]", Dict[str, Any]]) -> Tuple[Optional[str], str]:
    """A rules file (a path) or its object (a dict) as (JSON text, source name for messages)."""
    if rules is None:
        return None, ""
    if isinstance(rules, dict):
        try:
            return json.dumps(rules), "rules"
        except RecursionError:
            raise ValueError("rules: the dict nests too deeply to be a rules object "
                             "(JSON is read at most 128 levels deep)") from None
    if isinstance(rules, (str, os.PathLike)):
        with open(rules, encoding="utf-8") as fh:
            return fh.read(), os.fspath(rules)
    raise TypeError(f"rules must be a path or a dict, not {type(rules).__name__}")


class TpSelection:
    """The tensors one rank of a tensor-parallel group holds, as ``safe_open.select_for_rank``
    returns it: the rank's slice of every split tensor (under its original name, with its
    sliced shape), the replicated tensors whole, other ranks' experts left out (see
    ``tensorfetch get --tp``). Nothing is fetched until ``prefetch`` or ``get_tensor``, and
    then only the rank's byte ranges. Read-only; keeps its checkpoint open."""

    def __init__(self, owner: "safe_open", rank: int, world: int, handle: Any) -> None:
        self._owner = owner
        self._sel = handle
        self.rank = rank
        self.world = world
        self._entries: Dict[str, Dict[str, Any]] = {e["name"]: e for e in handle.entries()}

    def keys(self) -> List[str]:
        """Names of the tensors this rank holds, in natural order (``layers.2`` before ``layers.10``)."""
        return list(self._entries)

    def get_shape(self, name: str) -> List[int]:
        """The shape of this rank's part of ``name``."""
        return list(self._entry(name)["shape"])

    def get_dtype(self, name: str) -> str:
        """The safetensors dtype of ``name``."""
        return self._entry(name)["dtype"]

    def slices(self) -> Dict[str, Optional[str]]:
        """Per tensor, the rank's slice as text (``"[0:128]"``, ``"[:, 256:512]"``), or None
        when it holds the tensor whole."""
        return {name: e["slice"] for name, e in self._entries.items()}

    @property
    def nbytes(self) -> int:
        """The bytes this rank holds (what a fetch of it moves, holes aside)."""
        return sum(e["nbytes"] for e in self._entries.values())

    @property
    def rule(self) -> str:
        """The convention and rules applied, as ``__metadata__["tp_rule"]`` of ``get --tp``."""
        return self._sel.rule

    def metadata(self) -> Dict[str, str]:
        """``tp_rank``, ``tp_world`` and ``tp_rule``, as ``tensorfetch get --tp`` records them."""
        return {"tp_rank": str(self.rank), "tp_world": str(self.world), "tp_rule": self.rule}

    def prefetch(self, progress: Union[bool, Callable[[FetchProgress], Any]] = True) -> Dict[str, int]:
        """Fetches this rank's byte ranges (its slices and the replicated tensors) into the cache
        in one parallel fetch, as ``safe_open.prefetch`` does. Returns the fetch's figures."""
        callback, bar = _progress(progress)
        try:
            return self._sel.fetch(callback)
        finally:
            if bar is not None:
                bar.finish()

    def plan(self) -> List[Dict[str, Any]]:
        """The transfers ``prefetch`` would make, without making them (see ``safe_open.plan``)."""
        return self._sel.plan()

    def get_tensor(self, name: str) -> Any:
        """This rank's part of ``name`` as a new tensor (a copy), fetched first when remote and
        not yet cached (only its byte ranges). ``TensorNotFoundError`` for a tensor the rank
        does not hold."""
        self._entry(name)
        return self._owner._to_device(self._sel.get(name, self._owner._fw))

    def get_tensors(self) -> Dict[str, Any]:
        """Every tensor of the rank, by name (fetched in one parallel fetch first when remote)."""
        self.prefetch(progress=False)
        return {name: self.get_tensor(name) for name in self._entries}

    def _entry(self, name: str) -> Dict[str, Any]:
        try:
            return self._entries[name]
        except KeyError:
            raise TensorNotFoundError(f"rank {self.rank} of {self.world} holds no tensor named {name!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self):
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"TpSelection(rank {self.rank} of {self.world}, {len(self._entries)} tensors, {self.nbytes} bytes)"


class safe_open:
    """Opens a checkpoint lazily, as ``safetensors.safe_open`` does, from any location the CLI
    opens: a ``.safetensors`` file, a ``*.safetensors.index.json``, a directory, an http(s) URL
    of either, or a Hub repo (``hf://ORG/NAME[@REV][/PATH]``). A string without a scheme is a
    local path, as in safetensors (a missing one: ``NotFoundError``, a ``FileNotFoundError``).

    Only headers are read on open (for a remote checkpoint: one range request per file, all at
    once). ``get_tensor`` fetches a remote tensor into the cache when it is not there yet;
    ``prefetch`` fetches many in one parallel fetch first.

    Args:
        filename: the location.
        framework: ``"pt"`` (torch tensors) or ``"np"`` (NumPy arrays).
        device: ``"cpu"`` (the tensors are zero-copy views), or a torch device, which copies.
        **options: the CLI's options (see the module's docstring).

    Several threads may call ``get_tensor`` and ``get_slice`` at once; fetches run one at a time.
    """

    def __init__(self, filename: Union[str, "os.PathLike[str]"], framework: str = "pt", device: Any = "cpu",
                 **options: Any) -> None:
        self._fw = _framework(framework)
        self._device = None if device in ("cpu", None) else device
        if self._device is not None and self._fw == 0:
            raise ValueError(f"framework \"np\" only has the device \"cpu\", not {device!r}")
        open_opts, fetch_opts = _options(options)
        self._ckpt: Any = _tf.Checkpoint.open(_location(filename), open_opts, fetch_opts)
        # Stale cached bytes found by the open (retired; the file is fetched afresh).
        for message in self._ckpt.take_notices():
            warnings.warn(message, StaleCacheWarning, stacklevel=2)

    # -- context manager ----------------------------------------------------------------------
    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Forgets the checkpoint; tensors handed out stay valid (they keep its mapping)."""
        self._ckpt = None

    def _handle(self) -> Any:
        if self._ckpt is None:
            raise TensorfetchError("the checkpoint is closed (tensors already handed out stay valid)")
        return self._ckpt

    def _to_device(self, t: Any) -> Any:
        return t if self._device is None else t.to(self._device)

    # -- safetensors' API ---------------------------------------------------------------------
    def keys(self) -> List[str]:
        """Tensor names, sorted (as safetensors sorts them)."""
        return sorted(self._handle().keys())

    def offset_keys(self) -> List[str]:
        """Tensor names in the order of their bytes (file by file for a sharded checkpoint)."""
        return self._handle().offset_keys()

    def metadata(self) -> Optional[Dict[str, str]]:
        """``__metadata__`` of the file (the first shard's for a sharded checkpoint), or None."""
        return self._handle().metadata()

    def get_tensor(self, name: str) -> Any:
        """The whole tensor, a zero-copy view of the file or the cache (fetched first if remote
        and not yet cached): NumPy, read-only; torch, writable copy-on-write (a write is seen by a
        later get_tensor of the same name from this handle, as in safetensors, unless the tensor
        is remote with neighbours not yet cached; never by the file or the cache). Raises ``TensorNotFoundError`` (a ``KeyError``) for an unknown name."""
        t = self._handle().get_tensor(name, self._fw)
        return t if self._device is None else t.to(self._device)

    def get_slice(self, name: str) -> SafeSlice:
        """A ``SafeSlice``: shape and dtype now, bytes when indexed (only those fetched)."""
        return SafeSlice(self, name)

    def get_tensors(self) -> Dict[str, Any]:
        """Every tensor, by name (fetched in one parallel fetch first when remote)."""
        self.prefetch(None, progress=False)
        return {name: self.get_tensor(name) for name in self.offset_keys()}

    # -- beyond safetensors -------------------------------------------------------------------
    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._handle().contains(name)

    def __iter__(self):
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._handle().keys())

    @property
    def location(self) -> str:
        """The location as given."""
        return self._handle().location

    @property
    def remote(self) -> bool:
        """True for Hub repos and URLs."""
        return self._handle().remote

    @property
    def commit(self) -> Optional[str]:
        """The commit the Hub named, at which every file is read."""
        return self._handle().commit

    def files(self) -> List[Dict[str, Any]]:
        """The safetensors files: path, size, etag, sha256, url."""
        return self._handle().files()

    def prefetch(self, names_or_globs: Union[None, str, Iterable[str]] = None,
                 progress: Union[bool, Callable[[FetchProgress], Any]] = True) -> Dict[str, int]:
        """Fetches the named tensors (exact names or fnmatch globs; None: every tensor) into the
        cache in one parallel fetch: what the cache lacks, coalesced and split over many
        connections. ``progress=True`` draws a bar on a terminal (silent otherwise); a callable
        gets a ``FetchProgress`` and may return False to cancel. Ctrl-C cancels promptly
        (``KeyboardInterrupt``); what arrived whole stays cached. A no-op for local files.
        Returns the fetch's figures: bytes_transferred, bytes_cached, requests, retries, chunks."""
        return _fetch(self._handle(), names_or_globs, progress)

    def plan(self, names_or_globs: Union[None, str, Iterable[str]] = None) -> List[Dict[str, Any]]:
        """The transfers ``prefetch`` would make, without making them (for download managers):
        dicts with file, url, offset, length, if_match, send_token."""
        patterns, all_ = _patterns(names_or_globs)
        return self._handle().plan(patterns, all_)

    def inspect(self) -> Dict[str, Any]:
        """The object ``tensorfetch inspect --json`` prints, as a dict."""
        return self._handle().inspect()

    def select_for_rank(self, rank: int, world: int, rules: Union[None, str, "os.PathLike[str]", Dict[str, Any]] = None,
                        expert_parallel: bool = False,
                        names_or_globs: Union[None, str, Iterable[str]] = None) -> TpSelection:
        """What rank ``rank`` of ``world`` tensor-parallel ranks holds (``tensorfetch get --tp
        RANK/WORLD``): the Megatron/vLLM convention for the model's ``config.json``, with
        ``rules`` (a rules file's path, or its object: glob -> ``{"dim": D}`` | ``"replicate"``
        | ``"expert"``) deciding first; ``expert_parallel`` deals out MoE experts whole.
        ``names_or_globs`` restricts it to those tensors. A layout neither can split raises
        ``TensorfetchError`` (code ``Unsplittable``) naming the tensor. Reads no tensor bytes."""
        for arg, value in (("rank", rank), ("world", world)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                raise TypeError(f"{arg} must be a non-negative integer, not {value!r}")
        if not isinstance(expert_parallel, bool):
            raise TypeError("expert_parallel must be True or False")
        text, source = _tp_rules(rules)
        patterns, all_ = _patterns(names_or_globs)
        handle = self._handle().select_for_rank(int(rank), int(world), text, source, expert_parallel,
                                                [] if all_ else patterns)
        return TpSelection(self, int(rank), int(world), handle)

    def __repr__(self) -> str:
        state = "closed" if self._ckpt is None else f"{len(self._ckpt.keys())} tensors"
        return f"tensorfetch.safe_open({'<closed>' if self._ckpt is None else self._ckpt.location!r}, {state})"


def load(location: Union[str, "os.PathLike[str]"], names: Union[None, str, Iterable[str]] = None,
         framework: str = "pt", device: Any = "cpu", progress: Union[bool, Callable[[FetchProgress], Any]] = True,
         **options: Any) -> Dict[str, Any]:
    """Opens ``location``, fetches the named tensors (names or globs; None: all) in one parallel
    fetch, and returns them as a dict of zero-copy tensors (a state dict), in natural name order.
    The fetch's connections are opened while the headers are read (``warm_connections``)."""
    options.setdefault("warm_connections", True)
    with safe_open(location, framework=framework, device=device, **options) as f:
        h = f._handle()
        patterns, all_ = _patterns(names)
        _fetch(h, names, progress)
        if all_:
            wanted = h.keys()
        else:
            wanted = [k for k in h.keys() if any(k == p or fnmatch.fnmatchcase(k, p) for p in patterns)]
        return {name: f.get_tensor(name) for name in wanted}


def inspect(location: Union[str, "os.PathLike[str]"], **options: Any) -> Dict[str, Any]:
    """The object ``tensorfetch inspect --json`` prints, as a dict: location, sharded, files,
    metadata, tensors, parameters, total_parameters, parameter_rule, total_bytes (and commit,
    requests, index_metadata when they apply). Reads headers only."""
    with safe_open(location, framework="np", **options) as f:
        return f.inspect()


def plan(location: Union[str, "os.PathLike[str]"], names: Union[None, str, Iterable[str]] = None,
         **options: Any) -> List[Dict[str, Any]]:
    """The transfers a fetch of ``names`` (None: every tensor) would make, without making them:
    what the cache lacks, coalesced and chunked, as dicts with file, url, offset, length,
    if_match (send it as ``If-Match``; expect ``206`` and exactly that range), send_token
    (the URL is on the endpoint's host: send the token) and expires_at (a presigned ``s3://``
    URL or an ``az://`` URL with a SAS: valid without credentials until then, seconds since the
    epoch; else None)."""
    with safe_open(location, framework="np", **options) as f:
        return f.plan(names)


def download(location: Union[str, "os.PathLike[str]"], dir: Union[str, "os.PathLike[str]"], hf_cache: bool = False,
             progress: Union[bool, Callable[[FetchProgress], Any]] = True, **options: Any) -> Dict[str, Any]:
    """Downloads a whole checkpoint (safetensors files, index, config.json) into ``dir``, as
    ``tensorfetch download`` does: every file is verified against the sha256 the Hub names;
    ``hf_cache=True`` also publishes them into the Hugging Face cache. Returns the figures
    (bytes_transferred, bytes_cached, requests, retries, chunks), ``published`` (files put in the
    Hugging Face cache, or None) and ``unverified`` (files checked by size and ETag only). The
    connections are opened while the headers are read (``warm_connections``)."""
    if not isinstance(hf_cache, bool):
        raise TypeError("hf_cache must be True or False")
    options.setdefault("warm_connections", True)
    callback, bar = _progress(progress)
    with safe_open(location, framework="np", **options) as f:
        try:
            return f._handle().download(os.fspath(dir), hf_cache, callback)
        finally:
            if bar is not None:
                bar.finish()


# mount(): each keyword option as the CLI takes it. Options whose value reaches the mount process
# through its environment (a token never goes on a command line, which `ps` shows) are not here.
_MOUNT_FLAGS: Dict[str, str] = {
    "endpoint": "--endpoint", "cacert": "--cacert", "window": "--window", "connections": "--connections",
    "max_connections": "--max-connections", "header_connections": "--header-connections", "retries": "--retries",
    "stall_timeout": "--stall-timeout", "min_rate": "--min-rate", "max_rate": "--max-rate",
    "cache_dir": "--cache-dir", "offline": "--offline", "shared_cache": "--shared-cache",
    "s3_endpoint": "--s3-endpoint", "no_sign_request": "--no-sign-request", "presign_expires": "--presign-expires",
    "chunk_size": "--chunk-size", "coalesce_gap": "--coalesce-gap",
    "coalesce_overfetch_percent": "--coalesce-overfetch",
}
_MOUNT_ONLY: Dict[str, Tuple[str, int, int]] = {
    "tensor_window": ("int", 4096, 1 << 40),
    "small_file": ("int", 0, 1 << 40),
}


def _mount_point_is_mounted(path: str) -> bool:
    try:
        return os.stat(path).st_dev != os.stat(os.path.dirname(os.path.abspath(path)) or "/").st_dev
    except OSError:
        return False


def _tensorfetch_cli(cli: Union[None, str, "os.PathLike[str]"]) -> str:
    if cli is not None:
        return os.fspath(cli)
    found = os.environ.get("TENSORFETCH_CLI") or shutil.which("tensorfetch")
    if not found:
        raise TensorfetchError("tensorfetch.mount runs the tensorfetch CLI (built with the meson feature fuse), "
                               "which is neither $TENSORFETCH_CLI nor on PATH; pass cli=PATH")
    return found


class Mount:
    """A checkpoint mounted by ``tensorfetch.mount``: ``path`` is the directory (also
    ``os.fspath(m)``); ``pid`` the mount process; ``log()`` what it said so far (failed reads,
    totals); ``unmount()`` ends it (the ``with`` block does). Not thread-safe."""

    def __init__(self, proc: "subprocess.Popen[bytes]", path: str, log_file: Any, location: str) -> None:
        self._proc = proc
        self.path = path
        self.pid = proc.pid
        self._log = log_file
        self._location = location
        self.returncode: Optional[int] = None

    def __fspath__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        state = "mounted" if self.returncode is None else f"ended ({self.returncode})"
        return f"<tensorfetch.Mount {self._location!r} on {self.path!r}, {state}>"

    def log(self) -> str:
        """What the mount process wrote so far: failed reads (file, URL, byte range) and totals."""
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")

    def unmount(self, timeout: float = 30.0) -> int:
        """Ends the mount as ``SIGTERM`` does (fetches cancelled, reads under way get EIO, the
        directory unmounted); waits for the process, at most ``timeout`` seconds before killing it.
        Returns its exit status (0: clean). Idempotent."""
        if self.returncode is not None:
            return self.returncode
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if _mount_point_is_mounted(self.path):
            # A killed process leaves its mount point: clear it.
            subprocess.run([self._proc.args[0], "unmount", self.path], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
        self.returncode = self._proc.returncode
        return self.returncode

    def __enter__(self) -> "Mount":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        status = self.unmount()
        if status != 0 and exc_type is None:
            raise TensorfetchError(f"tensorfetch mount of {self._location} on {self.path} ended with exit "
                                   f"status {status}")


def mount(location: Union[str, "os.PathLike[str]"], dir: Union[str, "os.PathLike[str]"],
          cli: Union[None, str, "os.PathLike[str]"] = None, ready_timeout: float = 60.0, **options: Any) -> Mount:
    """Mounts a checkpoint on the directory ``dir`` (made when missing; read-only, FUSE), as
    ``tensorfetch mount LOCATION DIR`` does, for loaders that read local directories::

        with tensorfetch.mount("hf://Org/Model", "/mnt/model") as m:
            model = AutoModelForCausalLM.from_pretrained(m.path)   # reads lazily, tensor by tensor

    Returns once the directory is mounted (a ``Mount``; ``with`` unmounts it when the block ends,
    also on an exception). The options are ``safe_open``'s (``endpoint``, ``token``,
    ``cache_dir``, ``offline``, ``connections``, ...) plus ``tensor_window`` and ``small_file``
    (bytes; see ``tensorfetch mount --help``); ``cli`` is the tensorfetch CLI to run (default
    ``$TENSORFETCH_CLI``, else ``tensorfetch`` on PATH), ``ready_timeout`` how long to wait for the
    mount. A mount that fails raises the exception class of the CLI's exit code with its message
    (a bad location, no /dev/fuse, a stale mount point).

    The mount runs in a child process (the CLI, in the foreground), not on a thread of this one:
    this module then never needs libfuse (as ``libtensorfetch.so`` does not), a ``fork`` of this
    process (DataLoader workers, multiprocessing) copies no FUSE threads, this process's own
    page faults on mapped files of the mount are served by a process that never waits for its
    GIL, and ending it is the CLI's clean SIGTERM path. The CLI's ``--daemon`` is not used: the
    child is kept as a ``Popen``, so its exit status and messages are known, and nothing is left
    behind when this process ends the mount.
    """
    where = _location(location)
    path = os.path.abspath(os.fspath(dir))
    args = [_tensorfetch_cli(cli), "mount", where, path]
    if not os.path.lexists(path):
        os.makedirs(path)
    env = dict(os.environ)
    open_opts, fetch_opts = _options({k: v for k, v in options.items() if k not in _MOUNT_ONLY})
    for name, spec in _MOUNT_ONLY.items():
        if options.get(name) is None:
            continue
        value = options[name]
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be an integer, not {type(value).__name__}")
        if not spec[1] <= int(value) <= spec[2]:
            raise ValueError(f"{name} must be between {spec[1]} and {spec[2]}, not {value}")
        args += ["--" + name.replace("_", "-"), str(int(value))]
    for name, value in {**open_opts, **fetch_opts}.items():
        if name == "token":
            env["HF_TOKEN"] = value
        elif name == "hf_hub_cache":
            env["HF_HUB_CACHE"] = value
        elif name == "warm_connections":
            continue  # (a mount fetches on reads, not right after the open)
        elif isinstance(value, bool):
            if value:
                args.append(_MOUNT_FLAGS[name])
            elif name == "offline":
                env["HF_HUB_OFFLINE"] = "0"
        else:
            args += [_MOUNT_FLAGS[name], str(value)]
    log_file = tempfile.TemporaryFile()
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log_file, env=env)
    m = Mount(proc, path, log_file, where)
    deadline = time.monotonic() + ready_timeout
    while not _mount_point_is_mounted(path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    if not _mount_point_is_mounted(path):
        text = m.log().strip()
        status = proc.poll()
        m.unmount(timeout=5)
        log_file.close()
        if status is None:
            raise TensorfetchError(f"tensorfetch mount of {where} on {path}: not mounted after {ready_timeout} s: {text}")
        prefix = "tensorfetch: error: "
        message = text[len(prefix):] if text.startswith(prefix) else text
        err = _errors._BY_EXIT.get(status, TensorfetchError)(message or f"tensorfetch mount exited with status {status}")
        err.exit_code = status
        raise err
    return m


@contextlib.contextmanager
def trace(path: Union[str, "os.PathLike[str]"]) -> Iterator[None]:
    """Records a timeline of this process's tensorfetch work inside the ``with`` block (opens,
    every HTTP request with its connect, TLS, first-byte and receive times, the data connections,
    commits, output) and writes it to ``path`` when the block ends, as Chrome trace-event JSON
    for Perfetto (ui.perfetto.dev) or ``chrome://tracing``; as ``tensorfetch --trace FILE``. One
    trace per process at a time (a second one raises ``TensorfetchError``)."""
    _tf.trace_start(os.fspath(path))
    try:
        yield
    finally:
        _tf.trace_stop()
