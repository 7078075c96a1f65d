# SPDX-License-Identifier: Apache-2.0
"""get_slice(...)[...] as safetensors' own tests (test_simple.py, test_numpy_slice and
test_torch_slice) expect it, on a local file and over HTTP (the test server), for a [10, 5]
float64 tensor as theirs:

- `[[]]` (an empty list) selects nothing along dimension 0 (shape [0, 5], equal to A[[]]) in
  both frameworks, with no request for its zero bytes.
- A non-empty list is SafetensorError("Non empty lists are not implemented") in both.
- framework="np" (safetensors' Rust indexer): an integer or explicit slice bound out of range is
  an error with safetensors' exact text ("Invalid index -6 for dimension 1 of size 5",
  "Error during slicing [:20] with shape [10, 5]: index 19 out of bounds for tensor dimension #0
  of size 10"), never clipped; framework="pt" (safetensors hands the index to torch): bounds are
  clipped as torch does, an integer out of range is an IndexError.
- Those errors are `tensorfetch.SliceError`: a TensorfetchError (safetensors' tests, run through
  tools/safetensors-tests.sh, see it as their SafetensorError) and an IndexError; no request is
  made for an index refused.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tensorfetch
from conftest import cdn_requests, safetensors_bytes

A = np.arange(50, dtype=np.float64).reshape(10, 5) * 0.5 - 3.0


@pytest.fixture
def where(request, hub, remote, tmp_path):
    """(location, open options) of a model.safetensors holding "a" = A: a local file, or the
    same bytes as the test server's repo org/slices. Also "z", of shape [0, 5]."""
    # "pad" first: "a" lies past the header window the open reads (16 KiB, `remote`).
    data = safetensors_bytes([("pad", "U8", (40000,), bytes(40000)), ("a", "F64", A.shape, A.tobytes()),
                              ("z", "F64", (0, 5), b"")])
    if request.param == "local":
        path = tmp_path / "slice.safetensors"
        path.write_bytes(data)
        return str(path), {}
    repo = Path(hub.root) / "org" / "slices"
    repo.mkdir(parents=True, exist_ok=True)
    (repo / "model.safetensors").write_bytes(data)
    return "hf://org/slices", remote


MODES = pytest.mark.parametrize("where", ["local", "http"], indirect=True)


def as_numpy(t):
    return t if isinstance(t, np.ndarray) else t.numpy()


@MODES
@pytest.mark.parametrize("framework", ["np", "pt"])
def test_an_empty_list_selects_nothing_along_dim_0_with_no_request(hub, where, framework):
    if framework == "pt":
        pytest.importorskip("torch")
    location, options = where
    with tensorfetch.safe_open(location, framework=framework, **options) as f:
        hub.clear()
        t = f.get_slice("a")[list()]
        assert list(t.shape) == [0, 5]
        assert as_numpy(t).dtype == np.float64 and np.array_equal(as_numpy(t), A[list()])
        assert hub.log() == []  # no request, not even for zero bytes
        # A dimension of size 0: [] still selects nothing, as NumPy's Z[[]].
        assert list(f.get_slice("z")[list()].shape) == [0, 5]
        assert hub.log() == []
        # The rest of the tensor is still served (and fetched) as asked after it.
        assert np.array_equal(as_numpy(f.get_slice("a")[2:, -1]), A[2:, -1])
        if location.startswith("hf://"):
            assert len(cdn_requests(hub.log())) == 1


@MODES
@pytest.mark.parametrize("framework", ["np", "pt"])
def test_a_non_empty_list_is_safetensors_not_implemented_error_with_no_request(hub, where, framework):
    if framework == "pt":
        pytest.importorskip("torch")
    location, options = where
    with tensorfetch.safe_open(location, framework=framework, **options) as f:
        hub.clear()
        for index in ([0, 1], [3]):
            with pytest.raises(tensorfetch.SliceError) as e:
                f.get_slice("a")[index]
            assert str(e.value) == "Non empty lists are not implemented"
            assert isinstance(e.value, tensorfetch.TensorfetchError) and isinstance(e.value, IndexError)
        assert hub.log() == []


# (index, safetensors' exact message) for framework="np", as test_numpy_slice checks them, and
# more of the same rule (an explicit start at or past the size, a negative bound beyond it, the
# last dimension reported first, an index rendered counted from the start).
NP_ERRORS = [
    (np.s_[2:, -6], "Invalid index -6 for dimension 1 of size 5"),
    (np.s_[-11], "Invalid index -11 for dimension 0 of size 10"),
    (np.s_[2:, 20],
     "Error during slicing [2:, 20] with shape [10, 5]: index 20 out of bounds for tensor dimension #1 of size 5"),
    (np.s_[:20],
     "Error during slicing [:20] with shape [10, 5]: index 19 out of bounds for tensor dimension #0 of size 10"),
    (np.s_[:, :20],
     "Error during slicing [:, :20] with shape [10, 5]: index 19 out of bounds for tensor dimension #1 of size 5"),
    (np.s_[10],
     "Error during slicing [10] with shape [10, 5]: index 10 out of bounds for tensor dimension #0 of size 10"),
    (np.s_[10:],
     "Error during slicing [10:] with shape [10, 5]: index 10 out of bounds for tensor dimension #0 of size 10"),
    (np.s_[20, 20],
     "Error during slicing [20, 20] with shape [10, 5]: index 20 out of bounds for tensor dimension #1 of size 5"),
    (np.s_[-1, 3:7],
     "Error during slicing [9, 3:7] with shape [10, 5]: index 6 out of bounds for tensor dimension #1 of size 5"),
    (np.s_[-20:],
     "Error during slicing [-20:] with shape [10, 5]: index -20 out of bounds for tensor dimension #0 of size 10"),
    (np.s_[..., 1:9:2],
     "Error during slicing [..., 1:9:2] with shape [10, 5]: index 8 out of bounds for tensor dimension #1 of size 5"),
]


@MODES
@pytest.mark.parametrize("index,message", NP_ERRORS, ids=[m[:60] for _, m in NP_ERRORS])
def test_np_out_of_range_index_is_safetensors_error_with_its_exact_text_and_no_request(hub, where, index, message):
    location, options = where
    with tensorfetch.safe_open(location, framework="np", **options) as f:
        hub.clear()
        with pytest.raises(tensorfetch.SliceError) as e:
            f.get_slice("a")[index]
        assert str(e.value) == message
        assert isinstance(e.value, tensorfetch.TensorfetchError) and isinstance(e.value, IndexError)
        assert e.value.exit_code == 1
        assert hub.log() == []


# In range: what safetensors' tests slice, and NumPy's answer for them (steps and negative
# bounds too, which safetensors' Rust indexer does not take).
IN_RANGE = [np.s_[:], np.s_[()], np.s_[:2], np.s_[:, :2], np.s_[0, :2], np.s_[2:, 0], np.s_[2:, 1], np.s_[2:, -1],
            np.s_[2:, -5], np.s_[:10, :5], np.s_[9:], np.s_[-3:, ::2], np.s_[::-1], np.s_[4:2], np.s_[5:5, 4]]


@MODES
@pytest.mark.parametrize("framework", ["np", "pt"])
def test_in_range_slices_equal_numpy_slicing(where, framework):
    if framework == "pt":
        pytest.importorskip("torch")
    location, options = where
    with tensorfetch.safe_open(location, framework=framework, **options) as f:
        for index in IN_RANGE:
            t = as_numpy(f.get_slice("a")[index])
            assert t.shape == A[index].shape and np.array_equal(t, A[index]), index


@MODES
def test_pt_clips_slice_bounds_as_torch_and_an_integer_out_of_range_is_an_index_error(hub, where):
    torch = pytest.importorskip("torch")
    location, options = where
    T = torch.from_numpy(A)
    with tensorfetch.safe_open(location, framework="pt", **options) as f:
        s = f.get_slice("a")
        for index in (np.s_[:20], np.s_[:, :20], np.s_[2:, 3:20], np.s_[10:], np.s_[-20:3]):
            assert torch.equal(s[index], T[index]), index
        hub.clear()
        for index, message in ((np.s_[2:, -6], "index -6 is out of bounds for axis 1 with size 5"),
                               (np.s_[2:, 20], "index 20 is out of bounds for axis 1 with size 5")):
            with pytest.raises(tensorfetch.SliceError, match=message):
                s[index]
            with pytest.raises(IndexError):  # as torch's T[2:, -6]
                T[index]
        assert hub.log() == []
