# SPDX-License-Identifier: Apache-2.0
"""Test tooling, not product code: stands in for safetensors' compiled module
``safetensors._safetensors_rust`` so that safetensors' own Python layer (``__init__.py``,
``torch.py``, ``numpy.py``, copied unchanged from the checkout under test) and safetensors' own
tests run against tensorfetch. tools/safetensors-tests.sh assembles the package.

- ``safe_open`` is ``tensorfetch.safe_open``; with ``TF_ST_MODE=http`` an existing file is opened
  as ``http://127.0.0.1:PORT/<dir-token>/<name>`` from a loopback Range-capable server, with one
  fresh ``cache_dir`` per test session. A path that is not a file is passed on unchanged, so a
  missing file is still tensorfetch's to report.
- ``deserialize`` (what ``safetensors.{torch,numpy}.load`` call) writes the bytes to a file and
  reads every tensor back through that same ``safe_open``.
- ``serialize``/``serialize_file``/``TensorSpec`` write the format (harness: tensorfetch does not
  write); ``SafetensorError`` is ``tensorfetch.TensorfetchError``.
"""
import atexit
import ctypes
import email.utils
import http.server
import itertools
import json
import os
import re
import shutil
import struct
import tempfile
import threading
import urllib.parse

import tensorfetch

__version__ = "0+tensorfetch-shim"
SafetensorError = tensorfetch.TensorfetchError
MODE = os.environ.get("TF_ST_MODE", "local")
if MODE not in ("local", "http"):
    raise RuntimeError(f"TF_ST_MODE must be local or http, not {MODE!r}")

# Calls of tensorfetch.safe_open, read by the report plugin (did a test exercise tensorfetch?).
_opens_seen = [0]


def opens() -> int:
    return _opens_seen[0]


def http_requests() -> int:
    return _RangeHandler.requests


# -- writing (harness) --------------------------------------------------------------------------
# safetensors' Dtype enum order ("increasing alignment"): tensors are sorted by it descending,
# then by name.
_DTYPE_ORDER = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
                "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32",
                "C64", "F64", "I64", "U64"]
_DTYPES = {"bool": "BOOL", "int8": "I8", "uint8": "U8", "int16": "I16", "uint16": "U16",
           "int32": "I32", "uint32": "U32", "int64": "I64", "uint64": "U64", "float16": "F16",
           "float32": "F32", "float64": "F64", "bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3",
           "float8_e4m3fnuz": "F8_E4M3FNUZ", "float8_e5m2": "F8_E5M2",
           "float8_e5m2fnuz": "F8_E5M2FNUZ", "float8_e8m0fnu": "F8_E8M0",
           "float4_e2m1fn_x2": "F4", "complex64": "C64"}


class TensorSpec:
    def __init__(self, *, dtype, shape, data_ptr, data_len):
        if dtype not in _DTYPES:
            raise SafetensorError(f"Unknown dtype {dtype!r}")
        self.dtype = _DTYPES[dtype]
        self.shape = [int(d) for d in shape]
        if self.dtype == "F4" and self.shape:
            self.shape[-1] *= 2
        self.data_ptr, self.data_len = int(data_ptr), int(data_len)


def _serialize(tensor_dict, metadata):
    if not isinstance(tensor_dict, dict) or not all(isinstance(v, TensorSpec) for v in tensor_dict.values()):
        raise TypeError("serialize takes a dict of TensorSpec")
    items = sorted(tensor_dict.items(), key=lambda kv: (-_DTYPE_ORDER.index(kv[1].dtype), kv[0]))
    header, offset = {}, 0
    if metadata is not None:
        header["__metadata__"] = dict(sorted(metadata.items()))
    for name, spec in items:
        header[name] = {"dtype": spec.dtype, "shape": spec.shape,
                        "data_offsets": [offset, offset + spec.data_len]}
        offset += spec.data_len
    h = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    h += b" " * (-len(h) % 8)
    parts = [struct.pack("<Q", len(h)), h]
    parts += [ctypes.string_at(s.data_ptr, s.data_len) if s.data_len else b"" for _, s in items]
    return b"".join(parts)


def serialize(tensor_dict, metadata=None):
    return _serialize(tensor_dict, metadata)


def serialize_file(tensor_dict, filename, metadata=None):
    """As safetensors writes: a sibling temporary file renamed over ``filename``, so a file
    still mapped by tensors loaded from it is never truncated under them."""
    data = _serialize(tensor_dict, metadata)
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(filename)))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temp, filename)
    except BaseException:
        os.unlink(temp)
        raise


# -- the loopback HTTP server (mode http) ------------------------------------------------------
class _RangeHandler(http.server.BaseHTTPRequestHandler):
    """GET/HEAD of ``/<dir-token>/<name>``: 200, or 206 + Content-Range for one ``bytes=`` range,
    416 when unsatisfiable; ETag from inode, size and mtime (a rewritten file gets a new one);
    If-Match honoured (412)."""

    protocol_version = "HTTP/1.1"
    dirs = {}  # token -> directory
    requests = 0  # answered so far (the report shows it: http mode really went over HTTP)

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self._serve(body=False)

    def do_GET(self):
        self._serve(body=True)

    def _send(self, status, headers, payload=b""):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        return payload

    def _serve(self, body):
        with _lock:
            _RangeHandler.requests += 1
        parts = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).split("/")
        directory = self.dirs.get(parts[1]) if len(parts) == 3 else None
        try:
            if directory is None or parts[2] in ("", ".", ".."):
                raise FileNotFoundError
            f = open(os.path.join(directory, parts[2]), "rb")
        except OSError:
            out = self._send(404, [], b"not found")
            if body:
                self.wfile.write(out)
            return
        with f:
            st = os.fstat(f.fileno())
            size = st.st_size
            etag = f'"{st.st_ino:x}-{size:x}-{st.st_mtime_ns:x}"'
            common = [("ETag", etag), ("Accept-Ranges", "bytes"),
                      ("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True))]
            if_match = self.headers.get("If-Match")
            if if_match and if_match.strip() != "*" and etag not in [t.strip() for t in if_match.split(",")]:
                out = self._send(412, common)
            else:
                status, start, stop = 200, 0, size
                m = re.fullmatch(r"bytes=(\d*)-(\d*)", (self.headers.get("Range") or "").strip())
                if m and (m.group(1) or m.group(2)):
                    a, b = m.group(1), m.group(2)
                    if a:
                        start, stop = int(a), min(size, int(b) + 1) if b else size
                    else:
                        start, stop = max(0, size - int(b)), size
                    status = 206 if start < size and start < stop else 416
                if status == 416:
                    out = self._send(416, common + [("Content-Range", f"bytes */{size}")])
                else:
                    f.seek(start)
                    data = f.read(stop - start)
                    extra = [("Content-Range", f"bytes {start}-{stop - 1}/{size}")] if status == 206 else []
                    self.send_response(status)
                    for k, v in common + extra + [("Content-Type", "application/octet-stream")]:
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    out = data
            if body:
                self.wfile.write(out)


_lock = threading.Lock()
_server = None
_tokens = {}  # directory -> token
_session_dir = tempfile.mkdtemp(prefix="tf-st-session-")
atexit.register(shutil.rmtree, _session_dir, True)
CACHE_DIR = os.path.join(_session_dir, "cache")  # fresh per test session (per pytest run)


def _url(path):
    global _server
    directory, name = os.path.split(os.path.realpath(path))
    with _lock:
        if _server is None:
            _server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RangeHandler)
            _server.daemon_threads = True
            threading.Thread(target=_server.serve_forever, daemon=True).start()
        if directory not in _tokens:
            _tokens[directory] = f"d{len(_tokens)}"
            _RangeHandler.dirs[_tokens[directory]] = directory
        token = _tokens[directory]
    return f"http://127.0.0.1:{_server.server_address[1]}/{token}/{urllib.parse.quote(name)}"


# -- reading: tensorfetch ----------------------------------------------------------------------
def safe_open(filename, framework, device="cpu", *, backend="mmap"):
    """safetensors' signature; backend="mmap" (what safetensors.torch/numpy pass) is dropped,
    any other backend is passed on for tensorfetch to judge."""
    options = {} if backend == "mmap" else {"backend": backend}
    location = filename
    if MODE == "http" and isinstance(filename, (str, os.PathLike)) and os.path.isfile(filename):
        location = _url(os.fspath(filename))
        options["cache_dir"] = CACHE_DIR
    _opens_seen[0] += 1
    return tensorfetch.safe_open(location, framework=framework, device=device, **options)


def _safe_open_handle(handle, framework, device="cpu"):
    """tensorfetch opens paths and URLs, not file objects: the handle's path, where it has one."""
    name = getattr(handle, "name", None)
    if not isinstance(name, (str, os.PathLike)) or not os.path.isfile(name):
        raise NotImplementedError("shim: tensorfetch opens paths and URLs, not Python file objects")
    return safe_open(name, framework, device)


_counter = itertools.count()


def deserialize(data):
    """[(name, {"dtype", "shape", "data"})] in file order, every tensor read by tensorfetch
    (NumPy where NumPy has the dtype, else torch, whose tensor is viewed as bytes)."""
    path = os.path.join(_session_dir, f"deserialize-{os.getpid()}-{next(_counter)}.safetensors")
    with open(path, "wb") as f:
        f.write(bytes(data))
    try:
        out = []
        with safe_open(path, "np") as g:
            pt = None
            for name in g.offset_keys():
                sl = g.get_slice(name)
                try:
                    raw = g.get_tensor(name).tobytes()
                except tensorfetch.DtypeError:
                    import torch
                    if pt is None:
                        pt = safe_open(path, "pt")
                    t = pt.get_tensor(name).contiguous().reshape(-1)
                    raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
                out.append((name, {"dtype": sl.get_dtype(), "shape": list(sl.get_shape()), "data": raw}))
        return out
    finally:
        os.unlink(path)
