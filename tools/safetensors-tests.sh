#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs safetensors' own Python tests (test_simple, test_pt_comparison, test_pt_model,
# test_handle, test_multithreaded) against tensorfetch.safe_open, locally and over HTTP (a
# loopback Range-capable server), prints passed/failed/skipped/errors per file and mode, lists
# every failure with its first error line and class (tools/safetensors_tests/known.py), and exits
# 1 when a failure is a tensorfetch bug or unclassified. Not part of CI (it needs a safetensors
# checkout). safetensors' Python layer comes from the checkout, unchanged; only its compiled
# module is replaced by tools/safetensors_tests/_safetensors_rust.py (test tooling).
#
#   tools/safetensors-tests.sh [SAFETENSORS_SRC] [--mode local|http|both] [--file test_x.py]... [--keep]
#
# SAFETENSORS_SRC (or $SAFETENSORS_SRC): a safetensors source checkout, e.g.
#   mkdir -p /tmp/st && git --git-dir=/work/.mirror/huggingface+safetensors/repo archive HEAD bindings/python | tar -x -C /tmp/st
# tensorfetch's Python package: $TENSORFETCH_PYTHONPATH, default build/lib/python (meson setup
# build -Dpython=enabled && ninja -C build). Interpreter: $PYTHON, default /usr/bin/python3
# (Debian's, with numpy, torch 1.13 and pytest).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PYTHON:-/usr/bin/python3}"
tfpath="${TENSORFETCH_PYTHONPATH:-$root/build/lib/python}"

src="${SAFETENSORS_SRC:-}"
if [[ $# -gt 0 && "$1" != -* ]]; then src="$1"; shift; fi
if [[ -z "$src" ]]; then
    echo "usage: $0 SAFETENSORS_SRC [--mode local|http|both] [--file test_x.py]... [--keep]" >&2
    echo "       (or set SAFETENSORS_SRC)" >&2
    exit 2
fi
if ! PYTHONPATH="$tfpath" "$py" -c 'import tensorfetch, numpy, torch, pytest' 2>/dev/null; then
    echo "safetensors-tests: cannot import tensorfetch (PYTHONPATH=$tfpath), numpy, torch and pytest with $py;" >&2
    echo "  build it: meson setup build -Dpython=enabled && ninja -C build" >&2
    exit 2
fi
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the tree
exec "$py" "$root/tools/safetensors_tests/run.py" "$src" --tensorfetch-python "$tfpath" "$@"
