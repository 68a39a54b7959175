#!/usr/bin/env python3
"""Writes the committed seed corpora of the fuzz targets (standard library only; run from anywhere):

    python3 fuzz/make_corpus.py        # -> fuzz/corpus/safetensors/*, fuzz/corpus/idx/*

Each seed is small (libFuzzer mutates faster) and named after the case it covers. Besides valid
files they hold the classic attacks on a loader: a header length beyond the 100 MB cap or the
file, shapes whose element count or byte size overflows 64 bits, overlapping / gapped /
out-of-file / zero-size data offsets, truncated files, wrong magic numbers and IDX dims whose
product overflows. tests/io and tests/data check the exact error messages; the fuzzers start
from these so they explore around every check.
"""
import base64
import gzip
import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ------------------------------------------------------------------------------------ safetensors
def st_raw(header_bytes, data=b"", length=None):
    """u64 little-endian header length, header, data."""
    n = len(header_bytes) if length is None else length
    return struct.pack("<Q", n) + header_bytes + data


def st(header, data=b"", pad=True):
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return st_raw(h, data)


f32x6 = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
i64x2 = struct.pack("<2q", -7, 9)
S = "safetensors"
write(S, "valid_two_tensors_metadata", st({
    "__metadata__": {"format": "pt", "note": "seed"},
    "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
    "idx": {"dtype": "I64", "shape": [2], "data_offsets": [24, 40]}}, f32x6 + i64x2))
write(S, "valid_all_dtypes", st({
    "a": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]},
    "b": {"dtype": "F16", "shape": [2], "data_offsets": [8, 12]},
    "c": {"dtype": "BF16", "shape": [2], "data_offsets": [12, 16]},
    "d": {"dtype": "I32", "shape": [1], "data_offsets": [16, 20]},
    "e": {"dtype": "U8", "shape": [2], "data_offsets": [20, 22]},
    "f": {"dtype": "BOOL", "shape": [2], "data_offsets": [22, 24]}}, bytes(range(24))))
write(S, "valid_scalar_shape_empty", st({"s": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}},
                                        struct.pack("<f", 3.5)))
write(S, "valid_empty_header", st({}))
write(S, "zero_size_tensor", st({
    "z": {"dtype": "F32", "shape": [0, 5], "data_offsets": [0, 0]},
    "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, f32x6[:8]))
write(S, "zero_size_nonzero_offsets", st({
    "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
    "z": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]}}, f32x6[:8]))
write(S, "header_too_large", st_raw(b"{}", length=100_000_001))
write(S, "header_length_u64_max", st_raw(b"{}", length=2**64 - 1))
write(S, "header_beyond_file", st_raw(b'{"a":1}', length=4096))
write(S, "file_shorter_than_8", b"\x10\x00\x00")
write(S, "empty_file", b"")
write(S, "header_not_json", st_raw(b"not json at all!"))
write(S, "header_not_object", st_raw(b"[1,2,3] "))
write(S, "header_invalid_utf8", st_raw(b'{"\xff\xfe":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}   ',
                                       b"\0\0\0\0"))
write(S, "header_deep_nesting", st_raw(b"[" * 5000 + b"]" * 5000))
write(S, "shape_product_overflows", st({
    "x": {"dtype": "F32", "shape": [4294967296, 4294967296, 16], "data_offsets": [0, 16]}}, bytes(16)))
write(S, "shape_bytes_overflow", st({
    "x": {"dtype": "F64", "shape": [2**61 + 1], "data_offsets": [0, 8]}}, bytes(8)))
write(S, "shape_negative", st({"x": {"dtype": "F32", "shape": [-1, 4], "data_offsets": [0, 16]}},
                               bytes(16)))
write(S, "shape_float", st({"x": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}}, bytes(4)))
write(S, "shape_huge_number", st_raw(
    b'{"x":{"dtype":"F32","shape":[1e400],"data_offsets":[0,4]}}     ', bytes(4)))
write(S, "shape_mismatch_size", st({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}},
                                   bytes(8)))
write(S, "offsets_overlap", st({
    "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
    "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}, bytes(24)))
write(S, "offsets_gap", st({
    "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
    "b": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}}, bytes(24)))
write(S, "offsets_reversed", st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, bytes(8)))
write(S, "offsets_beyond_file", st({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}},
                                   bytes(8)))
write(S, "offsets_u64_max", st({"a": {"dtype": "U8", "shape": [1],
                                      "data_offsets": [2**64 - 1, 2**64]}}))
write(S, "offsets_three_entries", st({"a": {"dtype": "F32", "shape": [1],
                                            "data_offsets": [0, 4, 8]}}, bytes(8)))
write(S, "trailing_bytes", st({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}},
                              bytes(12)))
write(S, "truncated_data", st({
    "__metadata__": {"format": "pt"},
    "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}, f32x6)[:-5])
write(S, "truncated_header", st({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}},
                                f32x6)[:30])
write(S, "unknown_dtype", st({"a": {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}}, bytes(4)))
write(S, "dtype_not_string", st({"a": {"dtype": 7, "shape": [1], "data_offsets": [0, 4]}}, bytes(4)))
write(S, "missing_fields", st({"a": {"dtype": "F32"}}))
write(S, "extra_field", st({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": 1}},
                           bytes(4)))
write(S, "duplicate_names", st_raw(
    b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
    b'"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"\1\2"))
write(S, "metadata_not_strings", st({"__metadata__": {"k": 1, "l": [1]}}))
write(S, "metadata_with_dtype", st({"__metadata__": {"dtype": "F32", "shape": "[1]"}}))
write(S, "wrong_magic_pickle", b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19" + bytes(32))
write(S, "header_leading_spaces", st_raw(b'   {"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\1"))

# ------------------------------------------------------------------------------------ IDX
def idx(type_code, dims, payload, ndim=None):
    nd = len(dims) if ndim is None else ndim
    return bytes([0, 0, type_code, nd]) + b"".join(struct.pack(">I", d) for d in dims) + payload


I = "idx"
write(I, "valid_u8_images", idx(0x08, [2, 3, 3], bytes(range(18))))
write(I, "valid_u8_labels", idx(0x08, [5], bytes([1, 0, 9, 3, 7])))
write(I, "valid_i32", idx(0x0C, [2, 2], struct.pack(">4i", 1, -2, 3, -4)))
write(I, "valid_f32", idx(0x0D, [3], struct.pack(">3f", 1.5, -2.25, 1e30)))
write(I, "valid_f64", idx(0x0E, [1, 2], struct.pack(">2d", 3.25, -1e300)))
write(I, "zero_dim", idx(0x08, [0, 28, 28], b""))
write(I, "wrong_magic_nonzero_prefix", bytes([1, 0, 8, 1]) + struct.pack(">I", 2) + b"\1\2")
write(I, "wrong_magic_unknown_type", idx(0x09, [2], b"\1\2"))
write(I, "wrong_magic_zero_ndim", idx(0x08, [], b"\1\2", ndim=0))
write(I, "ndim_255_truncated_header", idx(0x08, [1, 1], b"", ndim=255))
write(I, "truncated_header", idx(0x08, [60000, 28, 28], b"")[:9])
write(I, "truncated_data", idx(0x08, [4, 4], bytes(10)))
write(I, "extra_data", idx(0x08, [2], bytes(5)))
write(I, "dims_product_overflows", idx(0x0E, [0xFFFFFFFF] * 4, bytes(8)))
write(I, "dims_product_overflows_u8", idx(0x08, [0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF], bytes(8)))
write(I, "dims_product_wraps_to_small", idx(0x08, [0x10000, 0x10000, 0x10000, 0x10000, 2], bytes(2)))
write(I, "too_short", b"\0\0")
write(I, "empty", b"")
# Inputs the fuzzer found (regressions): zero elements, but the strides / the running element
# count of the other dims overflow int64.
write(I, "regress_strides_overflow", base64.b64decode("AAAIBwABAAAAAQABAAAAIQAAAAAAAQYACgsMDQ4PEBE="))
write(I, "regress_numel_overflow", base64.b64decode("AAAIBwABAAAAAQAA/////wAAAAAAACAJCgsMDQ4PEBE="))
gz = gzip.compress(idx(0x08, [3, 2], bytes(range(6))), mtime=0)
write(I, "gzip_valid", gz)
write(I, "gzip_truncated", gz[:-7])
write(I, "gzip_bad_crc", gz[:-8] + b"\0\0\0\0" + gz[-4:])
write(I, "gzip_isize_huge", gz[:-4] + struct.pack("<I", 0xFFFFFFFF))
write(I, "gzip_two_members", gz + gzip.compress(b"\1\2", mtime=0))
write(I, "gzip_trailing_garbage", gz + b"garbage")
write(I, "gzip_header_only", gz[:10])
write(I, "gzip_inner_wrong_magic", gzip.compress(b"\x00\x01\x08\x01\x00\x00\x00\x01\x05", mtime=0))
write(I, "gzip_expands_1mb", gzip.compress(idx(0x08, [1024, 1024], bytes(1024 * 1024)), mtime=0))

print("wrote", sum(len(fs) for _, _, fs in os.walk(ROOT)), "seeds under", ROOT)
