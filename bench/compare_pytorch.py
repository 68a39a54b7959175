#!/usr/bin/env python3
"""Times the same training step in gradus and in PyTorch and prints the ratio.

For each model@batch (default mlp@100, mlp-large@256, cnn@64) it runs
`gradus bench --model M --batch-size B --steps N --warmup W --threads T --device D` (one JSON
line with the median ms_per_step) and the same model, loss (cross-entropy), optimizer (Adam,
lr 1e-3), batch, dtype (float32) and thread count in PyTorch, alternating the two `--repeats`
times (the order flips every repeat, so drift in machine load hits both alike). It reports the
median over repeats of each side's per-run median step time and the ratio gradus / PyTorch
(< 1: gradus is faster). It also times an NxN SGEMM with `gradus bench --gemm N` (OpenBLAS on
the CPU) and states mlp-large's GEMM throughput as a fraction of it.

PyTorch runs in one persistent worker process (imported once, torch.set_num_threads(T)); gradus
runs as a fresh process per measurement, like a user would run it. See bench/README.md.
"""

import argparse
import contextlib
import datetime
import glob
import json
import re
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

MODELS = {
    # name: (gradus --model, description); the PyTorch twins are built in worker_model().
    "mlp": "Linear(784,128) ReLU Linear(128,10)",
    "mlp-large": "Linear(784,1024) ReLU Linear(1024,1024) ReLU Linear(1024,10)",
    "cnn": "Conv(1,32,3,p1) ReLU MaxPool2 Conv(32,64,3,p1) ReLU MaxPool2 "
           "Linear(3136,128) ReLU Linear(128,10)",
    "resnet20": "CIFAR ResNet-20 (3x3 basic blocks, widths 16/32/64, BatchNorm, projection "
                "shortcuts) on 1x28x28",
}
DEFAULT_RUNS = "mlp@100,mlp-large@256,cnn@64"
BENCH_BATCHES = 16  # = kBenchBatches in apps/gradus/bench.cpp


# ------------------------------------------------------------------------------ PyTorch worker
def worker_model(name):
    import torch.nn as nn

    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    if name == "mlp-large":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(),
                             nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
    if name == "resnet20":
        # The PyTorch twin the ResNet golden test is written from (same layers and names).
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
        from make_resnet_golden import resnet20
        return resnet20(in_channels=1, num_classes=10)
    raise ValueError(f"unknown model {name}")


def worker_main(args):
    """Reads one JSON request per line from stdin, answers one JSON line on stdout."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(json.dumps({"ready": True, "torch": torch.__version__,
                      "threads": torch.get_num_threads()}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("gemm"):
            n = req["gemm"]
            dtype = {"f32": torch.float32, "bf16": torch.bfloat16,
                     "f16": torch.float16}[req.get("dtype", "f32")]
            a = torch.randn(n, n, device=device).to(dtype)
            b = torch.randn(n, n, device=device).to(dtype)
            c = a @ b
            times = []
            for _ in range(req["steps"]):
                t0 = time.perf_counter()
                c = a @ b
                c[0, 0].item()  # waits for the device
                times.append((time.perf_counter() - t0) * 1e3)
            ms = statistics.median(times)
            print(json.dumps({"ms": ms, "gflops": 2 * n ** 3 / (ms * 1e-3) / 1e9}), flush=True)
            continue
        torch.manual_seed(req.get("seed", 0))
        model = worker_model(req["model"]).to(device).train()
        opt_kwargs = {"lr": 1e-3}
        if req.get("adam") in ("foreach", "fused"):
            opt_kwargs[req["adam"]] = True
        opt = torch.optim.Adam(model.parameters(), **opt_kwargs)
        # A pool of distinct random batches, cycled, as in `gradus bench` (one repeated batch gets
        # memorised and the step would be timed on vanishing gradients).
        xs = [torch.randn(req["batch"], 1, 28, 28, device=device) for _ in range(BENCH_BATCHES)]
        ys = [torch.randint(0, 10, (req["batch"],), device=device) for _ in range(BENCH_BATCHES)]
        counter = [0]

        autocast = (torch.autocast(device_type=device.type, dtype=torch.bfloat16)
                    if req.get("amp") == "bf16" else contextlib.nullcontext())

        def step():
            i = counter[0] % BENCH_BATCHES
            counter[0] += 1
            opt.zero_grad(set_to_none=True)
            with autocast:
                loss = F.cross_entropy(model(xs[i]), ys[i])
            loss.backward()
            opt.step()
            return loss.item()  # waits for the device, like gradus bench

        for _ in range(req["warmup"]):
            step()
        times = []
        loss = float("nan")
        for _ in range(req["steps"]):
            t0 = time.perf_counter()
            loss = step()
            times.append((time.perf_counter() - t0) * 1e3)
        print(json.dumps({"ms_per_step": statistics.median(times), "final_loss": loss}), flush=True)


class TorchWorker:
    def __init__(self, threads, device):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", "--threads", str(threads),
             "--device", device],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.hello = self._read()

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            # Its traceback went to stderr above: torch missing, or safetensors for resnet20
            # (tools/make_resnet_golden.py imports it).
            raise RuntimeError("the PyTorch worker exited; its error is printed above (it needs "
                               "torch, and safetensors for resnet20: pip install torch safetensors)")
        return json.loads(line)

    def ask(self, request):
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


# ------------------------------------------------------------------------------------- gradus
def find_gradus(explicit):
    if explicit:
        return explicit
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    candidates = glob.glob(os.path.join(root, "build*", "apps", "gradus", "gradus"))
    candidates = [c for c in candidates if os.access(c, os.X_OK)]
    if candidates:
        return max(candidates, key=os.path.getmtime)  # the most recently built
    on_path = shutil.which("gradus")
    if on_path:
        return on_path
    sys.exit("compare_pytorch.py: no gradus binary found; build the CLI "
             "(cmake --build build --target gradus) or pass --gradus PATH")


GRADUS_ENV = dict(os.environ)


def run_gradus(binary, args):
    """Runs `gradus bench ...` and returns its JSON line (or {"error": ...})."""
    cmd = [binary, "bench"] + [str(a) for a in args]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=GRADUS_ENV)
    except subprocess.TimeoutExpired:
        return {"error": "timed out: " + " ".join(cmd)}
    if out.returncode != 0:
        return {"error": f"exit {out.returncode}: {out.stderr.strip()[-300:]}"}
    for line in reversed(out.stdout.strip().splitlines()):
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            continue
    return {"error": "no JSON line in output: " + out.stdout[-300:]}


def openblas_core(binary):
    """The OpenBLAS kernel set gradus runs with (as `gradus info` reports it, after gradus's own
    correction of OpenBLAS's CPU detection), or None."""
    try:
        out = subprocess.run([binary, "info"], capture_output=True, text=True, timeout=120,
                             env=GRADUS_ENV)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"core (\w+)", out.stdout)
    return m.group(1) if m else None


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def openblas_warning(core):
    """OpenBLAS 0.3.21 does not recognise some recent or virtualised Xeons and falls back to its
    SSE3 "Prescott" kernels, a third of the AVX-512 speed; say so, with the fix."""
    if core is None:
        return None
    flags = cpu_flags()
    old = core.lower() in ("prescott", "katmai", "coppermine", "northwood", "banias", "core2",
                           "penryn", "dunnington", "nehalem", "atom", "sandybridge")
    if old and "avx512f" in flags:
        better = "SkylakeX"
    elif old and "avx2" in flags:
        better = "Haswell"
    else:
        return None
    return (f"OpenBLAS uses its {core} kernels although this CPU has "
            f"{'AVX-512' if better == 'SkylakeX' else 'AVX2'}: gradus's GEMMs run far below the "
            f"CPU's speed. Rerun with --openblas-coretype {better} (sets OPENBLAS_CORETYPE) "
            f"to measure gradus with the right kernels.")


# --------------------------------------------------------------------------------------- main
def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def machine_info(args, binary, torch_hello):
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        commit = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = ""
    try:
        version = subprocess.run([binary, "--version"], capture_output=True,
                                 text=True).stdout.strip()
    except OSError:
        version = ""
    return {"date": datetime.datetime.now().isoformat(timespec="seconds"), "cpu": cpu,
            "cores": os.cpu_count(), "threads": args.threads, "device": args.device,
            "gradus": version, "gradus_binary": binary, "commit": commit,
            "torch": torch_hello.get("torch"), "torch_threads": torch_hello.get("threads")}


def fmt(v, spec=".2f"):
    return "n/a" if v is None else format(v, spec)


def main():
    p = argparse.ArgumentParser(description="gradus vs PyTorch training-step times",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--gradus", help="path of the gradus binary (default: newest build*/ one)")
    p.add_argument("--runs", default=DEFAULT_RUNS,
                   help="comma-separated model@batch list (models: " + ", ".join(MODELS) + ")")
    p.add_argument("--threads", type=int, default=2, help="CPU threads for both frameworks")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--steps", type=int, default=200, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps per run")
    p.add_argument("--repeats", type=int, default=5, help="alternating runs of each framework")
    p.add_argument("--gemm", type=int, default=1024, help="GEMM size N (0: skip)")
    p.add_argument("--gemm-dtype", choices=["f32", "bf16", "f16"], default="f32",
                   help="dtype of the GEMM operands")
    p.add_argument("--amp", choices=["off", "bf16"], default="off",
                   help="bf16: both sides' steps under bf16 autocast (gradus bench --amp bf16, "
                        "torch.autocast)")
    p.add_argument("--adam", choices=["default", "foreach", "fused"], default="default",
                   help="PyTorch Adam implementation (default: what PyTorch picks)")
    p.add_argument("--openblas-coretype", metavar="NAME",
                   help="set OPENBLAS_CORETYPE for gradus (e.g. SkylakeX, Haswell) when "
                        "OpenBLAS mis-detects the CPU")
    p.add_argument("--json", action="store_true", help="print one JSON document instead")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker_main(args)

    runs = []
    for item in filter(None, args.runs.split(",")):  # --runs "": the GEMM comparison alone
        model, _, batch = item.strip().partition("@")
        if model not in MODELS or not batch.isdigit():
            sys.exit(f"compare_pytorch.py: bad run '{item}' (expected model@batch, models: "
                     + ", ".join(MODELS) + ")")
        runs.append((model, int(batch)))

    binary = find_gradus(args.gradus)
    if args.openblas_coretype:
        GRADUS_ENV["OPENBLAS_CORETYPE"] = args.openblas_coretype
    core = openblas_core(binary) if args.device == "cpu" else None
    warning = openblas_warning(core)
    worker = TorchWorker(args.threads, args.device)
    log = (lambda *a: None) if args.json else (lambda *a: print(*a, file=sys.stderr, flush=True))
    log(f"gradus: {binary} (OpenBLAS core: {core}); PyTorch {worker.hello['torch']} with "
        f"{worker.hello['threads']} threads; device {args.device}")
    if warning:
        log("warning: " + warning)

    samples = {run: {"gradus": [], "pytorch": [], "errors": []} for run in runs}
    extra = {}
    gemm_samples = {"gradus": [], "pytorch": [], "errors": []}
    for r in range(args.repeats):
        if args.gemm > 0:
            # The SGEMM rate the MLPs' GEMM work is set against, measured in every repeat (one
            # measurement swings with the machine's state).
            time.sleep(0.2)
            res = run_gradus(binary, ["--gemm", args.gemm, "--gemm-dtype", args.gemm_dtype,
                                      "--steps", 20, "--threads", args.threads,
                                      "--device", args.device])
            if "error" in res:
                gemm_samples["errors"].append(res["error"])
            else:
                gemm_samples["gradus"].append(res["gflops"])
            time.sleep(0.2)
            gemm_samples["pytorch"].append(
                worker.ask({"gemm": args.gemm, "dtype": args.gemm_dtype, "steps": 20})["gflops"])
        for run in runs:
            model, batch = run
            order = ["gradus", "pytorch"] if r % 2 == 0 else ["pytorch", "gradus"]
            for side in order:
                time.sleep(0.2)  # let the other side's idle OpenMP threads go to sleep
                if side == "gradus":
                    res = run_gradus(binary, ["--model", model, "--batch-size", batch,
                                              "--steps", args.steps, "--warmup", args.warmup,
                                              "--repeats", 1, "--threads", args.threads,
                                              "--device", args.device, "--amp", args.amp])
                    if "error" in res:
                        samples[run]["errors"].append(res["error"])
                        samples[run]["gradus"].append(None)
                    else:
                        samples[run]["gradus"].append(res["ms_per_step"])
                        if "linear_gflops" in res:
                            extra.setdefault(run, []).append(res["linear_gflops"])
                else:
                    res = worker.ask({"model": model, "batch": batch, "steps": args.steps,
                                      "warmup": args.warmup, "adam": args.adam, "seed": r,
                                      "amp": args.amp})
                    samples[run]["pytorch"].append(res["ms_per_step"])
            log(f"  repeat {r + 1}/{args.repeats} {model}@{batch}: gradus "
                f"{fmt(samples[run]['gradus'][-1])} ms, PyTorch {fmt(samples[run]['pytorch'][-1])} ms")

    gemm = None
    if args.gemm > 0:
        gemm = {"n": args.gemm, "gradus_gflops": median_or_none(gemm_samples["gradus"]),
                "gradus_error": gemm_samples["errors"][0] if gemm_samples["errors"] else None,
                "pytorch_gflops": median_or_none(gemm_samples["pytorch"]),
                "gradus_runs_gflops": gemm_samples["gradus"],
                "pytorch_runs_gflops": gemm_samples["pytorch"]}
    info = machine_info(args, binary, worker.hello)
    info["openblas_core"] = core
    info["warning"] = warning
    worker.close()

    results = []
    for run in runs:
        model, batch = run
        g = median_or_none(samples[run]["gradus"])
        t = median_or_none(samples[run]["pytorch"])
        row = {"model": model, "batch_size": batch, "gradus_ms": g, "pytorch_ms": t,
               "ratio": g / t if g and t else None,
               "gradus_samples_per_s": batch / (g * 1e-3) if g else None,
               "pytorch_samples_per_s": batch / (t * 1e-3) if t else None,
               "gradus_runs_ms": samples[run]["gradus"], "pytorch_runs_ms": samples[run]["pytorch"],
               "errors": samples[run]["errors"]}
        if run in extra:
            # The step's GEMM work (forward + 2 backward GEMMs per Linear) at each side's speed.
            row["gradus_linear_gflops"] = median_or_none(extra[run])
            if t and g:
                row["pytorch_linear_gflops"] = row["gradus_linear_gflops"] * g / t
            if gemm and gemm["gradus_gflops"]:
                row["gradus_fraction_of_sgemm"] = row["gradus_linear_gflops"] / gemm["gradus_gflops"]
                if "pytorch_linear_gflops" in row:
                    row["pytorch_fraction_of_sgemm"] = (row["pytorch_linear_gflops"]
                                                        / gemm["gradus_gflops"])
        results.append(row)

    if args.json:
        print(json.dumps({"machine": info, "settings": vars(args), "results": results,
                          "sgemm": gemm}, indent=2))
        return 0

    print(f"\n{info['date']}  {info['cpu']}  ({info['cores']} cores)  commit {info['commit']}")
    if core:
        print(f"OpenBLAS kernels: {core}")
    print(f"{info['gradus']} vs PyTorch {info['torch']}; {args.threads} threads, device "
          f"{args.device}, {'bf16 autocast' if args.amp == 'bf16' else 'float32'}, Adam(lr=1e-3), cross-entropy; medians of {args.repeats} "
          f"alternating runs x {args.steps} steps\n")
    header = (f"{'model':<10} {'batch':>5} {'gradus ms':>10} {'PyTorch ms':>11} "
              f"{'gradus/PyTorch':>15} {'gradus smp/s':>13} {'PyTorch smp/s':>14}")
    print(header)
    print("-" * len(header))
    for row in results:
        print(f"{row['model']:<10} {row['batch_size']:>5} {fmt(row['gradus_ms']):>10} "
              f"{fmt(row['pytorch_ms']):>11} {fmt(row['ratio'], '.3f'):>15} "
              f"{fmt(row['gradus_samples_per_s'], '.0f'):>13} "
              f"{fmt(row['pytorch_samples_per_s'], '.0f'):>14}")
        for err in sorted(set(row["errors"])):
            print(f"    gradus error: {err}")
    if gemm:
        print(f"\nGEMM {gemm['n']}^3 {args.gemm_dtype} (medians of {args.repeats}): gradus "
              f"{fmt(gemm['gradus_gflops'], '.1f')} GFLOP/s, PyTorch "
              f"{fmt(gemm['pytorch_gflops'], '.1f')} GFLOP/s")
        if gemm["gradus_gflops"] and gemm["pytorch_gflops"]:
            print(f"    time ratio gradus/PyTorch: "
                  f"{gemm['pytorch_gflops'] / gemm['gradus_gflops']:.3f}")
        if gemm["gradus_error"]:
            print(f"    gradus --gemm error: {gemm['gradus_error']}")
    for row in results:
        if "gradus_fraction_of_sgemm" in row:
            line = (f"{row['model']}@{row['batch_size']} GEMM work: gradus "
                    f"{row['gradus_linear_gflops']:.1f} GFLOP/s = "
                    f"{100 * row['gradus_fraction_of_sgemm']:.0f}% of the SGEMM rate")
            if "pytorch_fraction_of_sgemm" in row:
                line += (f"; PyTorch {row['pytorch_linear_gflops']:.1f} GFLOP/s = "
                         f"{100 * row['pytorch_fraction_of_sgemm']:.0f}%")
            print(line)
    if warning:
        print("\nwarning: " + warning)
    return 0


if __name__ == "__main__":
    sys.exit(main())
