#!/usr/bin/env python3
"""How evenly the CPUs this process may use run right now: one single-threaded float32 matmul loop
pinned to each CPU, all at once for --seconds, and each one's GFLOP/s.

    python3 bench/core_balance.py [--seconds 0.5]

On a shared virtual machine the vCPUs' speeds can differ, and change within minutes (a busy
neighbour on a vCPU's hyperthread sibling slows that one alone). A step whose work is split into
equal static parts per thread, as GEMM libraries and most kernels split it, then runs at the
slowest vCPU's pace. compare_gpt.py --probe-cores records this before each repeat, so a ratio can
be read next to the balance it was measured under. Prints one JSON line: the rates and the
balance (slowest / fastest). Needs numpy.
"""

import argparse
import json
import multiprocessing as mp
import os


def _worker(cpu, seconds, start, out):
    os.sched_setaffinity(0, {cpu})
    import time
    import numpy as np
    a = np.random.default_rng(cpu).standard_normal((384, 384), dtype=np.float32)
    b = np.random.default_rng(cpu + 1).standard_normal((384, 384), dtype=np.float32)
    a @ b
    start.wait()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ b
        n += 1
    out.put((cpu, 2 * 384 ** 3 * n / (time.perf_counter() - t0) / 1e9))


def core_rates(seconds=0.5):
    """{cpu: GFLOP/s} with every allowed CPU busy at once."""
    try:
        import numpy  # noqa: F401  (the workers' matmul)
    except ImportError:
        raise SystemExit("core_balance: needs numpy (pip install numpy)")
    cpus = sorted(os.sched_getaffinity(0))
    ctx = mp.get_context("spawn")
    # One BLAS thread per worker: each measures its own CPU alone.
    saved = {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    os.environ.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    try:
        start, out = ctx.Barrier(len(cpus)), ctx.Queue()
        procs = [ctx.Process(target=_worker, args=(c, seconds, start, out)) for c in cpus]
        for p in procs:
            p.start()
        rates = dict(out.get(timeout=60 + seconds) for _ in procs)
        for p in procs:
            p.join()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return rates


def balance(rates):
    return min(rates.values()) / max(rates.values())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seconds", type=float, default=0.5)
    args = p.parse_args()
    rates = core_rates(args.seconds)
    print(json.dumps({"gflops_per_cpu": {str(k): round(v, 1) for k, v in sorted(rates.items())},
                      "balance": round(balance(rates), 3)}))


if __name__ == "__main__":
    main()
