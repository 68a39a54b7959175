#!/usr/bin/env python3
"""gradus DDP vs PyTorch DDP (torch.distributed, gloo) on the CPU: the global training step.

For each model@global_batch (default mlp-large@256, cnn@64 and gpt@16) both frameworks run as one
`mpirun -np N` job of N ranks with T threads each (default 2 x 1), the same model, loss
(cross-entropy), optimizer (Adam, lr 1e-3; AdamW for the GPT), global batch (each rank B/N random
examples; token windows of 64 for the GPT), float32 and default buckets (25 MB):

* gradus:  mpirun ... gradus bench --dist ddp --model M --batch-size B --threads T
* PyTorch: mpirun ... python3 compare_ddp.py --torch-rank ... (this file): DistributedDataParallel
  over a gloo process group (rank and size from Open MPI's environment, rendezvous over TCP on
  127.0.0.1), torch.set_num_threads(T).

A step is zero_grad; loss = cross_entropy(model(x), y); loss.backward() (gradients averaged
across the ranks, overlapped with backward by both); opt.step(); loss.item(). Each side reports
the slowest rank's median step time. The two alternate --repeats times (the order flips every
repeat); the script prints the median over repeats of each side and the ratio gradus / PyTorch
(< 1: gradus is faster). Same launcher, binding (--bind-to core) and threads on both sides.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_pytorch import BENCH_BATCHES, find_gradus, worker_model  # noqa: E402

DEFAULT_RUNS = "mlp-large@256,cnn@64,gpt@16"
# gpt: 4 layers, 4 heads, width 128 (gradus bench's defaults), context 64, the 65 characters of
# tinyshakespeare; its batch is of token windows.
GPT_VOCAB, GPT_CONTEXT = 65, 64


# ------------------------------------------------------------------- one PyTorch rank (mpirun)
def torch_rank(args):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank,
                            world_size=size)
    assert args.batch_size % size == 0, "the global batch must divide by the ranks"
    per_rank = args.batch_size // size
    torch.manual_seed(args.seed)  # DDP broadcasts rank 0's parameters anyway
    torch.manual_seed(args.seed + 1 + rank)  # each rank its own batches
    if args.model == "gpt":
        # nanoGPT's CPU shape (compare_gpt.py's model): AdamW as `gradus bench --model gpt`.
        from compare_gpt import GPT
        model = DistributedDataParallel(GPT(GPT_VOCAB, GPT_CONTEXT, 4, 4, 128))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
        xs = [torch.randint(0, GPT_VOCAB, (per_rank, GPT_CONTEXT)) for _ in range(BENCH_BATCHES)]
        ys = [torch.randint(0, GPT_VOCAB, (per_rank, GPT_CONTEXT)) for _ in range(BENCH_BATCHES)]

        def loss_of(out, y):
            return F.cross_entropy(out.view(-1, GPT_VOCAB), y.view(-1))
    else:
        model = DistributedDataParallel(worker_model(args.model))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        xs = [torch.randn(per_rank, 1, 28, 28) for _ in range(BENCH_BATCHES)]
        ys = [torch.randint(0, 10, (per_rank,)) for _ in range(BENCH_BATCHES)]
        loss_of = F.cross_entropy

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = loss_of(model(xs[i % BENCH_BATCHES]), ys[i % BENCH_BATCHES])
        loss.backward()
        opt.step()
        return loss.item()

    for i in range(args.warmup):
        step(i)
    dist.barrier()
    times = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        step(args.warmup + i)
        times.append((time.perf_counter() - t0) * 1e3)
    median = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(median, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(json.dumps({"ms_per_step": median.item(), "torch": torch.__version__,
                          "threads": torch.get_num_threads(), "world_size": size}), flush=True)
    # Leave without destroy_process_group(): gloo's teardown sometimes aborts a rank
    # ("terminate called without an active exception") after the work is done.
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


# --------------------------------------------------------------------------------- the driver
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mpirun(np_, threads):
    cmd = ["mpirun", "-np", str(np_), "--bind-to", "core", "--map-by", "core",
           "-x", f"OMP_NUM_THREADS={threads}"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd


def last_json(out, what):
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"{what} printed no JSON line:\n{out}")


def run(cmd, what):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {p.returncode}): {' '.join(cmd)}\n"
                           f"{p.stdout}\n{p.stderr}")
    return last_json(p.stdout, what)


def time_gradus(binary, model, batch, a):
    cmd = mpirun(a.np, a.threads) + [binary, "bench", "--dist", "ddp", "--model", model,
                                     "--batch-size", str(batch), "--threads", str(a.threads),
                                     "--steps", str(a.steps), "--warmup", str(a.warmup),
                                     "--seed", str(a.seed)]
    return run(cmd, "gradus")


def time_torch(model, batch, a):
    cmd = mpirun(a.np, a.threads) + [sys.executable, os.path.abspath(__file__), "--torch-rank",
                                     "--model", model, "--batch-size", str(batch),
                                     "--threads", str(a.threads), "--steps", str(a.steps),
                                     "--warmup", str(a.warmup), "--seed", str(a.seed),
                                     "--port", str(free_port())]
    return run(cmd, "PyTorch")


def main():
    p = argparse.ArgumentParser(description="gradus DDP vs PyTorch DDP (gloo) step times",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--gradus", help="path of the gradus binary (default: newest build*/ one)")
    p.add_argument("--runs", default=DEFAULT_RUNS, help="model@global_batch, comma-separated")
    p.add_argument("--np", type=int, default=2, help="ranks")
    p.add_argument("--threads", type=int, default=1, help="threads per rank, both frameworks")
    p.add_argument("--steps", type=int, default=60, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps per run")
    p.add_argument("--repeats", type=int, default=5, help="alternating runs of each framework")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON document instead")
    # One PyTorch rank (started by this script through mpirun).
    p.add_argument("--torch-rank", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--batch-size", type=int, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.torch_rank:
        return torch_rank(a)
    if shutil.which("mpirun") is None:
        sys.exit("compare_ddp.py: mpirun (Open MPI) not found; scripts/install_deps.sh installs it")
    binary = find_gradus(a.gradus)
    results = []
    for spec in a.runs.split(","):
        model, batch = spec.split("@")
        batch = int(batch)
        g_ms, t_ms = [], []
        torch_version = None
        for r in range(a.repeats):
            order = ("gradus", "torch") if r % 2 == 0 else ("torch", "gradus")
            for side in order:
                if side == "gradus":
                    g_ms.append(time_gradus(binary, model, batch, a)["ms_per_step"])
                else:
                    t = time_torch(model, batch, a)
                    torch_version = t["torch"]
                    t_ms.append(t["ms_per_step"])
        g, t = statistics.median(g_ms), statistics.median(t_ms)
        results.append({"model": model, "global_batch": batch, "ranks": a.np,
                        "threads_per_rank": a.threads, "gradus_ms": g, "torch_ms": t,
                        "ratio": g / t, "gradus_runs_ms": g_ms, "torch_runs_ms": t_ms,
                        "torch": torch_version})
        if not a.json:
            print(f"{model}@{batch} {a.np} ranks x {a.threads} thread(s): gradus {g:.2f} ms, "
                  f"PyTorch {torch_version} (gloo) {t:.2f} ms, ratio {g / t:.2f}   "
                  f"(runs: gradus {', '.join(f'{x:.1f}' for x in g_ms)}; "
                  f"PyTorch {', '.join(f'{x:.1f}' for x in t_ms)})", flush=True)
    if a.json:
        print(json.dumps({"benchmark": "ddp_vs_pytorch", "results": results}, indent=1))


if __name__ == "__main__":
    main()
