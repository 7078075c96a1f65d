#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Regenerates the fuzz seed corpora (corpus/{header,index,slice}/) and dictionaries.

Usage: python3 tests/fuzz/make_corpus.py [REFERENCE_DIR]
REFERENCE_DIR defaults to ../shared/reference-checkpoints beside the checkout; seeds taken
from it are skipped when it is missing. Every seed is smaller than 8 KiB.

Header seeds come in two shapes, matching the two ways fuzz-header reads its input:
  * a whole file: LE64(N) + header + data          (parse_file_prefix)
  * LE64(data_size) + header, without data          (parse_header on input[8:])
"""
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_SEED = 8 * 1024 - 1

DTYPE_BITS = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8,
    "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16,
    "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64,
    "U64": 64,
}


def write(kind, name, data):
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    assert len(data) <= MAX_SEED, (kind, name, len(data))
    with open(os.path.join(HERE, "corpus", kind, name), "wb") as f:
        f.write(data)


def pad8(header: bytes) -> bytes:
    return header + b" " * (-len(header) % 8)


def whole_file(header, data_size=None, pad=True):
    """LE64(N) + header (+ spaces to a multiple of 8) + zero data bytes."""
    if isinstance(header, str):
        header = header.encode("utf-8", "surrogatepass")
    if pad:
        header = pad8(header)
    if data_size is None:
        data_size = 0
        for key, entry in json.loads(header).items():
            if key != "__metadata__":
                data_size = max(data_size, entry["data_offsets"][1])
    return struct.pack("<Q", len(header)) + header + bytes(data_size)


def tensors_header(tensors, metadata=None, with_metadata=False):
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


def compact(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def header_seeds(ref_dir):
    # --- from the reference checkpoints ---
    if ref_dir and os.path.isdir(ref_dir):
        for root, _, files in sorted(os.walk(ref_dir)):
            for fn in sorted(files):
                if not fn.endswith(".safetensors"):
                    continue
                path = os.path.join(root, fn)
                tag = os.path.basename(root) + "-" + fn.replace(".safetensors", "")
                with open(path, "rb") as f:
                    raw = f.read(MAX_SEED)
                size = os.path.getsize(path)
                (n,) = struct.unpack("<Q", raw[:8])
                # The file's first bytes (its data truncated: refused, deep in the checks).
                write("header", "ref-" + tag + "-prefix", raw)
                if 8 + n <= MAX_SEED:
                    # LE64(data size) + the header: valid for the parse_header path.
                    write("header", "ref-" + tag + "-header",
                          struct.pack("<Q", size - 8 - n) + raw[8:8 + n])

    # --- small valid whole files ---
    def valid(name, tensors, **kw):
        h, _ = tensors_header(tensors, **kw)
        write("header", "valid-" + name, whole_file(compact(h)))

    valid("empty", [])
    valid("scalar", [("x", "F32", [])])
    valid("zero-size", [("a", "F32", [0, 7]), ("b", "BF16", [0]), ("c", "U8", [2])])
    valid("subbyte", [("f4", "F4", [2, 3]), ("f6a", "F6_E2M3", [4]), ("f6b", "F6_E3M2", [1, 4])])
    valid("all-dtypes", [(d.lower(), d, [8]) for d in DTYPE_BITS])
    valid("metadata", [("w", "BF16", [2, 2])], metadata={"format": "pt", "k": "v"},
          with_metadata=True)
    valid("metadata-null", [("w", "I64", [1])], metadata=None, with_metadata=True)
    valid("metadata-empty", [("w", "C64", [1, 1])], metadata={}, with_metadata=True)
    valid("unicode", [("caf\u00e9.\u5c64.\U0001f600", "U8", [3]), ("tab\tnl\n\"q\\", "I8", [1])])
    valid("deep-shape", [("d", "U8", [1] * 40 + [3])])
    # Keys not in offset order, an unknown field, whitespace inside the JSON.
    write("header", "valid-unordered", whole_file(
        '{ "b" : {"data_offsets":[4,6],"dtype":"U8","shape":[2],"extra":{"x":[1,2]}},\n'
        '  "a" : {"shape":[4],"dtype":"BOOL","data_offsets":[0,4]} }'))
    write("header", "valid-unpadded", whole_file('{"t":{"dtype":"F16","shape":[3],'
                                                 '"data_offsets":[0,6]}}', pad=False))
    # The data-less form of a few of them.
    for name, tensors in [("h-moe", [("model.layers.%d.mlp.experts.%d.down_proj.weight" % (i, j),
                                      ["BF16", "F8_E4M3", "F32"][j % 3], [16, 8])
                                     for i in range(2) for j in range(4)])]:
        h, size = tensors_header(tensors, metadata={"format": "pt"}, with_metadata=True)
        write("header", "valid-" + name, struct.pack("<Q", size) + pad8(compact(h).encode()))

    # --- invalid ones, one rule each ---
    good = '{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'

    def bad(name, header, data_size=8, pad=True):
        write("header", "bad-" + name, whole_file(header, data_size=data_size, pad=pad))

    bad("leading-space", " " + good)
    bad("leading-bom", "\ufeff" + good)
    bad("dup-tensor", '{"t":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
                      '"t":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}')
    bad("dup-field", '{"t":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}}')
    bad("dup-unknown", '{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1,"x":2}}')
    bad("dup-metadata", '{"__metadata__":{"a":"1","a":"2"},' + good[1:])
    bad("hole", '{"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}')
    bad("overlap", '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                   '"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}')
    bad("trailing-data", good, data_size=9)
    bad("truncated-data", good, data_size=7)
    bad("float-shape", good.replace("[2]", "[2.0]"))
    bad("exp-shape", good.replace("[2]", "[2e0]"))
    bad("negative-offset", good.replace("[0,8]", "[-0,8]"))
    bad("three-offsets", good.replace("[0,8]", "[0,8,8]"))
    bad("lowercase-dtype", good.replace("F32", "f32"))
    bad("size-mismatch", good.replace("[2]", "[3]"))
    bad("f4-odd", '{"t":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}', data_size=2)
    bad("overflow", '{"t":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}')
    bad("huge-offsets", '{"t":{"dtype":"U8","shape":[1],"data_offsets":'
                        '[18446744073709551615,18446744073709551616]}}')
    bad("metadata-number", '{"__metadata__":{"a":1},' + good[1:])
    bad("metadata-array", '{"__metadata__":["a"],' + good[1:])
    bad("entry-string", '{"t":"F32"}', data_size=0)
    bad("missing-shape", '{"t":{"dtype":"F32","data_offsets":[0,8]}}')
    bad("bad-utf8", b'{"\xff":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}')
    bad("lone-surrogate", '{"\\ud800":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}')
    bad("trailing-garbage", good + "x")
    bad("trailing-nul", good.encode() + b"\0")
    bad("array-root", "[" + good + "]")
    write("header", "bad-too-large", struct.pack("<Q", 100_000_001) + b"{}")
    write("header", "bad-n-past-end", struct.pack("<Q", 64) + b"{}      ")
    write("header", "bad-short", b"\x02\x00\x00")


def index_seeds(ref_dir):
    if ref_dir and os.path.isdir(ref_dir):
        for root, _, files in sorted(os.walk(ref_dir)):
            for fn in sorted(files):
                if fn.endswith(".index.json"):
                    with open(os.path.join(root, fn), "rb") as f:
                        write("index", "ref-" + os.path.basename(root), f.read(MAX_SEED))

    def idx(name, obj_or_text):
        text = obj_or_text if isinstance(obj_or_text, str) else json.dumps(obj_or_text, indent=1)
        write("index", name, text)

    idx("valid-minimal", {"weight_map": {"a": "model.safetensors"}})
    idx("valid-metadata", {"metadata": {"total_size": 12, "total_parameters": 6, "format": "pt",
                                        "flag": True, "ratio": 0.5},
                           "weight_map": {"b": "model-00002-of-00002.safetensors",
                                          "a": "model-00001-of-00002.safetensors",
                                          "c": "model-00002-of-00002.safetensors"}})
    idx("valid-subdir", {"weight_map": {"x": "transformer/diffusion_pytorch_model.safetensors",
                                        "y": "a b/%41.safetensors"},
                         "extra": [1, {"z": None}]})
    idx("valid-null-metadata", {"metadata": None, "weight_map": {}})
    for i, shard in enumerate(["../x.safetensors", "/etc/passwd", "a/../b", "%2e%2e/x",
                               "%2E/x", "a%2fb", "C:\\x", "C:x", "http://h/x",
                               "hf:x", "a\\b", "a//b", "a/", "", ".", "x\u0001y",
                               "x\u007fy", "./x"]):
        idx("unsafe-%02d" % i, {"weight_map": {"t": shard}})
    idx("dup-tensor", '{"weight_map":{"a":"x.safetensors","a":"y.safetensors"}}')
    idx("dup-toplevel", '{"weight_map":{},"weight_map":{"a":"x.safetensors"}}')
    idx("bad-total-size", {"metadata": {"total_size": -1}, "weight_map": {}})
    idx("bad-total-float", {"metadata": {"total_size": 1.5}, "weight_map": {}})
    idx("bad-shard-type", {"weight_map": {"a": 1}})
    idx("bad-no-weight-map", {"metadata": {}})
    # Bare shard names for the direct check_shard_name call.
    for i, name in enumerate(["model-00001-of-00003.safetensors", "sub/dir/x.safetensors",
                              "%2e%2e", "..%2F..%2Fetc", "a:b/c", "1a:b"]):
        write("index", "name-%02d" % i, name)


def slice_seeds():
    for i, text in enumerate(["[0:128, :, 3]", "1:2", "-1", ":", "[:, 1]", "0:0", "2",
                              "[1:3,2:4,0:2]", "[:, :, :, :, :]", "[]", "[-9223372036854775808]",
                              "[18446744073709551615:]", "[::2]", "name[0:1, -2]", "[ 0 : 3 ]",
                              "[,]", "[1:]", "[:1]", "[0,0,0,0]", "[5:3]"]):
        write("slice", "seed-%02d" % i, text)


def dictionaries():
    dtypes = list(DTYPE_BITS)
    header = ['"dtype"', '"shape"', '"data_offsets"', '"__metadata__"', "{", "}", "[", "]", ":",
              ",", "null", '"format"', '"pt"', '{"dtype":"F32","shape":[],"data_offsets":[0,4]}',
              '"shape":[]', '"data_offsets":[0,0]', "18446744073709551615",
              "18446744073709551616", "9223372036854775808", "4294967296", "-1", "1e3", "1.0",
              "0", "        ", " ", "\t", "\n", "\\u0000", "\\ud800", "\\ud83d\\ude00",
              b"\xc3\xa9", b"\xef\xbb\xbf", b"\xed\xa0\x80", b"\xff", "true", "false",
              '"model.layers.0.mlp.down_proj.weight"', '"bf16"', '"F8"']
    header += ['"%s"' % d for d in dtypes]
    index = ['"weight_map"', '"metadata"', '"total_size"', '"total_parameters"', "{", "}", ":",
             ",", "null", '"model-00001-of-00003.safetensors"', '".safetensors"', "/", "\\",
             "..", ".", "%2e", "%2E", "%2f", "%2F", "%5c", "%5C", "%25", "%00", "http:",
             "https://", "file:", "C:", "//", "\\u0000", "\\u002f", "\\/", "\x7f", "\n",
             "18446744073709551615", "-1", "1.5", "true"]
    slices = ["[", "]", ":", ",", " ", "-", "-1", "0", "1:", "::", ":-1", "[:, 0]", "[0:0]",
              "[]", "9223372036854775807", "-9223372036854775808", "9223372036854775808",
              "18446744073709551615", "18446744073709551616", "+1", "1e3", "0x10", "\t",
              "name[0:1]"]

    def esc(word):
        raw = word if isinstance(word, bytes) else word.encode()
        out = ""
        for b in raw:
            if b in (0x22, 0x5C):
                out += "\\" + chr(b)
            elif 0x20 <= b < 0x7F:
                out += chr(b)
            else:
                out += "\\x%02X" % b
        return '"' + out + '"'

    for name, words, what in [("header", header, "safetensors header JSON"),
                              ("index", index, "model.safetensors.index.json and shard names"),
                              ("slice", slices, "slice text")]:
        with open(os.path.join(HERE, name + ".dict"), "w") as f:
            f.write("# libFuzzer dictionary for fuzz-%s (%s). Generated by make_corpus.py.\n"
                    % (name, what))
            for i, w in enumerate(words):
                f.write("kw%d=%s\n" % (i, esc(w)))


def main():
    default_ref = os.path.join(HERE, "..", "..", "..", "shared", "reference-checkpoints")
    ref_dir = sys.argv[1] if len(sys.argv) > 1 else default_ref
    for kind in ("header", "index", "slice"):
        d = os.path.join(HERE, "corpus", kind)
        os.makedirs(d, exist_ok=True)
        for fn in os.listdir(d):
            os.remove(os.path.join(d, fn))
    header_seeds(ref_dir)
    index_seeds(ref_dir)
    slice_seeds()
    dictionaries()


if __name__ == "__main__":
    main()
