#!/usr/bin/env python3
"""Writes the Llama golden files that tests/golden/llama_golden_test.cpp compares gradus against.

    python3 tools/make_llama_golden.py [--out tests/data/golden]

Needs torch, transformers and safetensors (pip; offline: the models are built from configs, no
download). The files are committed: Python is never needed to build or test gradus.

Three tiny random-weight LlamaForCausalLM, one per kind of attention: multi-query (1 key/value
head), grouped-query (2 of 4) and multi-head (4 of 4, with a tied head and attention biases).
For each, `hf_llama_kv<N>/` is transformers' save_pretrained directory (float32), and
`llama_kv<N>.safetensors` holds the reference values computed by transformers in float64 from
those weights: "input" [2, T] token ids with T = 20 beyond max_position_embeddings (16), so RoPE
is checked past the training context; "target", "logits", "loss", "grad.<name>" for every
parameter and "adamw.step1.<name>" after one AdamW step. Names and layouts are transformers'
(which are gradus's). `eval_tokens.bin` and `eval.json`: a token file and the mean loss over its
windows of 8 tokens (gradus eval's definition) of hf_llama_kv2 and hf_gpt2, by transformers.

The float64 reference computes RMSNorm, the RoPE angles and the attention softmax in float64
(RMSNorm and RoPE patched, attention through "sdpa"): transformers computes all three in float32
whatever the model's dtype, so a float64 model of it is only float32-accurate.
"""

import argparse
import json
import os

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama import modeling_llama

ADAMW = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.99, "eps": 1e-8, "weight_decay": 0.1}


def rms_norm_in_input_dtype(self, x):
    variance = x.pow(2).mean(-1, keepdim=True)
    return self.weight * (x * torch.rsqrt(variance + self.variance_epsilon))


def rotary_in_float64(self, x, position_ids):
    dim = self.inv_freq.numel() * 2
    theta = self.config.rope_parameters["rope_theta"]
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    freqs = position_ids[..., None].double() * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def write(out_dir, kv_heads, tied, bias, seed):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=101, hidden_size=32, intermediate_size=72, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=kv_heads,
                         max_position_embeddings=16, rms_norm_eps=1e-5, rope_theta=10000.0,
                         tie_word_embeddings=tied, attention_bias=bias)
    model = LlamaForCausalLM(config).eval()
    # transformers initialises norms to ones and biases to zeros: randomise them so that the test
    # sees every parameter's role.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    hf_dir = os.path.join(out_dir, f"hf_llama_kv{kv_heads}")
    model.save_pretrained(hf_dir, safe_serialization=True)

    ref = LlamaForCausalLM(config)
    ref.config._attn_implementation = "sdpa"  # eager takes its softmax in float32
    ref.load_state_dict(model.state_dict())
    ref = ref.double().train()
    tokens = torch.randint(0, config.vocab_size, (2, 21))
    x, y = tokens[:, :-1], tokens[:, 1:]
    logits = ref(x).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, config.vocab_size), y.reshape(-1))
    loss.backward()
    out = {"input": x.contiguous(), "target": y.contiguous(), "logits": logits.detach(),
           "loss": loss.detach().reshape(1)}
    params = dict(ref.named_parameters())  # a tied head is listed once, as embed_tokens
    for name, p in params.items():
        out["grad." + name] = p.grad
    opt = torch.optim.AdamW(params.values(), lr=ADAMW["lr"], betas=(ADAMW["beta1"],
                            ADAMW["beta2"]), eps=ADAMW["eps"], weight_decay=ADAMW["weight_decay"])
    opt.step()
    for name, p in params.items():
        out["adamw.step1." + name] = p.detach()
    save_file({k: v.contiguous() for k, v in out.items()},
              os.path.join(out_dir, f"llama_kv{kv_heads}.safetensors"),
              metadata={"adamw": json.dumps(ADAMW), "parameters": str(len(params)),
                        "transformers": __import__("transformers").__version__,
                        "torch": torch.__version__})
    print("wrote", hf_dir, f"and llama_kv{kv_heads}.safetensors")


def window_loss(model, tokens, context):
    """gradus eval's definition: window i feeds tokens [i c, (i + 1) c) and predicts the next."""
    windows = (tokens.numel() - 1) // context
    x = torch.stack([tokens[i * context:(i + 1) * context] for i in range(windows)])
    y = torch.stack([tokens[i * context + 1:(i + 1) * context + 1] for i in range(windows)])
    with torch.no_grad():
        logits = model(x).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             y.reshape(-1)).item(), windows


def write_eval(out_dir):
    """eval_tokens.bin (uint16) and eval.json: the windows' mean loss of the committed Llama
    (hf_llama_kv2) and GPT-2 (hf_gpt2) directories, computed by transformers in float64."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(4)
    tokens = torch.randint(0, 97, (203,))  # below both vocabularies (101, 97)
    tokens.numpy().astype("uint16").tofile(os.path.join(out_dir, "eval_tokens.bin"))
    result = {"context": 8}
    for name in ("hf_llama_kv2", "hf_gpt2"):
        model = AutoModelForCausalLM.from_pretrained(os.path.join(out_dir, name),
                                                     attn_implementation="sdpa",
                                                     dtype=torch.float64).eval()
        loss, windows = window_loss(model, tokens, 8)
        result[name] = {"val_loss": loss, "windows": windows}
    with open(os.path.join(out_dir, "eval.json"), "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    print("wrote eval_tokens.bin and eval.json")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                      "data", "golden"))
    args = parser.parse_args()
    modeling_llama.LlamaRMSNorm.forward = rms_norm_in_input_dtype
    modeling_llama.LlamaRotaryEmbedding.forward = rotary_in_float64
    write(args.out, kv_heads=1, tied=False, bias=False, seed=1)
    write(args.out, kv_heads=2, tied=False, bias=False, seed=2)
    write(args.out, kv_heads=4, tied=True, bias=True, seed=3)
    write_eval(args.out)


if __name__ == "__main__":
    main()
