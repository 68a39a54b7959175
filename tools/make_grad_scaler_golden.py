#!/usr/bin/env python3
"""Writes tests/data/golden/grad_scaler.json: the scale and growth tracker of PyTorch's
torch.amp.GradScaler after each step of recorded overflow / no-overflow sequences, for
tests/amp/grad_scaler_test.cpp. Each step sets the gradient to finite values or plants an inf/NaN,
then calls scaler.step(optimizer) and scaler.update(), as a training loop does."""
import json
import os
import random

import torch


def run(options, pattern):
    p = torch.nn.Parameter(torch.ones(4))
    opt = torch.optim.SGD([p], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", **options)
    scaler.scale(torch.ones(()))  # initialises the scale
    out = []
    for bad in pattern:
        g = torch.full((4,), 0.5)
        if bad == "inf":
            g[2] = float("inf")
        elif bad == "nan":
            g[1] = float("nan")
        p.grad = g
        stepped_before = p.detach().clone()
        scaler.step(opt)
        scaler.update()
        out.append({"found": bad, "stepped": bool(not torch.equal(stepped_before, p.detach())),
                    "scale": scaler.get_scale(),
                    "growth_tracker": int(scaler._get_growth_tracker())})
    return out


def main():
    rng = random.Random(20261123)
    cases = []
    for options in [dict(init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                         growth_interval=3),
                    dict(init_scale=1000.0, growth_factor=1.5, backoff_factor=0.3,
                         growth_interval=2)]:
        pattern = [rng.choice(["ok", "ok", "ok", "inf", "nan"]) for _ in range(40)]
        cases.append({"options": options, "steps": run(options, pattern)})
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "golden",
                        "grad_scaler.json")
    with open(path, "w") as f:
        json.dump({"torch": torch.__version__, "cases": cases}, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
