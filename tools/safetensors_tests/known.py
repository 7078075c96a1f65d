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

# (test id, modes, class, pattern in the first error line (regex), reason). None at present:
# get_slice's indexing follows safetensors' own test_numpy_slice/test_torch_slice (docs/python.md,
# "Slices"); test_handle.py::test_fsspec passes where fsspec is installed (ENV_PATTERNS below).
KNOWN: list = []

# Rules by pattern, for any test (never reported stale): torch 1.13 lacks float8 and
# uint16/32/64; test_handle.py::test_fsspec imports fsspec, which may be missing.
ENV_PATTERNS = [
    (r"No module named 'fsspec'",
     "d", "fsspec is not installed (Debian 12 has it: apt-get install python3-fsspec)"),
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
