#!/usr/bin/env python3
"""Language-model training throughput: gradus vs PyTorch, same model, batch, context, threads
and dtype.

    python3 bench/compare_gpt.py [--gradus build/apps/gradus/gradus] [--threads 2] [--repeats 5]
                                 [--device cpu|cuda] [--amp bf16] [--compile] [--cuda-graph]
                                 [--model gpt|llama] [--kv-heads N] [--ffn-width N] [--probe-cores]

By default both sides run eager float32; --amp bf16 puts both under bf16 autocast, --compile
runs PyTorch's model through torch.compile and --cuda-graph replays gradus's step as a CUDA graph
(each side's fastest mode: `--amp bf16 --compile --cuda-graph` on a GPU).

The model is nanoGPT's (token + position embeddings, pre-norm blocks with causal self-attention
through F.scaled_dot_product_attention and a GELU MLP, tied head) at the CPU configuration of its
README: 4 layers, 4 heads, width 128, context 64, batch 12, vocabulary 65. --model llama: a Llama
(RMSNorm through F.rms_norm, rotary embeddings in transformers' "rotate half" layout, grouped-query
attention through F.scaled_dot_product_attention(enable_gqa=True), a SwiGLU MLP, untied head) of
the same shape options as `gradus bench --model llama`. One step = forward,
cross-entropy, backward, AdamW step, on random token windows cycled from 16 batches (as
`gradus bench --model gpt`). The two sides alternate --repeats times (order flipped each repeat);
each run reports its median step time, and the script prints the median over runs of each side,
the tokens/s ratio gradus / PyTorch of those medians (> 1: gradus is faster), and the median of
the ratios within each repeat (steadier on a machine whose speed drifts). Needs torch (pip).
"""

import argparse
import json
import math
import contextlib
import statistics
import subprocess
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import core_balance  # bench/core_balance.py (--probe-cores)


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(width)
        self.c_attn = nn.Linear(width, 3 * width)
        self.attn_proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.c_fc = nn.Linear(width, 4 * width)
        self.mlp_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, context, layers, heads, width):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def rotate(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, width, heads, kv_heads, ffn):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, width // heads
        self.input_norm = nn.RMSNorm(width, eps=1e-5)
        self.q = nn.Linear(width, width, bias=False)
        self.k = nn.Linear(width, kv_heads * self.hd, bias=False)
        self.v = nn.Linear(width, kv_heads * self.hd, bias=False)
        self.o = nn.Linear(width, width, bias=False)
        self.post_norm = nn.RMSNorm(width, eps=1e-5)
        self.gate = nn.Linear(width, ffn, bias=False)
        self.up = nn.Linear(width, ffn, bias=False)
        self.down = nn.Linear(ffn, width, bias=False)

    def forward(self, x, cos, sin):
        b, t, c = x.shape
        h = self.input_norm(x)
        q = rotate(self.q(h).view(b, t, self.heads, self.hd).transpose(1, 2), cos, sin)
        k = rotate(self.k(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2), cos, sin)
        v = self.v(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=self.kv_heads != self.heads)
        x = x + self.o(y.transpose(1, 2).reshape(b, t, c))
        h = self.post_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, vocab, context, layers, heads, width, kv_heads, ffn):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(LlamaBlock(width, heads, kv_heads, ffn) for _ in range(layers))
        self.norm = nn.RMSNorm(width, eps=1e-5)
        self.head = nn.Linear(width, vocab, bias=False)
        hd = width // heads
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        angles = torch.arange(context, dtype=torch.float64)[:, None] * inv_freq
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x, self.cos[:t], self.sin[:t])
        return self.head(self.norm(x))


def torch_run(args):
    if args.model == "llama":
        model = Llama(args.vocab, args.context, args.layers, args.heads, args.width,
                      args.kv_heads or args.heads, ffn_width(args)).train()
    else:
        model = GPT(args.vocab, args.context, args.layers, args.heads, args.width).train()
    model.to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    forward = torch.compile(model) if args.compile else model
    device_type = torch.device(args.device).type
    xs = [torch.randint(0, args.vocab, (args.batch, args.context), device=args.device)
          for _ in range(16)]
    ys = [torch.randint(0, args.vocab, (args.batch, args.context), device=args.device)
          for _ in range(16)]
    times = []
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        autocast = (torch.autocast(device_type=device_type, dtype=torch.bfloat16)
                    if args.amp == "bf16" else contextlib.nullcontext())
        with autocast:
            logits = forward(xs[i % 16])
            loss = F.cross_entropy(logits.view(-1, args.vocab), ys[i % 16].view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()  # waits for the device, as gradus's step does
        if i >= args.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def ffn_width(args):
    # gradus's default (--ffn-width 0): 2/3 of 4 width, rounded up to a multiple of 32.
    return args.ffn_width or (2 * 4 * args.width // 3 + 31) // 32 * 32


def gradus_run(args):
    llama = (["--kv-heads", str(args.kv_heads), "--ffn-width", str(ffn_width(args))]
             if args.model == "llama" else [])
    cmd = [args.gradus, "bench", "--model", args.model] + llama + ["--batch-size", str(args.batch), "--context",
           str(args.context), "--layers", str(args.layers), "--heads", str(args.heads), "--width",
           str(args.width), "--vocab-size", str(args.vocab), "--threads", str(args.threads),
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--device", args.device,
           "--amp", args.amp] + (["--cuda-graph"] if args.cuda_graph else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["ms_per_step"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--gradus", default="build/apps/gradus/gradus")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=12)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--vocab", type=int, default=65)
    p.add_argument("--model", choices=["gpt", "llama"], default="gpt")
    p.add_argument("--kv-heads", type=int, default=0, help="llama: key/value heads (0: --heads)")
    p.add_argument("--ffn-width", type=int, default=0, help="llama: SwiGLU width (0: gradus's default)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (both frameworks)")
    p.add_argument("--amp", choices=["off", "bf16"], default="off",
                   help="bf16: both sides under autocast (gradus bench --amp bf16, torch.autocast)")
    p.add_argument("--compile", action="store_true",
                   help="PyTorch's model through torch.compile (its warm-up steps compile)")
    p.add_argument("--probe-cores", action="store_true",
                   help="before each repeat, how evenly the CPUs run (core_balance.py): the "
                        "slowest / fastest single-thread rate, printed per repeat next to the ratio")
    p.add_argument("--cuda-graph", action="store_true",
                   help="gradus's step replayed as a CUDA graph (gradus bench --cuda-graph)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    g, t, balances = [], [], []
    for r in range(args.repeats):
        if args.probe_cores:
            balances.append(round(core_balance.balance(core_balance.core_rates()), 3))
        order = [("gradus", gradus_run), ("torch", torch_run)]
        for name, fn in (order if r % 2 == 0 else order[::-1]):
            (g if name == "gradus" else t).append(fn(args))
    tokens = args.batch * args.context
    gm, tm = statistics.median(g), statistics.median(t)
    # Each repeat runs the two sides back to back: the ratio within a repeat cancels the drift of
    # a shared machine's speed between repeats, so its median is the steadier figure.
    pairs = [b / a for a, b in zip(g, t)]
    print(json.dumps({"benchmark": f"{args.model}_train_step", "device": args.device, "amp": args.amp,
                      "torch_compile": args.compile, "gradus_cuda_graph": args.cuda_graph,
                      "threads": args.threads, "batch": args.batch,
                      "context": args.context, "layers": args.layers, "width": args.width,
                      "heads": args.heads, "kv_heads": args.kv_heads or args.heads,
                      "torch": torch.__version__, "gradus_ms": round(gm, 2),
                      "torch_ms": round(tm, 2), "gradus_tokens_per_s": round(tokens / gm * 1e3),
                      "torch_tokens_per_s": round(tokens / tm * 1e3),
                      "speedup": round(tm / gm, 3),
                      "median_pair_speedup": round(statistics.median(pairs), 3),
                      "gradus_runs": [round(x, 1) for x in g],
                      "torch_runs": [round(x, 1) for x in t]}
                     | ({"core_balance": balances,
                         "pair_speedups": [round(x, 3) for x in pairs]} if balances else {})))


if __name__ == "__main__":
    main()
