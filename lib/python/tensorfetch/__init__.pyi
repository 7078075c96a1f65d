# SPDX-License-Identifier: Apache-2.0
# Type stubs of the tensorfetch package (see __init__.py for the docstrings).
import os
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Union

from .errors import (
    CancelledError as CancelledError,
    DtypeError as DtypeError,
    FormatError as FormatError,
    IntegrityError as IntegrityError,
    NetworkError as NetworkError,
    NotFetchedError as NotFetchedError,
    NotFoundError as NotFoundError,
    TensorfetchError as TensorfetchError,
    TensorNotFoundError as TensorNotFoundError,
)

__version__: str

_Location = Union[str, "os.PathLike[str]"]
_Names = Union[None, str, Iterable[str]]

class FetchProgress:
    bytes_done: int
    bytes_total: int
    bytes_cached: int
    files_done: int
    files_total: int
    seconds: float
    waiting_seconds: float
    def __init__(self, d: Dict[str, Any]) -> None: ...

_Progress = Union[bool, None, Callable[[FetchProgress], Any]]

class SafeSlice:
    def get_shape(self) -> List[int]: ...
    def get_dtype(self) -> str: ...
    @property
    def shape(self) -> List[int]: ...
    @property
    def dtype(self) -> str: ...
    def __len__(self) -> int: ...
    def __getitem__(self, key: Any) -> Any: ...

class safe_open:
    def __init__(
        self,
        filename: _Location,
        framework: str = ...,
        device: Any = ...,
        *,
        endpoint: Optional[str] = ...,
        token: Optional[str] = ...,
        cacert: Optional[_Location] = ...,
        window: Optional[int] = ...,
        connections: Optional[int] = ...,
        header_connections: Optional[int] = ...,
        retries: Optional[int] = ...,
        stall_timeout: Optional[int] = ...,
        min_rate: Optional[int] = ...,
        cache_dir: Optional[_Location] = ...,
        offline: Optional[bool] = ...,
        shared_cache: Optional[bool] = ...,
        hf_hub_cache: Optional[_Location] = ...,
        chunk_size: Optional[int] = ...,
        coalesce_gap: Optional[int] = ...,
        coalesce_overfetch_percent: Optional[int] = ...,
    ) -> None: ...
    def __enter__(self) -> "safe_open": ...
    def __exit__(self, *exc: Any) -> None: ...
    def close(self) -> None: ...
    def keys(self) -> List[str]: ...
    def offset_keys(self) -> List[str]: ...
    def metadata(self) -> Optional[Dict[str, str]]: ...
    def get_tensor(self, name: str) -> Any: ...
    def get_slice(self, name: str) -> SafeSlice: ...
    def get_tensors(self) -> Dict[str, Any]: ...
    def __contains__(self, name: object) -> bool: ...
    def __iter__(self) -> Iterator[str]: ...
    def __len__(self) -> int: ...
    @property
    def location(self) -> str: ...
    @property
    def remote(self) -> bool: ...
    @property
    def commit(self) -> Optional[str]: ...
    def files(self) -> List[Dict[str, Any]]: ...
    def prefetch(self, names_or_globs: _Names = ..., progress: _Progress = ...) -> Dict[str, int]: ...
    def plan(self, names_or_globs: _Names = ...) -> List[Dict[str, Any]]: ...
    def inspect(self) -> Dict[str, Any]: ...

def load(
    location: _Location,
    names: _Names = ...,
    framework: str = ...,
    device: Any = ...,
    progress: _Progress = ...,
    **options: Any,
) -> Dict[str, Any]: ...
def inspect(location: _Location, **options: Any) -> Dict[str, Any]: ...
def plan(location: _Location, names: _Names = ..., **options: Any) -> List[Dict[str, Any]]: ...
def download(
    location: _Location, dir: _Location, hf_cache: bool = ..., progress: _Progress = ..., **options: Any
) -> Dict[str, Any]: ...
