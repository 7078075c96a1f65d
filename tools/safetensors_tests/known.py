# SPDX-License-Identifier: Apache-2.0
"""Known failures of safetensors' own tests against tensorfetch, each with its class and reason.

Classes: "a" tensorfetch bug, "b" documented difference (docs/python.md, "Differences from
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
    ("test_simple.py::ReadmeTestCase::test_numpy_slice", ("local", "http"), "b",
     r"TypeError: tensor 'a': .* not list$",
     "docs/python.md: get_slice indexing follows NumPy: slice_[list()] is a TypeError (\"safetensors "
     "accepts only [] among them\"); the assertions after it (SafetensorError for [2:, -6], "
     "[[0, 1]], [2:, 20], [:20], [:, :20]) expect safetensors' errors where tensorfetch, as "
     "documented, raises IndexError/TypeError or clips the slice bounds"),
    ("test_simple.py::ReadmeTestCase::test_torch_slice", ("local", "http"), "b",
     r"TypeError: tensor 'a': .* not list$",
     "docs/python.md: get_slice indexing follows NumPy: slice_[list()] is a TypeError (\"safetensors "
     "accepts only [] among them\"); the slices before it passed"),
    ("test_handle.py::ReadmeTestCase::test_fsspec", ("local", "http"), "d",
     r"No module named 'fsspec'",
     "fsspec is not installed (Debian 12 has it: apt-get install python3-fsspec)"),
]

# Rules by pattern, for any test: torch 1.13 lacks float8 and uint16/32/64.
ENV_PATTERNS = [
    (r"DtypeError.*(float8|float4|uint16|uint32|uint64|F8_|F4|U16|U32|U64)"
     r"|module 'torch' has no attribute '(float8|float4|uint16|uint32|uint64)",
     "d", "torch 1.13 has no such dtype (float8/float4 need torch >= 2.1/2.8, uint16/32/64 >= 2.3)"),
]

# Tests that pass here without checking anything, because they return early when torch lacks
# the dtype (torch 1.13): listed so that their passes are not mistaken for a verdict.
VACUOUS = [
    ("test_pt_comparison.py::TorchTestCase::test_odd_dtype_fp8_e4m3fn", "d", "returns early: no torch.float8_e4m3fn (torch >= 2.1)"),
    ("test_pt_comparison.py::TorchTestCase::test_odd_dtype_fp8_e5m2", "d", "returns early: no torch.float8_e5m2 (torch >= 2.1)"),
    ("test_pt_comparison.py::TorchTestCase::test_odd_dtype_fp8_e8m0", "d", "returns early: no torch.float8_e8m0fnu (torch >= 2.8)"),
    ("test_pt_comparison.py::TorchTestCase::test_odd_dtype_fp8_fnuz", "d", "returns early: no torch.float8_e4m3fnuz"),
    ("test_pt_comparison.py::TorchTestCase::test_odd_dtype_fp4", "d", "returns early: no torch.float4_e2m1fn_x2 (torch >= 2.8)"),
]
