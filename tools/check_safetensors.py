#!/usr/bin/env python3
"""Loads safetensors files written by gradus with the reference Python `safetensors` package.

A development check of interoperability (not a test dependency): every file must open with
safetensors.safe_open and safetensors.torch.load_file; optional checks compare values and load
weights into PyTorch modules.

    GRADUS_IO_EXPORT_DIR=/tmp/gx ./build/tests/test_io     # leaves gradus-written files there
    python3 tools/check_safetensors.py /tmp/gx/gradus_golden.safetensors --golden
    python3 tools/check_safetensors.py /tmp/gx/gradus_sequential.safetensors --torch-sequential
    python3 tools/check_safetensors.py /tmp/gx/ckpt-0000001234.safetensors --checkpoint

Exit status 0 when every check passes.
"""
import argparse
import json
import os
import struct
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def same_bits(a, b):
    """Exact equality including -0.0, inf and NaN (compared as raw bits)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.is_floating_point:
        ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return torch.equal(a.contiguous().view(ints), b.contiguous().view(ints))
    return torch.equal(a, b)


def describe(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
    print(f"{path}: header {n} bytes (8-aligned: {n % 8 == 0}), file {os.path.getsize(path)} bytes")
    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
        for key in f.keys():
            t = f.get_tensor(key)
            print(f"  {key:40s} {str(t.dtype):16s} {list(t.shape)}")
        print(f"  metadata: {meta}")
    return load_file(path), meta or {}


def check_golden(tensors):
    from make_safetensors_golden import golden_tensors
    want = golden_tensors()
    ok = set(tensors) == set(want)
    if not ok:
        print(f"  FAIL: names {sorted(tensors)} vs {sorted(want)}")
    for k, v in want.items():
        if k in tensors and not same_bits(tensors[k], v):
            print(f"  FAIL: {k}: {tensors[k]} vs {v}")
            ok = False
    print("  golden values:", "OK" if ok else "MISMATCH")
    return ok


def check_torch_sequential(tensors):
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2), torch.nn.Linear(2, 1))
    result = model.load_state_dict(tensors, strict=True)
    print("  torch Sequential.load_state_dict(strict=True):", result)
    return True


def check_checkpoint(tensors, meta):
    ok = meta.get("format") == "gradus.checkpoint"
    for key in ("optim.scalars", "scheduler", "scaler", "rng"):
        json.loads(meta[key])
    prefixes = {k.split(".", 1)[0] for k in tensors}
    ok = ok and prefixes <= {"model", "optim", "extra"}
    print(f"  checkpoint: step {meta.get('step')}, epoch {meta.get('epoch')}, "
          f"batch {meta.get('batch_index')}, rng {meta.get('rng')}, prefixes {sorted(prefixes)}:",
          "OK" if ok else "BAD")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--golden", action="store_true", help="compare with the golden formulas")
    parser.add_argument("--torch-sequential", action="store_true",
                        help="load into Sequential(Linear(3,2), BatchNorm1d(2), Linear(2,1))")
    parser.add_argument("--checkpoint", action="store_true", help="check gradus checkpoint layout")
    args = parser.parse_args()
    ok = True
    for path in args.files:
        tensors, meta = describe(path)
        if args.golden:
            ok &= check_golden(tensors)
        if args.torch_sequential:
            ok &= check_torch_sequential(tensors)
        if args.checkpoint:
            ok &= check_checkpoint(tensors, meta)
    print("ALL OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
