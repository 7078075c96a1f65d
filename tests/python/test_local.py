# SPDX-License-Identifier: Apache-2.0
"""safe_open on local files: every reference tensor against MANIFEST.json, dtype mapping,
zero-copy views, slices against NumPy slicing, errors, options, threads."""
from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

import tensorfetch
from conftest import CLI, sha256

NUMPY_UNSUPPORTED = {"BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F4", "F6_E2M3",
                     "F6_E3M2"}


def torch_bytes(t) -> bytes:
    import torch
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


@pytest.mark.parametrize("framework", ["np", "pt"])
def test_every_reference_tensor_matches_the_manifest_sha256(reference, manifest, framework):
    if framework == "pt":
        torch = pytest.importorskip("torch")
    checked = refused = 0
    for rel, entry in manifest.items():
        with tensorfetch.safe_open(reference / rel, framework=framework) as f:
            assert f.keys() == sorted(entry["tensors"])
            assert f.metadata() == entry["metadata"]
            for name, t in entry["tensors"].items():
                if framework == "np" and t["dtype"] in NUMPY_UNSUPPORTED or (
                        framework == "pt" and not hasattr(torch, {"F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
                                                                  "U16": "uint16", "U32": "uint32",
                                                                  "U64": "uint64"}.get(t["dtype"], "float32"))):
                    with pytest.raises(tensorfetch.DtypeError, match=f"tensor '{name}' \\({t['dtype']}"):
                        f.get_tensor(name)
                    refused += 1
                    continue
                x = f.get_tensor(name)
                assert list(x.shape) == t["shape"], name
                data = x.tobytes() if framework == "np" else torch_bytes(x)
                assert len(data) == t["nbytes"], name
                assert sha256(data) == t["sha256"], f"{rel}: {name}"
                checked += 1
    assert checked >= (40 if framework == "pt" else 15) and checked + refused == sum(len(e["tensors"]) for e in manifest.values())


def test_numpy_dtypes_follow_safetensors_numpy_rules(reference):
    with tensorfetch.safe_open(reference / "dtypes/model.safetensors", framework="np") as f:
        expect = {"f64": np.float64, "f32": np.float32, "f16": np.float16, "u64": np.uint64, "i64": np.int64,
                  "u32": np.uint32, "i32": np.int32, "u16": np.uint16, "i16": np.int16, "u8": np.uint8,
                  "i8": np.int8, "bool": np.bool_, "c64": np.complex64}
        for name, dtype in expect.items():
            assert f.get_tensor(name).dtype == dtype, name
        with pytest.raises(tensorfetch.DtypeError, match="NumPy has no bfloat16"):
            f.get_tensor("bf16")
        assert f.get_tensor("scalar").shape == ()
        assert f.get_tensor("empty").shape == (0, 7)


def test_torch_dtypes_bf16_and_f8_mapped_or_refused_never_reinterpreted(reference):
    torch = pytest.importorskip("torch")
    with tensorfetch.safe_open(reference / "dtypes/model.safetensors", framework="pt") as f:
        assert f.get_tensor("bf16").dtype == torch.bfloat16
        assert f.get_tensor("bool").dtype == torch.bool
        assert f.get_tensor("c64").dtype == torch.complex64
        for name, attr in (("f8e4m3", "float8_e4m3fn"), ("f8e5m2", "float8_e5m2")):
            if hasattr(torch, attr):
                assert f.get_tensor(name).dtype == getattr(torch, attr)
            else:
                with pytest.raises(tensorfetch.DtypeError, match=f"has no torch.{attr}"):
                    f.get_tensor(name)
        # The values agree with NumPy's for the types both have.
        with tensorfetch.safe_open(reference / "dtypes/model.safetensors", framework="np") as g:
            for name in ("f32", "f64", "i64", "u8", "bool", "c64", "scalar", "empty", "big_f32"):
                assert np.array_equal(f.get_tensor(name).numpy(), g.get_tensor(name)), name


def test_tensors_are_zero_copy_read_only_views_that_outlive_the_handle(reference):
    path = reference / "dtypes/model.safetensors"
    with tensorfetch.safe_open(path, framework="np") as f:
        a = f.get_tensor("big_f32")
        b = f.get_tensor("big_f32")
    assert not a.flags.writeable and not a.flags.owndata
    assert np.shares_memory(a, b)  # the same mapped bytes, not two copies
    with pytest.raises(ValueError):
        a[0, 0] = 1.0
    with pytest.raises(tensorfetch.TensorfetchError, match="closed"):
        f.get_tensor("f32")
    del f
    assert float(a.sum()) == float(a.sum())  # still readable after the handle is gone
    torch = pytest.importorskip("torch")
    with tensorfetch.safe_open(path, framework="pt") as f:
        t = f.get_tensor("big_f32")
        with tensorfetch.safe_open(path, framework="np") as g:
            assert np.array_equal(t.numpy(), g.get_tensor("big_f32"))
    del f
    assert torch.isfinite(t).all()


def test_torch_tensors_are_writable_copy_on_write_and_the_file_never_changes(reference, tmp_path):
    """As safetensors' torch storage (UntypedStorage.from_file(shared=False), MAP_PRIVATE):
    writes work and never reach the file; tensors of one handle share one private mapping per
    file, so a second get_tensor of the same name sees the write (as in safetensors), while other
    handles and NumPy views do not."""
    torch = pytest.importorskip("torch")
    path = tmp_path / "model.safetensors"
    path.write_bytes((reference / "dtypes/model.safetensors").read_bytes())
    before = sha256(path.read_bytes())
    with tensorfetch.safe_open(path, framework="pt") as f:
        t = f.get_tensor("big_f32")
        original = t.clone()
        t.add_(1.0)
        t[0, 0] = -5.0
        assert t[0, 0].item() == -5.0 and torch.equal(t[1:], original[1:] + 1.0)
        again = f.get_tensor("big_f32")
        assert torch.equal(again, t) and again.data_ptr() == t.data_ptr()
        again[0, 1] = -7.0
        assert t[0, 1].item() == -7.0
        for name in ("f32", "scalar", "bf16"):  # the neighbours on the written pages
            with tensorfetch.safe_open(reference / "dtypes/model.safetensors", framework="pt") as ref:
                assert torch.equal(f.get_tensor(name), ref.get_tensor(name)), name
        with tensorfetch.safe_open(path, framework="pt") as g:
            assert torch.equal(g.get_tensor("big_f32"), original)  # another handle
        with tensorfetch.safe_open(path, framework="np") as g:
            assert np.array_equal(g.get_tensor("big_f32"), original.numpy())  # NumPy views
    del f
    assert t[0, 0].item() == -5.0  # the tensor keeps its mapping (and its writes) after close
    assert sha256(path.read_bytes()) == before
    with tensorfetch.safe_open(path, framework="pt") as f:
        assert torch.equal(f.get_tensor("big_f32"), original)
    # load() gives the same writable tensors: a state dict may be modified in place.
    sd = tensorfetch.load(path, names=["big_f32", "f32"], framework="pt")
    sd["big_f32"].mul_(0)
    assert sha256(path.read_bytes()) == before


IN_RANGE_SLICES = [
    np.s_[:], np.s_[0], np.s_[-1], np.s_[3:9], np.s_[3:9, 10:20], np.s_[:, 5], np.s_[..., 7], np.s_[5, ...],
    np.s_[::7], np.s_[1:200:13, ::-3], np.s_[::-1], np.s_[-5:1:-2, 1000:], np.s_[10:10], np.s_[4:2],
    np.s_[:, 1023:1024], np.s_[[]],
]
# Bounds out of range: clipped by NumPy and torch (framework="pt"), refused with framework="np"
# as safetensors' Rust indexer refuses them (test_slices.py checks its messages).
CLIPPED_SLICES = [np.s_[300:], np.s_[-300:4], np.s_[:, 1000:2000], np.s_[256:]]
SLICES = IN_RANGE_SLICES + CLIPPED_SLICES


@pytest.mark.parametrize("index", IN_RANGE_SLICES, ids=[repr(s) for s in IN_RANGE_SLICES])
def test_slices_equal_numpy_slicing_of_the_full_tensor(reference, index):
    with tensorfetch.safe_open(reference / "dtypes/model.safetensors", framework="np") as f:
        full = f.get_tensor("big_f32")
        part = f.get_slice("big_f32")[index]
        assert part.shape == full[index].shape
        assert np.array_equal(part, full[index])


@pytest.mark.parametrize("index", CLIPPED_SLICES, ids=[repr(s) for s in CLIPPED_SLICES])
def test_np_slice_bounds_out_of_range_are_a_slice_error_not_clipped(reference, index):
    with tensorfetch.safe_open(reference / "dtypes/model.safetensors", framework="np") as f:
        with pytest.raises(tensorfetch.SliceError, match=r"^Error during slicing .* with shape \[256, 1024\]: "
                                                          r"index -?\d+ out of bounds for tensor dimension #[01]"):
            f.get_slice("big_f32")[index]


def test_slices_in_torch_equal_numpy_slicing_also_with_negative_steps(reference):
    pytest.importorskip("torch")
    with tensorfetch.safe_open(reference / "dtypes/model.safetensors", framework="pt") as f, \
            tensorfetch.safe_open(reference / "dtypes/model.safetensors", framework="np") as g:
        full = g.get_tensor("big_f32")
        for index in SLICES:
            assert np.array_equal(f.get_slice("big_f32")[index].numpy(), full[index]), index
        s = f.get_slice("bf16")
        assert s.get_dtype() == "BF16" and s.get_shape() == [2, 3, 4]
        assert torch_bytes(s[1, 1:3]) == torch_bytes(f.get_tensor("bf16")[1, 1:3].contiguous())


def test_slice_of_a_sharded_checkpoint_and_bad_indices(reference):
    with tensorfetch.safe_open(reference / "llama-tiny-sharded", framework="pt") as f:
        s = f.get_slice("lm_head.weight")
        assert s.get_shape() == [1200, 64] and s.get_dtype() == "BF16" and len(s) == 1200
        with pytest.raises(tensorfetch.SliceError, match="out of bounds"):  # an IndexError too
            s[1200]
        with pytest.raises(IndexError, match="too many indices"):
            s[0, 0, 0]
        with pytest.raises(TypeError, match="only integers, slices"):
            s[None]
        # Lists: safetensors' SafetensorError, also for torch (whose T[[1, 2]] would gather rows).
        with pytest.raises(tensorfetch.SliceError, match="^Non empty lists are not implemented$"):
            s[[1, 2]]


def test_sharded_and_single_reference_files_hold_the_same_tensors(reference):
    pytest.importorskip("torch")
    with tensorfetch.safe_open(reference / "llama-tiny-sharded", framework="pt") as a, \
            tensorfetch.safe_open(reference / "llama-tiny-single/model.safetensors", framework="pt") as b:
        assert a.keys() == b.keys()
        for k in a.keys():
            assert a.get_tensor(k).equal(b.get_tensor(k)), k
        assert set(a.offset_keys()) == set(a.keys())


def test_errors_are_classes_per_exit_code_naming_file_and_tensor(reference, tmp_path):
    with tensorfetch.safe_open(reference / "llama-tiny-single", framework="np") as f:
        with pytest.raises(KeyError) as e:
            f.get_tensor("model.no_such.weight")
        assert isinstance(e.value, tensorfetch.TensorNotFoundError) and e.value.exit_code == 1
        assert "no tensor named 'model.no_such.weight'" in str(e.value)
        with pytest.raises(tensorfetch.TensorNotFoundError):
            f.prefetch("nothing.matches.*")
    bad = tmp_path / "bad.safetensors"
    header = b' {"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    bad.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 4)
    with pytest.raises(tensorfetch.FormatError) as e:
        tensorfetch.safe_open(bad, framework="np")
    assert e.value.exit_code == 2 and e.value.code == "HeaderStart" and str(bad) in str(e.value)
    with pytest.raises(FileNotFoundError):
        tensorfetch.safe_open(tmp_path / "missing.safetensors")
    assert issubclass(tensorfetch.NetworkError, tensorfetch.TensorfetchError)
    assert tensorfetch.NetworkError.exit_code == 3 and tensorfetch.IntegrityError.exit_code == 4


def test_options_are_checked_like_the_cli(reference):
    path = reference / "dtypes/model.safetensors"
    with pytest.raises(TypeError, match="unexpected keyword argument 'conections'"):
        tensorfetch.safe_open(path, conections=4)
    with pytest.raises(ValueError, match="connections must be between 1 and 256"):
        tensorfetch.safe_open(path, connections=0)
    with pytest.raises(TypeError, match="offline must be True or False"):
        tensorfetch.safe_open(path, offline=1)
    with pytest.raises(ValueError, match="coalesce_overfetch_percent must be between 0 and 1000"):
        tensorfetch.safe_open(path, coalesce_overfetch_percent=1001)
    with tensorfetch.safe_open(path, coalesce_overfetch_percent=0, coalesce_gap=0) as f:
        assert f.keys()
    with pytest.raises(ValueError, match="framework 'tf' is not supported"):
        tensorfetch.safe_open(path, framework="tf")


def test_max_rate_is_checked_like_the_cli(reference):
    """max_rate: 0 or None is no cap; below 1024 bytes/s (or negative, or beyond 1 TiB/s) is a
    ValueError naming it, before anything is opened; not an integer is a TypeError."""
    path = reference / "dtypes/model.safetensors"
    for bad in (1, 1000, 1023):
        with pytest.raises(ValueError, match=f"max_rate must be 0 \\(no cap\\) or at least 1024 bytes/s, not {bad}"):
            tensorfetch.safe_open(path, max_rate=bad)
    for bad in (-1, (1 << 40) + 1):
        with pytest.raises(ValueError, match="max_rate must be between 0 and"):
            tensorfetch.safe_open(path, max_rate=bad)
    with pytest.raises(TypeError, match="max_rate must be an integer"):
        tensorfetch.safe_open(path, max_rate="40M")
    for good in (0, None, 1024, 40_000_000):
        with tensorfetch.safe_open(path, max_rate=good) as f:
            assert f.keys()


def test_inspect_is_the_cli_json_object(reference):
    got = tensorfetch.inspect(reference / "llama-tiny-sharded")
    assert got["sharded"] is True and len(got["files"]) == 3
    if CLI.is_file():
        out = subprocess.run([str(CLI), "inspect", "--json", str(reference / "llama-tiny-sharded")], check=True,
                             capture_output=True, text=True).stdout
        cli = json.loads(out)
        for t in cli["tensors"]:
            t["data_offsets"] = tuple(t["data_offsets"])
        assert got == cli


def test_get_tensor_from_many_threads_at_once(reference):
    pytest.importorskip("torch")
    with tensorfetch.safe_open(reference / "llama-tiny-sharded", framework="pt") as f, \
            tensorfetch.safe_open(reference / "llama-tiny-single", framework="pt") as g:
        names = f.keys()
        expected = {n: torch_bytes(g.get_tensor(n)) for n in names}
        errors = []

        def worker(k: int) -> None:
            try:
                for _ in range(20):
                    for n in names[k % 3::3]:
                        assert torch_bytes(f.get_tensor(n)) == expected[n]
                        rows = f.get_slice(n)[:2]
                        assert torch_bytes(rows.contiguous()) == torch_bytes(g.get_tensor(n)[:2].contiguous())
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[0]
