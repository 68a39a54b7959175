#!/usr/bin/env python3
"""Data-parallel strategies side by side: step time, bytes and optimizer state per rank.

For each world size in --nps and each strategy in --modes (ddp = ring all-reduce, ps = parameter
server on rank 0, zero1 = sharded optimizer) it runs

    mpirun -np N gradus bench --dist MODE --model M --batch-size (N x per-rank batch) --threads T

(weak scaling: every rank trains on the same per-rank batch), plus the plain one-process
`gradus bench` as the baseline, alternating the configurations --repeats times. It prints a
markdown table of the medians: the global step time, global samples/s, weak-scaling efficiency
(samples/s / (N x the one-process samples/s)), the payload bytes the busiest rank sent and received
per step and rank 0's, and the optimizer state bytes per rank.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_pytorch import find_gradus  # noqa: E402


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        sys.exit(f"dist_table.py: failed (exit {p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    sys.exit(f"dist_table.py: no JSON line from {' '.join(cmd)}\n{p.stdout}")


def mib(b):
    return f"{b / 2**20:.2f}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--gradus", help="path of the gradus binary (default: newest build*/ one)")
    p.add_argument("--model", default="mlp-large")
    p.add_argument("--per-rank-batch", type=int, default=128)
    p.add_argument("--nps", default="2,4", help="world sizes")
    p.add_argument("--modes", default="ddp,ps,zero1")
    p.add_argument("--threads", type=int, default=1, help="threads per rank")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--bind", default="core", help="mpirun --bind-to (none when oversubscribed)")
    a = p.parse_args()
    binary = find_gradus(a.gradus)
    common = ["--model", a.model, "--threads", str(a.threads), "--steps", str(a.steps)]
    configs = [("one process", 1)] + [(m, int(n)) for n in a.nps.split(",")
                                      for m in a.modes.split(",")]
    results = {c: [] for c in configs}
    ncores = os.cpu_count() or 1
    for r in range(a.repeats):
        order = configs if r % 2 == 0 else list(reversed(configs))
        for mode, n in order:
            batch = str(a.per_rank_batch * n)
            if mode == "one process":
                cmd = [binary, "bench", "--batch-size", batch] + common
            else:
                bind = a.bind if n * a.threads <= ncores else "none"
                cmd = ["mpirun", "-np", str(n), "--bind-to", bind, "--oversubscribe",
                       "-x", f"OMP_NUM_THREADS={a.threads}"]
                if os.geteuid() == 0:
                    cmd.append("--allow-run-as-root")
                cmd += [binary, "bench", "--dist", mode, "--batch-size", batch] + common
            results[(mode, n)].append(run(cmd))
            print(f"  repeat {r + 1}: {mode} x{n}: {results[(mode, n)][-1]['ms_per_step']:.2f} ms",
                  file=sys.stderr, flush=True)

    base = statistics.median(d["samples_per_s"] for d in results[("one process", 1)])
    print(f"{a.model}, {a.per_rank_batch} examples per rank, {a.threads} thread(s) per rank, "
          f"{ncores} cores, medians of {a.repeats} alternating runs")
    print()
    print("| strategy | ranks | ms/step | samples/s | efficiency | sent/step MiB (max; rank 0) "
          "| received/step MiB (max; rank 0) | optimizer state MiB per rank |")
    print("|---|---|---|---|---|---|---|---|")
    for mode, n in configs:
        runs = results[(mode, n)]
        ms = statistics.median(d["ms_per_step"] for d in runs)
        sps = statistics.median(d["samples_per_s"] for d in runs)
        d = runs[0]  # bytes are the same in every run
        if mode == "one process":
            print(f"| one process | 1 | {ms:.2f} | {sps:.0f} | 1 | - | - | - |")
            continue
        sent, recv = d["bytes_sent_per_step"], d["bytes_received_per_step"]
        state = ", ".join(mib(b) for b in d["optimizer_state_bytes"])
        print(f"| {mode} | {n} | {ms:.2f} | {sps:.0f} | {sps / (n * base):.2f} "
              f"| {mib(max(sent))}; {mib(sent[0])} | {mib(max(recv))}; {mib(recv[0])} | {state} |")


if __name__ == "__main__":
    main()
