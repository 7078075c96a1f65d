# SPDX-License-Identifier: Apache-2.0
"""Known failures of safetensors' own tests against tensorfetch, each with its class and reason.

Classes: "a" tensorfetch bug, "b" documented difference (README.md, "Differences from
safetensors.safe_open"), "c" shim limitation, "d" environment. An entry matches a failure when
the test id and mode match and its pattern is found in the failure's first line; a failure that
matches no entry is unclassified (and fails the run, as class "a" does). An entry that matches
nothing is reported as stale.
"""

CLASSES = {
    "a": "tensorfetch bug",
    "b": "documented difference",
    "c": "shim limitation",
    "d": "environment",
}

# (test id, modes, class, pattern in the first error line (regex), reason)
KNOWN = [
    ("test_simple.py::ErrorsTestCase::test_file_not_found", ("local", "http"), "a",
     r"",
     "safe_open(\"notafile\") treats a bare word as a Hub repo id instead of raising "
     "FileNotFoundError(\"No such file or directory: notafile\") (being fixed on another branch)"),
    ("test_pt_comparison.py::TorchTestCase::test_zero_sized", ("http",), "a",
     r"NotFetchedError",
     "a zero-length tensor over HTTP raises NotFetchedError (being fixed on another branch)"),
    ("test_pt_comparison.py::TorchTestCase::test_multiple_zero_sized", ("http",), "a",
     r"NotFetchedError",
     "zero-length tensors over HTTP raise NotFetchedError (being fixed on another branch)"),
    ("test_simple.py::ReadmeTestCase::test_numpy_slice", ("local", "http"), "b",
     r"IndexError|TypeError|SafetensorError not raised|TensorfetchError not raised",
     "README: get_slice indexing follows NumPy (out-of-range integers are IndexError, slice "
     "bounds are clipped, lists are TypeError), not safetensors' SafetensorError messages"),
    ("test_simple.py::ReadmeTestCase::test_torch_slice", ("local", "http"), "b",
     r"TypeError",
     "README: get_slice indexing: lists (even []) are a TypeError, \"safetensors accepts only [] "
     "among them\""),
    ("test_handle.py::ReadmeTestCase::test_fsspec", ("local", "http"), "d",
     r"No module named 'fsspec'",
     "fsspec is not installed (Debian 12 has no python3-fsspec here)"),
]

# Rules by pattern, for any test: torch 1.13 lacks float8 and uint16/32/64.
ENV_PATTERNS = [
    (r"DtypeError.*(float8|float4|uint16|uint32|uint64|F8_|F4|U16|U32|U64)"
     r"|module 'torch' has no attribute '(float8|float4|uint16|uint32|uint64)",
     "d", "torch 1.13 has no such dtype (float8/float4 need torch >= 2.1/2.8, uint16/32/64 >= 2.3)"),
]
