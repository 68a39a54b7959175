#!/usr/bin/env python3
"""Writes the GPT-2 golden files that tests/golden/gpt2_golden_test.cpp compares gradus against.

    python3 tools/make_gpt2_golden.py [--out tests/data/golden]

Needs torch, transformers and safetensors (pip; offline: the model is built from a config, no
download). The files are committed: Python is never needed to build or test gradus.

Writes
  hf_gpt2/config.json, hf_gpt2/model.safetensors  a small random-weight GPT2LMHeadModel saved by
                                                 transformers' save_pretrained (float32, Conv1D
                                                 layout, tied head not stored)
  gpt2.safetensors   the reference values, computed by transformers in float64 from those float32
                     weights: "input" [2, T] token ids, "target" (the next tokens), "logits",
                     "loss" (mean cross-entropy), "grad.<name>" for every parameter, and
                     "adamw.step1.<name>" after one AdamW step (hyperparameters in the metadata).
                     Names and layouts are gradus's (nanoGPT's names, Linear [out, in]).
"""

import argparse
import json
import os

import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
ADAMW = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.99, "eps": 1e-8, "weight_decay": 0.1}


def gradus_layout(name, t):
    return t.t().contiguous() if name.endswith(CONV1D) else t


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                      "data", "golden"))
    args = parser.parse_args()
    torch.manual_seed(1234)
    config = GPT2Config(vocab_size=97, n_positions=24, n_embd=32, n_layer=2, n_head=4,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        activation_function="gelu_new")
    model = GPT2LMHeadModel(config).eval()
    # transformers initialises biases and LayerNorms to constants: randomise them so that the
    # test sees every parameter's role.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
    hf_dir = os.path.join(args.out, "hf_gpt2")
    model.save_pretrained(hf_dir, safe_serialization=True)

    ref = GPT2LMHeadModel(config)
    ref.config._attn_implementation = "eager"
    ref.load_state_dict(model.state_dict())
    ref = ref.double().train()  # dropout is 0: train mode only matters for nothing here
    tokens = torch.randint(0, config.vocab_size, (2, 17))
    x, y = tokens[:, :-1], tokens[:, 1:]
    logits = ref(x).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, config.vocab_size), y.reshape(-1))
    loss.backward()
    out = {"input": x.contiguous(), "target": y.contiguous(), "logits": logits.detach(),
           "loss": loss.detach().reshape(1)}
    params = dict(ref.named_parameters())  # the tied head is listed once, as transformer.wte
    for name, p in params.items():
        out["grad." + name] = gradus_layout(name, p.grad)
    opt = torch.optim.AdamW(params.values(), lr=ADAMW["lr"], betas=(ADAMW["beta1"],
                            ADAMW["beta2"]), eps=ADAMW["eps"], weight_decay=ADAMW["weight_decay"])
    opt.step()
    for name, p in params.items():
        out["adamw.step1." + name] = gradus_layout(name, p.detach())
    save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(args.out, "gpt2.safetensors"),
              metadata={"adamw": json.dumps(ADAMW), "transformers": __import__("transformers").__version__,
                        "torch": torch.__version__})
    print("wrote", hf_dir, "and gpt2.safetensors")


if __name__ == "__main__":
    main()
