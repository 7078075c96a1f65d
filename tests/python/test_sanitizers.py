# SPDX-License-Identifier: Apache-2.0
"""Under the ASan+UBSan build (tests/python/meson.build preloads the runtimes): the suite really
runs with the sanitizers, in an instrumented extension module, and they catch errors."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tensorfetch

EXPECTED = [s for s in os.environ.get("TENSORFETCH_EXPECT_SANITIZERS", "").split(",") if s]
RUNTIMES = {"address": ("libasan", b"__asan_report_"), "undefined": ("libubsan", b"__ubsan_handle_")}

pytestmark = pytest.mark.skipif(not EXPECTED, reason="not a sanitizer build")


def test_the_runtimes_are_loaded_and_the_extension_is_instrumented():
    maps = Path("/proc/self/maps").read_text()
    ext = Path(tensorfetch._tensorfetch.__file__).read_bytes()
    for name in EXPECTED:
        lib, symbol = RUNTIMES[name]
        assert lib in maps, f"{lib} is not loaded into the interpreter"
        assert symbol in ext, f"{tensorfetch._tensorfetch.__file__} is not built with -fsanitize={name}"


@pytest.mark.skipif("address" not in EXPECTED, reason="not an ASan build")
def test_asan_reports_a_heap_overflow_in_this_process_setup():
    """The interpreter with this environment (LD_PRELOAD, ASAN_OPTIONS) stops on a heap overflow."""
    code = ("import ctypes, tensorfetch; libc = ctypes.CDLL(None); libc.malloc.restype = ctypes.c_void_p; "
            "p = libc.malloc(8); buf = ctypes.create_string_buffer(64); ctypes.memmove(buf, p, 64)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "heap-buffer-overflow" in r.stderr, r.stderr[-2000:]
