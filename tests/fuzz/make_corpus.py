#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Regenerates the fuzz seed corpora (corpus/{header,index,slice}/) and dictionaries.

Usage: python3 tests/fuzz/make_corpus.py [REFERENCE_DIR]
REFERENCE_DIR defaults to ../shared/reference-checkpoints beside the checkout; seeds taken
from it are skipped when it is missing. Every seed is smaller than 8 KiB.

Seeds that are whole files (valid and invalid safetensors, other formats, indexes) live in
testdata/ instead (tools/gen/make_testdata.py); the fuzz tests read both.

Header seeds come in two shapes, matching the two ways fuzz-header reads its input:
  * a whole file: LE64(N) + header + data          (parse_file_prefix)
  * LE64(data_size) + header, without data          (parse_header on input[8:])
"""
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# The dtype table and the contiguous header layout are testdata's generator's (one copy).
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "gen"))
from make_testdata import DTYPE_BITS, layout as tensors_header  # noqa: E402
MAX_SEED = 8 * 1024 - 1



def write(kind, name, data):
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    assert len(data) <= MAX_SEED, (kind, name, len(data))
    with open(os.path.join(HERE, "corpus", kind, name), "wb") as f:
        f.write(data)


def pad8(header: bytes) -> bytes:
    return header + b" " * (-len(header) % 8)


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

    # Whole files, valid and invalid (one rule each), and files of other formats are not
    # written here: they live in testdata/ (tools/gen/make_testdata.py), which the fuzz tests
    # pass to fuzz-header as further seed directories (tests/fuzz/meson.build).

    # A data-less seed (LE64(data size) + header) of a MoE-shaped header.
    for name, tensors in [("h-moe", [("model.layers.%d.mlp.experts.%d.down_proj.weight" % (i, j),
                                      ["BF16", "F8_E4M3", "F32"][j % 3], [16, 8])
                                     for i in range(2) for j in range(4)])]:
        h, size = tensors_header(tensors, metadata={"format": "pt"}, with_metadata=True)
        write("header", "valid-" + name, struct.pack("<Q", size) + pad8(compact(h).encode()))


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


def deep_seeds():
    """Nesting past the 128 levels every JSON reader keeps to (and just at it), where each
    target reads JSON: so the fuzzers start next to the depth check. (The 100,000-deep header
    that once overflowed the parser's stack is 200 KB, too long for a seed: it is replayed from
    regressions/header/.)"""
    def nest(levels, inner="1"):
        return "[" * levels + inner + "]" * levels

    def header(name, text, data_size=0):
        write("header", name, struct.pack("<Q", data_size) + text.encode())

    entry = '"t":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":%s}'
    header("deep-128-entry-field", "{" + entry % nest(126) + "}")
    header("deep-129-entry-field", "{" + entry % nest(127) + "}")
    header("deep-129-metadata", '{"__metadata__":%s}' % nest(128))
    header("deep-objects-129", '{"__metadata__":{"k":%s}}' % ('{"o":' * 127 + "1" + "}" * 127))
    header("deep-4000-metadata", '{"__metadata__":%s}' % nest(4000, ""))
    header("deep-3000-shape", '{"t":{"dtype":"U8","shape":[%s],"data_offsets":[0,0]}}' % nest(2999))
    write("header", "deep-4000-file", pad_file('{"__metadata__":%s}' % nest(4000, "")))
    wm = '"weight_map":{"a":"a.safetensors"}'
    write("index", "deep-128", "{%s,\"x\":%s}" % (wm, nest(127)))
    write("index", "deep-129", "{%s,\"x\":%s}" % (wm, nest(128)))
    write("index", "deep-4000", "{%s,\"metadata\":%s}" % (wm, nest(4000, "")))
    write("slice", "deep-brackets", nest(2000, "0:1"))
    write("slice", "deep-open", "[" * 4000)


def pad_file(header_text):
    """A whole file: LE64(N) + the header padded to a multiple of 8, no data."""
    h = pad8(header_text.encode())
    return struct.pack("<Q", len(h)) + h


def dictionaries():
    dtypes = list(DTYPE_BITS)
    header = ['"dtype"', '"shape"', '"data_offsets"', '"__metadata__"', "{", "}", "[", "]", ":",
              ",", "null", '"format"', '"pt"', '{"dtype":"F32","shape":[],"data_offsets":[0,4]}',
              '"shape":[]', '"data_offsets":[0,0]', "18446744073709551615",
              "18446744073709551616", "9223372036854775808", "4294967296", "-1", "1e3", "1.0",
              "0", "        ", " ", "\t", "\n", "\\u0000", "\\ud800", "\\ud83d\\ude00",
              b"\xc3\xa9", b"\xef\xbb\xbf", b"\xed\xa0\x80", b"\xff", "true", "false",
              '"model.layers.0.mlp.down_proj.weight"', '"bf16"', '"F8"',
              # other formats' magics (lib/format/sniff.cc)
              "GGUF", b"PK\x03\x04", b"PK\x05\x06", "/data.pkl", b"\x80\x02", b"\x80\x05\x95",
              b"\x93NUMPY\x01\x00", b"\x89HDF\r\n\x1a\n", b"\x1f\x8b\x08", b"\x28\xb5\x2f\xfd",
              b"\xfd7zXZ\x00", "BZh9", b"ustar\x00", b"\x08\x08\x12", "<!DOCTYPE html",
              "version https://git-lfs.github.com/spec/v1\n"]
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
    deep_seeds()
    dictionaries()


if __name__ == "__main__":
    main()
