"""PyTorch timings of attention_bench.cpp's cases: causal F.scaled_dot_product_attention forward +
backward on q, k, v [4, 256 / D, 256, D] float32 for head sizes D = 32 and 64, same thread count.

    python3 bench/kernels/attention_bench_torch.py [threads]
Prints the median milliseconds per forward + backward of 5 runs of 50 calls each.
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
torch.set_num_threads(threads)

for head in (32, 64):
    q, k, v = (torch.rand(4, 256 // head, 256, head, requires_grad=True) * 2 - 1 for _ in range(3))
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    grad = torch.randn(4, 256 // head, 256, head)

    def step():
        for t in (q, k, v):
            t.grad = None
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)

    for _ in range(10):
        step()
    runs = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(50):
            step()
        runs.append((time.perf_counter() - t) / 50 * 1e3)
    print(f"BM_attention_head{head} (PyTorch {torch.__version__}): {statistics.median(runs):.2f} ms")
