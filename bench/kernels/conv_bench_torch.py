"""PyTorch timings of the convolutions in conv_bench.cpp (batch 64, float32, same thread count).

    python3 bench/kernels/conv_bench_torch.py [threads]
Prints median milliseconds per call for forward, backward-data and backward-weight (+bias).
"""
import sys
import time

import torch

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
torch.set_num_threads(threads)


def median_ms(fn, reps=50):
    for _ in range(5):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2] * 1e3


for c, o, hw in [(1, 32, 28), (32, 64, 14)]:
    x = torch.rand(64, c, hw, hw) * 2 - 1
    w = torch.rand(o, c, 3, 3) * 2 - 1
    b = torch.rand(o) * 2 - 1
    gy = torch.rand(64, o, hw, hw) * 2 - 1
    conv_bwd = torch.ops.aten.convolution_backward
    common = ([o], [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    fwd = median_ms(lambda: torch.nn.functional.conv2d(x, w, b, padding=1))
    bwd_data = median_ms(lambda: conv_bwd(gy, x, w, *common, [True, False, False]))
    bwd_weight = median_ms(lambda: conv_bwd(gy, x, w, *common, [False, True, True]))
    print(f"torch threads={threads} conv {c}->{o} {hw}x{hw}: forward {fwd:.3f} ms, "
          f"backward_data {bwd_data:.3f} ms, backward_weight+bias {bwd_weight:.3f} ms")
