#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes testdata/: the small crafted files the tests and fuzz seeds use.

Usage: /usr/bin/python3 tools/gen/make_testdata.py [OUT_DIR]
OUT_DIR defaults to testdata/ at the top of the checkout. Standard library only; the output
is byte-for-byte deterministic (tests/unit/test_testdata.cc regenerates it into a temporary
directory and compares). testdata/README.md (written by hand) says what each file is.

  safetensors/valid/      valid files, each a format corner (all dtypes, scalars, ...)
  safetensors/invalid/    one broken rule per file; codes.json: file -> expected ErrorCode
  index/sharded/          a valid 2-shard checkpoint (index + shards)
  index/invalid/          bad *.safetensors.index.json; codes.json: file -> expected ErrorCode
  other-formats/          files of other formats; formats.json: file -> the format recognised
"""
import bz2
import collections
import gzip
import hashlib
import io
import json
import lzma
import os
import pickle
import shutil
import struct
import sys
import tarfile
import types
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.normpath(os.path.join(HERE, "..", "..", "testdata"))

DTYPE_BITS = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8,
    "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16,
    "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64,
    "U64": 64,
}
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed, so that archives are reproducible


class Out:
    def __init__(self, root):
        self.root = root

    def write(self, rel, data):
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogatepass")
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        return data

    def write_json(self, rel, obj):
        self.write(rel, json.dumps(obj, indent=1, sort_keys=True) + "\n")


# --- safetensors ---

def compact(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def pad8(header):
    return header + b" " * (-len(header) % 8)


def data_bytes(n):
    """Deterministic, non-zero data (so that a copy shows where its bytes came from)."""
    return bytes((i * 7 + 3) % 251 for i in range(n))


def layout(tensors, metadata=None, with_metadata=False):
    """A header dict for (name, dtype, shape) laid out contiguously, and its data size."""
    h = {}
    if with_metadata:
        h["__metadata__"] = metadata
    offset = 0
    for name, dtype, shape in tensors:
        n = 1
        for d in shape:
            n *= d
        size = n * DTYPE_BITS[dtype] // 8
        h[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    return h, offset


def safetensors(header, data_size, pad=True, length=None):
    """LE64(N) + header (+ spaces to a multiple of 8, or to `length`) + data bytes."""
    if not isinstance(header, bytes):
        header = (header if isinstance(header, str) else compact(header)).encode("utf-8", "surrogatepass")
    if length is not None:
        assert len(header) <= length
        header += b" " * (length - len(header))
    elif pad:
        header = pad8(header)
    return struct.pack("<Q", len(header)) + header + data_bytes(data_size)


def valid_file(tensors, **kw):
    h, size = layout(tensors, **kw)
    return safetensors(h, size)


TINY = [("model.embed.weight", "F32", [4, 2]), ("model.norm.weight", "BF16", [2]),
        ("model.step", "I64", [])]


def valid_safetensors(out):
    d = "safetensors/valid/"
    out.write(d + "tiny.safetensors", valid_file(TINY, metadata={"format": "pt"}, with_metadata=True))
    out.write(d + "empty.safetensors", valid_file([]))
    out.write(d + "scalar-and-zero-size.safetensors",
              valid_file([("s", "F32", []), ("z", "F32", [0, 7]), ("b", "BF16", [0]), ("c", "U8", [2])]))
    out.write(d + "subbyte.safetensors",
              valid_file([("f4", "F4", [2, 3]), ("f6a", "F6_E2M3", [4]), ("f6b", "F6_E3M2", [1, 4])]))
    out.write(d + "all-dtypes.safetensors", valid_file([(t.lower(), t, [8]) for t in DTYPE_BITS]))
    out.write(d + "metadata-null.safetensors", valid_file([("w", "I64", [1])], metadata=None, with_metadata=True))
    out.write(d + "metadata-empty.safetensors", valid_file([("w", "C64", [1, 1])], metadata={}, with_metadata=True))
    out.write(d + "unicode-names.safetensors",
              valid_file([("caf\u00e9.\u5c64.\U0001f600", "U8", [3]), ("tab\tnl\n\"q\\", "I8", [1])]))
    out.write(d + "deep-shape.safetensors", valid_file([("d", "U8", [1] * 40 + [3])]))
    # Keys not in offset order, an unknown field, white space inside the JSON.
    out.write(d + "unordered.safetensors", safetensors(
        '{ "b" : {"data_offsets":[4,6],"dtype":"U8","shape":[2],"extra":{"x":[1,2]}},\n'
        '  "a" : {"shape":[4],"dtype":"BOOL","data_offsets":[0,4]} }', 6))
    out.write(d + "unpadded.safetensors",
              safetensors('{"t":{"dtype":"F16","shape":[3],"data_offsets":[0,6]}}', 6, pad=False))
    # Header lengths whose first bytes are also another format's magic: 640 = 0x0280 starts
    # with \x80\x02, pickle's PROTO 2 opcode. Valid: must be read, never called a pickle.
    h, size = layout(TINY)
    out.write(d + "length-640-pickle-prefix.safetensors", safetensors(h, size, length=640))


def invalid_safetensors(out):
    d = "safetensors/invalid/"
    codes = {}
    good = '{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'

    def bad(name, code, data, ):
        out.write(d + name + ".safetensors", data)
        codes[name + ".safetensors"] = code

    def bad_header(name, code, header, data_size=8, pad=True):
        bad(name, code, safetensors(header, data_size, pad=pad))

    bad_header("leading-space", "HeaderStart", " " + good)
    bad_header("leading-bom", "HeaderStart", "\ufeff" + good)
    bad_header("array-root", "HeaderStart", "[" + good + "]")
    bad_header("dup-tensor", "DuplicateKey", '{"t":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
                                             '"t":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}')
    bad_header("dup-field", "DuplicateKey", '{"t":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}}')
    bad_header("dup-unknown", "DuplicateKey", '{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1,"x":2}}')
    bad_header("dup-metadata", "DuplicateKey", '{"__metadata__":{"a":"1","a":"2"},' + good[1:])
    bad_header("hole", "HoleOrOverlap", '{"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}')
    bad_header("overlap", "HoleOrOverlap", '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                                           '"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}')
    bad_header("trailing-data", "DataSizeMismatch", good, data_size=9)
    bad_header("truncated-data", "DataSizeMismatch", good, data_size=7)
    bad_header("float-shape", "InvalidShape", good.replace("[2]", "[2.0]"))
    bad_header("exponent-shape", "InvalidShape", good.replace("[2]", "[2e0]"))
    bad_header("negative-zero-offset", "InvalidOffsets", good.replace("[0,8]", "[-0,8]"))
    bad_header("three-offsets", "InvalidOffsets", good.replace("[0,8]", "[0,8,8]"))
    bad_header("huge-offsets", "InvalidOffsets",
               '{"t":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,18446744073709551616]}}')
    bad_header("lowercase-dtype", "InvalidDtype", good.replace("F32", "f32"))
    bad_header("size-mismatch", "SizeMismatch", good.replace("[2]", "[3]"))
    bad_header("f4-odd", "SizeMismatch", '{"t":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}', data_size=2)
    bad_header("overflow", "Overflow",
               '{"t":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}')
    bad_header("metadata-number", "InvalidMetadata", '{"__metadata__":{"a":1},' + good[1:])
    bad_header("metadata-array", "InvalidMetadata", '{"__metadata__":["a"],' + good[1:])
    bad_header("entry-string", "InvalidEntry", '{"t":"F32"}', data_size=0)
    bad_header("missing-shape", "InvalidEntry", '{"t":{"dtype":"F32","data_offsets":[0,8]}}')
    bad_header("invalid-utf8", "HeaderJson", b'{"\xff":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}')
    bad_header("lone-surrogate", "HeaderJson", '{"\\ud800":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}')
    bad_header("trailing-garbage", "HeaderJson", good + "x")
    bad_header("trailing-nul", "HeaderJson", good.encode() + b"\0")
    bad("too-large", "HeaderTooLarge", struct.pack("<Q", 100_000_001) + b"{}")
    bad("length-past-end", "FileTooSmall", struct.pack("<Q", 64) + b"{}      ")
    bad("short", "FileTooSmall", b"\x02\x00\x00")
    # The valid length-640 file cut inside its header: still safetensors (a truncated one),
    # although its first bytes are pickle's PROTO 2.
    h, size = layout(TINY)
    bad("length-640-pickle-prefix-truncated", "FileTooSmall", safetensors(h, size, length=640)[:300])
    out.write_json(d + "codes.json", codes)


# --- indexes ---

def indexes(out):
    d = "index/sharded/"
    shards = [[("model.embed.weight", "F32", [4, 2]), ("model.layers.0.w", "BF16", [2, 2])],
              [("model.layers.1.w", "BF16", [2, 2]), ("model.norm.weight", "F32", [2])]]
    weight_map, total = {}, 0
    for i, tensors in enumerate(shards):
        name = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
        h, size = layout(tensors)
        out.write(d + name, safetensors(h, size))
        total += size
        for t in tensors:
            weight_map[t[0]] = name
    out.write_json(d + "model.safetensors.index.json",
                   {"metadata": {"total_size": total}, "weight_map": weight_map})

    d = "index/invalid/"
    codes = {}

    def bad(name, code, obj_or_text):
        text = obj_or_text if isinstance(obj_or_text, str) else json.dumps(obj_or_text, indent=1)
        out.write(d + name + ".safetensors.index.json", text)
        codes[name + ".safetensors.index.json"] = code

    bad("no-weight-map", "InvalidIndex", {"metadata": {}})
    bad("empty-weight-map", "InvalidIndex", {"weight_map": {}})
    bad("shard-not-string", "InvalidIndex", {"weight_map": {"a": 1}})
    bad("total-size-negative", "InvalidIndex", {"metadata": {"total_size": -1}, "weight_map": {"a": "x.safetensors"}})
    bad("not-json", "InvalidIndex", '{"weight_map": {"a": "x.safetensors"}')
    bad("dup-tensor", "InvalidIndex", '{"weight_map":{"a":"x.safetensors","a":"y.safetensors"}}')
    bad("unsafe-parent", "UnsafeShardName", {"weight_map": {"a": "../x.safetensors"}})
    bad("unsafe-absolute", "UnsafeShardName", {"weight_map": {"a": "/etc/passwd"}})
    bad("unsafe-percent-dotdot", "UnsafeShardName", {"weight_map": {"a": "%2e%2e/x.safetensors"}})
    bad("unsafe-backslash", "UnsafeShardName", {"weight_map": {"a": "a\\b.safetensors"}})
    bad("unsafe-scheme", "UnsafeShardName", {"weight_map": {"a": "http://h/x.safetensors"}})
    out.write_json(d + "codes.json", codes)


# --- other formats ---

def gguf_file():
    """A minimal, valid GGUF version 3 file: two metadata keys and one F32 tensor [2, 2]."""
    def s(text):
        b = text.encode()
        return struct.pack("<Q", len(b)) + b
    kv = [("general.architecture", 8, s("llama")), ("general.alignment", 4, struct.pack("<I", 32))]
    out = b"GGUF" + struct.pack("<IQQ", 3, 1, len(kv))
    for key, vtype, value in kv:
        out += s(key) + struct.pack("<I", vtype) + value
    # Tensor info: name, n_dims, dims (innermost first), ggml type 0 (F32), data offset.
    out += s("token_embd.weight") + struct.pack("<I", 2) + struct.pack("<QQ", 2, 2) + struct.pack("<IQ", 0, 0)
    out += b"\0" * (-len(out) % 32)
    return out + struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)


class _FakeTorch:
    """Stand-ins for torch.FloatStorage and torch._utils._rebuild_tensor_v2, so that the
    standard pickle module writes the globals torch.save writes (torch.load reads the result;
    checked with Debian's python3-torch 1.13)."""

    def __enter__(self):
        torch = types.ModuleType("torch")
        utils = types.ModuleType("torch._utils")

        class FloatStorage:
            pass
        FloatStorage.__module__, FloatStorage.__qualname__ = "torch", "FloatStorage"

        def _rebuild_tensor_v2(*args):
            return args
        _rebuild_tensor_v2.__module__, _rebuild_tensor_v2.__qualname__ = "torch._utils", "_rebuild_tensor_v2"
        torch.FloatStorage, torch._utils, utils._rebuild_tensor_v2 = FloatStorage, utils, _rebuild_tensor_v2
        self.saved = {k: sys.modules.get(k) for k in ("torch", "torch._utils")}
        sys.modules["torch"], sys.modules["torch._utils"] = torch, utils
        self.FloatStorage, self.rebuild = FloatStorage, _rebuild_tensor_v2
        return self

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


class _Storage:
    def __init__(self, key, values):
        self.key, self.values = key, values


class _Tensor:
    def __init__(self, fake, storage, shape):
        self.fake, self.storage, self.shape = fake, storage, shape

    def __reduce__(self):
        stride = (self.shape[1], 1)
        return (self.fake.rebuild, (self.storage, 0, self.shape, stride, False, collections.OrderedDict()))


def torch_pickle(fake, obj, persistent_id):
    buf = io.BytesIO()
    p = pickle.Pickler(buf, protocol=2)
    p.persistent_id = persistent_id
    p.dump(obj)
    return buf.getvalue()


def pytorch_zip():
    """torch.save's format since PyTorch 1.6: a zip of ARCHIVE/data.pkl, byteorder, data/0, version."""
    with _FakeTorch() as fake:
        storage = _Storage("0", [1.0, 2.0, 3.0, 4.0])
        obj = {"weight": _Tensor(fake, storage, (2, 2))}
        data_pkl = torch_pickle(fake, obj, lambda o: ("storage", fake.FloatStorage, o.key, "cpu", len(o.values))
                                if isinstance(o, _Storage) else None)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, data in [("archive/data.pkl", data_pkl), ("archive/byteorder", b"little"),
                           ("archive/data/0", struct.pack("<4f", *storage.values)), ("archive/version", b"3\n")]:
            z.writestr(zipfile.ZipInfo(name, ZIP_TIME), data)
    return buf.getvalue()


def pytorch_legacy():
    """torch.save(..., _use_new_zipfile_serialization=False): pickles of the magic number, the
    protocol version and system info, the object, the storage keys; then each storage."""
    with _FakeTorch() as fake:
        storage = _Storage("0", [1.0, 2.0, 3.0, 4.0])
        obj = {"weight": _Tensor(fake, storage, (2, 2))}
        out = pickle.dumps(0x1950a86a20f9469cfc6c, protocol=2)
        out += pickle.dumps(1001, protocol=2)
        out += pickle.dumps({"protocol_version": 1001, "little_endian": True,
                             "type_sizes": {"short": 2, "int": 4, "long": 4}}, protocol=2)
        out += torch_pickle(fake, obj, lambda o: ("storage", fake.FloatStorage, o.key, "cpu", len(o.values), None)
                            if isinstance(o, _Storage) else None)
    out += pickle.dumps([storage.key], protocol=2)
    return out + struct.pack("<q", len(storage.values)) + struct.pack("<4f", *storage.values)


def npy(descr, shape, data):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, repr(tuple(shape)))
    header += " " * (-(10 + len(header) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data


def npz():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr(zipfile.ZipInfo("x.npy", ZIP_TIME), npy("<f4", [2], struct.pack("<2f", 1.0, 2.0)))
        z.writestr(zipfile.ZipInfo("y.npy", ZIP_TIME), npy("<i8", [1], struct.pack("<q", 7)))
    return buf.getvalue()


def hdf5_superblock():
    """The HDF5 signature and a version-0 superblock (sizes of offsets and lengths 8): enough to
    recognise, not a complete HDF5 file (Debian's python3 has no h5py)."""
    undefined = b"\xff" * 8
    return (b"\x89HDF\r\n\x1a\n" + bytes([0, 0, 0, 0, 0, 8, 8, 0]) + struct.pack("<HHI", 4, 16, 0)
            + struct.pack("<Q", 0) + undefined + struct.pack("<Q", 96) + undefined + b"\0" * 40)


def protobuf_varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def pb_field(number, value):
    """A protobuf field: an int as a varint, bytes/str length-delimited."""
    if isinstance(value, int):
        return protobuf_varint(number << 3) + protobuf_varint(value)
    if isinstance(value, str):
        value = value.encode()
    return protobuf_varint(number << 3 | 2) + protobuf_varint(len(value)) + value


def onnx_model():
    """An ONNX ModelProto by hand (onnx.proto field numbers): y = Identity(x), opset 17."""
    node = pb_field(1, "x") + pb_field(2, "y") + pb_field(4, "Identity")
    graph = pb_field(1, node) + pb_field(2, "g") + pb_field(11, pb_field(1, "x")) + pb_field(12, pb_field(1, "y"))
    return (pb_field(1, 8) + pb_field(2, "tensorfetch-testdata") + pb_field(3, "1") + pb_field(7, graph)
            + pb_field(8, pb_field(2, 17)))


def zstd_frame(data):
    """A Zstandard frame holding `data` in one raw block (RFC 8878): single segment, 1-byte
    content size, no checksum."""
    assert len(data) < 256
    block_header = (1 | 0 << 1 | len(data) << 3).to_bytes(3, "little")  # last block, raw
    return b"\x28\xb5\x2f\xfd" + bytes([0x20, len(data)]) + block_header + data


def tar_of(name, data):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(data), 0, 0o644
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def other_formats(out):
    d = "other-formats/"
    formats = {}

    def other(name, fmt, data):
        out.write(d + name, data)
        formats[name] = fmt

    tiny = valid_file(TINY, metadata={"format": "pt"}, with_metadata=True)
    other("model.gguf", "Gguf", gguf_file())
    other("pytorch_model.bin", "PyTorchZip", pytorch_zip())
    other("pytorch_model-legacy.bin", "PyTorchPickle", pytorch_legacy())
    other("state.pkl", "Pickle", pickle.dumps({"weights": [0.5, 1.5], "step": 3}, protocol=4))
    other("array.npy", "Npy", npy("<f4", [3], struct.pack("<3f", 1.0, 2.0, 3.0)))
    other("arrays.npz", "NumpyZip", npz())
    other("archive.zip", "Zip", _zip_of("notes.txt", b"not a checkpoint\n"))
    other("model.h5", "Hdf5", hdf5_superblock())
    other("userblock.h5", "Hdf5", b"\0" * 512 + hdf5_superblock())
    other("model.onnx", "Onnx", onnx_model())
    # mtime 0: the first 8 bytes read as a header length of 559,903, within the limit.
    other("model.safetensors.gz", "Gzip", gzip.compress(tiny, compresslevel=9, mtime=0))
    other("model.safetensors.zst", "Zstd", zstd_frame(tiny[:200]))
    other("model.safetensors.xz", "Xz", lzma.compress(tiny))
    other("model.safetensors.bz2", "Bzip2", bz2.compress(tiny))
    # A one-letter first name: the first 8 bytes read as a header length of 109.
    other("model.tar", "Tar", tar_of("m", tiny))
    other("lfs-pointer/model.safetensors", "GitLfsPointer",
          "version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n"
          % (hashlib.sha256(tiny).hexdigest(), len(tiny)))
    other("page.html", "Html", "<!DOCTYPE html>\n<html lang=\"en\">\n<head><title>Sign in</title></head>\n"
                               "<body><p>Please sign in to continue.</p></body>\n</html>\n")
    other("config.json", "Json", json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
                                            indent=2) + "\n")
    out.write_json(d + "formats.json", formats)


def _zip_of(name, data):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo(name, ZIP_TIME), data, compress_type=zipfile.ZIP_STORED)
    return buf.getvalue()


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    # Only the generated folders are replaced; README.md stays.
    for sub in ("safetensors", "index", "other-formats"):
        shutil.rmtree(os.path.join(root, sub), ignore_errors=True)
    out = Out(root)
    valid_safetensors(out)
    invalid_safetensors(out)
    indexes(out)
    other_formats(out)


if __name__ == "__main__":
    main()
