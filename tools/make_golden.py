#!/usr/bin/env python3
"""Writes the PyTorch golden files that tests/golden/golden_test.cpp compares gradus against.

    python3 tools/make_golden.py [--out tests/data/golden]

Needs torch and safetensors (pip). The files are committed: PyTorch is never needed to build or
run gradus's tests. Rerun only when a case is added or changed; the tensors written are the same
on every run for a given PyTorch version (fixed seeds; the header's byte layout may differ), and
the test tolerances do not depend on the exact draw.

Conventions (golden_test.cpp relies on them):
  * Inputs and initial weights are float32 (what a training program holds). Every reference
    value (outputs, gradients, updated weights, running statistics) is computed by PyTorch in
    float64 from those same float32 values and stored as float64, so gradus can be checked
    tightly in float64 and with float32 tolerances in float32.
  * Gradients are of sum(out * grad_out) with a stored random grad_out ("<case>.grad_out"),
    named "<case>.grad.<input>".
  * Model files hold "weights.<name>" (initial), "input", "target", "loss" (step 1),
    "grad.<name>" (step-1 gradients), and for each optimizer "<opt>.step1.<name>",
    "<opt>.step2.<name>" (weights after one and two steps on the same batch) and "<opt>.loss2"
    (the loss at the second step). Buffers (BatchNorm running stats) after the first forward are
    "buffers.<name>". Hyperparameters are in the safetensors metadata.
"""

import argparse
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

F32 = torch.float32
F64 = torch.float64


def f32(*shape, lo=-1.0, hi=1.0):
    """Uniform float32 values (exactly representable, so gradus sees the same numbers)."""
    return (torch.rand(tuple(shape), dtype=F64) * (hi - lo) + lo).to(F32)


def op_case(out, name, fn, inputs, nondiff=()):
    """Runs fn in float64 on the float32 inputs; stores inputs, output and input gradients."""
    xs = {}
    for key, value in inputs.items():
        out[f"{name}.{key}"] = value.clone().contiguous()
        if value.is_floating_point():
            xs[key] = value.to(F64).requires_grad_(key not in nondiff)
        else:
            xs[key] = value
    y = fn(**xs)
    out[f"{name}.out"] = y.detach().contiguous()
    grad_out = f32(*y.shape)
    out[f"{name}.grad_out"] = grad_out
    diff = [k for k, v in xs.items() if v.is_floating_point() and k not in nondiff]
    grads = torch.autograd.grad(y, [xs[k] for k in diff], grad_out.to(F64))
    for key, g in zip(diff, grads):
        out[f"{name}.grad.{key}"] = g.detach().contiguous()


def make_ops(path):
    torch.manual_seed(1234)
    out = {}
    op_case(out, "linear", lambda x, w, b: F.linear(x, w, b),
            {"x": f32(4, 6), "w": f32(3, 6), "b": f32(3)})
    op_case(out, "linear_3d", lambda x, w, b: F.linear(x, w, b),
            {"x": f32(2, 3, 20), "w": f32(5, 20), "b": f32(5)})
    op_case(out, "conv2d", lambda x, w, b: F.conv2d(x, w, b, stride=1, padding=1),
            {"x": f32(2, 3, 6, 6), "w": f32(4, 3, 3, 3), "b": f32(4)})
    op_case(out, "conv2d_s2_d2_g2",
            lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=2, dilation=2, groups=2),
            {"x": f32(2, 4, 9, 8), "w": f32(6, 2, 3, 3), "b": f32(6)})
    # cross_entropy: the label-smoothing / class-weight / ignore_index interplay is where
    # implementations differ from PyTorch, so every combination the test uses is stored.
    ce_in = {"logits": f32(8, 5, lo=-3, hi=3), "target": torch.tensor([0, 1, 2, 3, 4, 2, 1, 3]),
             "weight": f32(5, lo=0.5, hi=1.5)}
    op_case(out, "cross_entropy_smoothing",
            lambda logits, target, weight: F.cross_entropy(logits, target, label_smoothing=0.1),
            ce_in, nondiff=("weight",))
    op_case(out, "cross_entropy_weight_smoothing",
            lambda logits, target, weight: F.cross_entropy(logits, target, weight=weight,
                                                           label_smoothing=0.2),
            ce_in, nondiff=("weight",))
    op_case(out, "cross_entropy_all",
            lambda logits, target, weight: F.cross_entropy(
                logits, target, weight=weight, ignore_index=2, label_smoothing=0.15),
            ce_in, nondiff=("weight",))
    op_case(out, "cross_entropy_none",
            lambda logits, target, weight: F.cross_entropy(
                logits, target, weight=weight, ignore_index=1, label_smoothing=0.1,
                reduction="none"),
            ce_in, nondiff=("weight",))
    op_case(out, "cross_entropy_4d",
            lambda logits, target: F.cross_entropy(logits, target, label_smoothing=0.05),
            {"logits": f32(2, 4, 3, 3, lo=-3, hi=3), "target": torch.randint(0, 4, (2, 3, 3))})
    op_case(out, "layer_norm",
            lambda x, w, b: F.layer_norm(x, (8,), w, b, eps=1e-5),
            {"x": f32(4, 8, lo=-2, hi=2), "w": f32(8, lo=0.5, hi=1.5), "b": f32(8)})
    op_case(out, "layer_norm_2d",
            lambda x, w, b: F.layer_norm(x, (3, 4), w, b, eps=1e-6),
            {"x": f32(2, 3, 4, lo=-2, hi=2), "w": f32(3, 4, lo=0.5, hi=1.5), "b": f32(3, 4)})
    # batch_norm in training mode: output, input/affine gradients, and the running statistics
    # after the in-place update (momentum 0.1, unbiased variance).
    bn_in = {"x": f32(4, 3, 5, 5, lo=-2, hi=2), "w": f32(3, lo=0.5, hi=1.5), "b": f32(3),
             "running_mean": f32(3, lo=-0.5, hi=0.5), "running_var": f32(3, lo=0.5, hi=1.5)}
    rm = bn_in["running_mean"].to(F64).clone()
    rv = bn_in["running_var"].to(F64).clone()
    op_case(out, "batch_norm_train",
            lambda x, w, b, running_mean, running_var: F.batch_norm(
                x, rm, rv, w, b, training=True, momentum=0.1, eps=1e-5),
            bn_in, nondiff=("running_mean", "running_var"))
    out["batch_norm_train.running_mean_after"] = rm
    out["batch_norm_train.running_var_after"] = rv
    op_case(out, "max_pool2d", lambda x: F.max_pool2d(x, 3, stride=2, padding=1),
            {"x": f32(2, 2, 7, 7)})
    op_case(out, "avg_pool2d",
            lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True,
                                   count_include_pad=False),
            {"x": f32(2, 2, 8, 8)})
    op_case(out, "softmax", lambda x: F.softmax(x, dim=1), {"x": f32(3, 7, lo=-4, hi=4)})
    op_case(out, "log_softmax", lambda x: F.log_softmax(x, dim=0), {"x": f32(5, 3, lo=-4, hi=4)})
    op_case(out, "gelu", lambda x: F.gelu(x), {"x": f32(20, lo=-4, hi=4)})
    op_case(out, "gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), {"x": f32(20, lo=-4, hi=4)})
    op_case(out, "bce_with_logits",
            lambda x, t, pw: F.binary_cross_entropy_with_logits(x, t, pos_weight=pw),
            {"x": f32(3, 4, lo=-4, hi=4), "t": f32(3, 4, lo=0, hi=1), "pw": f32(4, lo=0.5, hi=2)},
            nondiff=("t", "pw"))
    op_case(out, "var_std", lambda x: torch.stack([x.var(dim=1), x.std(dim=1)]),
            {"x": f32(3, 9)})
    meta = {"source": "tools/make_golden.py", "torch": torch.__version__}
    save_file(out, path, metadata=meta)


# ------------------------------------------------------------------------------------- models
def mlp():
    return nn.Sequential(nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10))


def cnn():
    """The benchmark CNN's structure (conv-bn-relu-pool twice, two linears) at reduced width,
    on 12x12 single-channel images. Same module indices as gradus's small_cnn()."""
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 3 * 3, 32), nn.ReLU(), nn.Linear(32, 10))


OPTIMIZERS = {
    "adam": (torch.optim.Adam, {"lr": 1e-2, "betas": (0.9, 0.999), "eps": 1e-8,
                                "weight_decay": 1e-3}),
    "sgd": (torch.optim.SGD, {"lr": 0.05, "momentum": 0.9, "dampening": 0.0,
                              "weight_decay": 5e-4, "nesterov": False}),
}


def make_model(path, build, x, target):
    model = build()  # float32 with PyTorch's default initialisation
    out = {f"weights.{k}": v.detach().clone() for k, v in model.state_dict().items()}
    out["input"] = x
    out["target"] = target

    def fresh():
        m = build().to(F64)
        m.load_state_dict({k: v.to(F64) if v.is_floating_point() else v
                           for k, v in model.state_dict().items()})
        m.train()
        return m

    ref = fresh()
    loss = F.cross_entropy(ref(x.to(F64)), target)
    loss.backward()
    out["loss"] = loss.detach().reshape(())
    for k, p in ref.named_parameters():
        out[f"grad.{k}"] = p.grad.detach().clone()
    for k, b in ref.named_buffers():
        out[f"buffers.{k}"] = b.detach().clone()

    for opt_name, (cls, kwargs) in OPTIMIZERS.items():
        m = fresh()
        opt = cls(m.parameters(), **kwargs)
        for step in (1, 2):
            opt.zero_grad()
            loss = F.cross_entropy(m(x.to(F64)), target)
            loss.backward()
            opt.step()
            if step == 2:
                out[f"{opt_name}.loss2"] = loss.detach().reshape(())
            for k, p in m.named_parameters():
                out[f"{opt_name}.step{step}.{k}"] = p.detach().clone()
    meta = {"source": "tools/make_golden.py", "torch": torch.__version__,
            "optimizers": json.dumps({k: v[1] for k, v in OPTIMIZERS.items()})}
    save_file({k: v.contiguous() for k, v in out.items()}, path, metadata=meta)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "golden"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.use_deterministic_algorithms(True)

    make_ops(os.path.join(args.out, "ops.safetensors"))
    torch.manual_seed(42)
    make_model(os.path.join(args.out, "mlp.safetensors"), mlp,
               torch.randn(8, 784, dtype=F32), torch.randint(0, 10, (8,)))
    torch.manual_seed(43)
    make_model(os.path.join(args.out, "cnn.safetensors"), cnn,
               torch.randn(2, 1, 12, 12, dtype=F32), torch.randint(0, 10, (2,)))
    total = 0
    for name in sorted(os.listdir(args.out)):
        size = os.path.getsize(os.path.join(args.out, name))
        total += size
        print(f"{name}: {size / 1024:.1f} KiB")
    print(f"total: {total / 1024:.1f} KiB")


if __name__ == "__main__":
    main()
