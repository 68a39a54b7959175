#!/usr/bin/env python3
"""Writes tests/data/safetensors/golden.safetensors with the reference `safetensors` package.

gradus's tests (tests/io/test_safetensors.cpp, GoldenFile*) recompute every value below from the
same formulas and compare value by value, and check that gradus writes the very same bytes when
given the same tensors in the same order. Re-run only when the formulas change:

    python3 tools/make_safetensors_golden.py [--out tests/data/safetensors/golden.safetensors]

Needs torch and safetensors (development tools only; never a build or test dependency).
"""
import argparse
import math
import os

import torch
from safetensors.torch import save_file


def golden_tensors():
    t = {}
    # Formulas (i = row-major element index) shared with the C++ test.
    t["f32"] = torch.tensor([(i - 5) * 0.375 for i in range(12)], dtype=torch.float32).reshape(3, 4)
    t["f32_special"] = torch.tensor(
        [0.0, -0.0, math.inf, -math.inf, math.nan, 2.0**-149, 3.4028234663852886e38, 2.0**-126],
        dtype=torch.float32)
    t["f64"] = torch.tensor([(i - 6) / 3.0 for i in range(12)], dtype=torch.float64).reshape(2, 3, 2)
    t["f16"] = torch.tensor([-2.0, -0.5, 0.0, 0.125, 1.5, 65504.0, 2.0**-24, -math.inf],
                            dtype=torch.float16).reshape(2, 4)
    t["bf16"] = torch.tensor([k * 0.25 - 1.0 for k in range(7)] + [2.0**100],
                             dtype=torch.bfloat16).reshape(4, 2)
    t["i32"] = torch.tensor([-2**31, -1, 0, 1, 123456789, 2**31 - 1], dtype=torch.int32).reshape(2, 3)
    t["i64"] = torch.tensor([-2**63, -1, 2**53 + 1, 2**63 - 1], dtype=torch.int64)
    t["u8"] = torch.tensor([(i * 37) % 256 for i in range(8)], dtype=torch.uint8).reshape(2, 2, 2)
    t["bool"] = torch.tensor([True, False, False, True, True], dtype=torch.bool)
    t["scalar"] = torch.tensor(42.5, dtype=torch.float32)
    t["empty"] = torch.zeros((0, 3), dtype=torch.float32)
    t["empty_i64"] = torch.zeros((0,), dtype=torch.int64)
    return t


def golden_module():
    """nn.Sequential(Linear(3, 2), BatchNorm1d(2), Linear(2, 1)) with formula weights: its
    state_dict names and layouts are PyTorch's, which gradus's Sequential must match."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2), torch.nn.Linear(2, 1))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[0.1 * (i * 3 + j) - 0.25 for j in range(3)] for i in range(2)]))
        model[0].bias.copy_(torch.tensor([0.5, -0.5]))
        model[1].weight.copy_(torch.tensor([1.5, 0.75]))
        model[1].bias.copy_(torch.tensor([0.1, -0.2]))
        model[1].running_mean.copy_(torch.tensor([0.2, -0.1]))
        model[1].running_var.copy_(torch.tensor([2.0, 0.5]))
        model[1].num_batches_tracked.fill_(7)
        model[2].weight.copy_(torch.tensor([[0.3, -0.6]]))
        model[2].bias.copy_(torch.tensor([0.05]))
    model.eval()
    x = torch.tensor([[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0]])
    print("golden module output (eval):", model(x).detach().flatten().tolist())
    return {k: v.contiguous() for k, v in model.state_dict().items()}


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(root, "tests/data/safetensors/golden.safetensors"))
    args = parser.parse_args()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    # A single metadata entry: the reference writes a multi-entry map in hash order.
    save_file(golden_tensors(), args.out, metadata={"format": "pt"})
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)")
    module_out = os.path.join(os.path.dirname(args.out), "torch_sequential.safetensors")
    save_file(golden_module(), module_out, metadata={"format": "pt"})
    print(f"wrote {module_out} ({os.path.getsize(module_out)} bytes)")


if __name__ == "__main__":
    main()
