#!/usr/bin/env python3
"""Times `gradus tokenize` against Hugging Face `tokenizers` on the same text, tokenizer and
thread counts, and checks that both give the same ids.

    python3 tools/bench_tokenizer.py --gradus build/apps/gradus/gradus \\
        [--text /work/shared/data/tinyshakespeare.txt] [--vocab 8192] [--threads 1 2] [--repeats 7]

Needs `tokenizers` (pip). First trains a GPT-2 style byte-level BPE on the text (ByteLevel
pre-tokenizer with GPT-2's regex, no prefix space, the 256 byte symbols, "<|endoftext|>"), saved
as WORK/tokenizer.json (kept between runs). Then, for each thread count, alternates runs of
  gradus     `gradus tokenize --threads N` (its own timing of the encoding, the file already
             mapped and the tokenizer loaded; the ids are written to a file)
  hf_encode  Tokenizer.encode(text): the whole text as one sequence (tokenizers encodes one
             sequence on one thread whatever RAYON_NUM_THREADS says)
  hf_batch   Tokenizer.encode_batch_fast(pieces) with RAYON_NUM_THREADS=N: the text cut after
             newlines into pieces of about 64 KB, encoded in parallel
each in a fresh process with a fresh tokenizer (no warm caches), and prints the median MB/s
(1 MB = 10^6 bytes of input) of each, and whether gradus's ids equal hf_encode's.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HF_CHILD = r"""
import json, sys, time
from tokenizers import Tokenizer
tok_path, text_path, mode = sys.argv[1], sys.argv[2], sys.argv[3]
with open(text_path, encoding="utf-8") as f:
    text = f.read()
nbytes = len(text.encode("utf-8"))
tok = Tokenizer.from_file(tok_path)
if mode == "encode":
    t0 = time.perf_counter()
    ids = tok.encode(text, add_special_tokens=False).ids
    dt = time.perf_counter() - t0
else:
    pieces, start, target = [], 0, 64000
    while start < len(text):
        end = text.find("\n", start + target)
        end = len(text) if end < 0 else end + 1
        pieces.append(text[start:end])
        start = end
    t0 = time.perf_counter()
    encs = tok.encode_batch_fast(pieces, add_special_tokens=False)
    dt = time.perf_counter() - t0
    ids = [i for e in encs for i in e.ids]
print(json.dumps({"seconds": dt, "bytes": nbytes, "tokens": len(ids)}))
if len(sys.argv) > 4:
    with open(sys.argv[4], "w") as f:
        json.dump(ids, f)
"""


def train(text_path, vocab, out):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2,
                                  special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train([text_path], trainer)
    tok.save(out)


def run_hf(tok_path, text_path, mode, threads, ids_out=None):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
    args = [sys.executable, "-c", HF_CHILD, tok_path, text_path, mode]
    if ids_out:
        args.append(ids_out)
    out = subprocess.run(args, env=env, check=True, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return r["bytes"] / r["seconds"] / 1e6


def run_gradus(gradus, tok_path, text_path, threads, out_bin):
    env = dict(os.environ, OPENBLAS_CORETYPE=os.environ.get("OPENBLAS_CORETYPE", "Haswell"))
    out = subprocess.run([gradus, "tokenize", "--tokenizer", tok_path, "--input", text_path,
                          "--output", out_bin, "--threads", str(threads), "--no-progress"],
                         env=env, check=True, capture_output=True, text=True).stdout
    # "tokenize: FILE: N bytes -> M tokens (...) in S s: R MB/s on T threads ..."
    line = [ln for ln in out.splitlines() if " MB/s " in ln][0]
    return float(line.split(" MB/s")[0].rsplit(" ", 1)[1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gradus", required=True, help="the gradus executable")
    parser.add_argument("--text", default="/work/shared/data/tinyshakespeare.txt")
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "gradus_bench_tok"))
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    tok_path = os.path.join(args.work, f"tokenizer_{args.vocab}.json")
    if not os.path.exists(tok_path):
        train(args.text, args.vocab, tok_path)
    out_bin = os.path.join(args.work, "tokens.bin")

    # The ids first: gradus's file against tokenizers' encode of the whole text.
    run_gradus(args.gradus, tok_path, args.text, max(args.threads), out_bin)
    ids_json = os.path.join(args.work, "hf_ids.json")
    run_hf(tok_path, args.text, "encode", 1, ids_json)
    with open(ids_json) as f:
        hf_ids = json.load(f)
    with open(out_bin, "rb") as f:
        data = f.read()
    width = 2 if args.vocab <= 65536 else 4
    gradus_ids = [int.from_bytes(data[i:i + width], "little") for i in range(0, len(data), width)]
    same = gradus_ids == hf_ids
    print(f"{args.text}: {os.path.getsize(args.text)} bytes, {len(hf_ids)} tokens, vocabulary "
          f"{args.vocab}; gradus ids == tokenizers ids: {same}")

    for threads in args.threads:
        times = {"gradus": [], "hf_encode": [], "hf_batch": []}
        for _ in range(args.repeats):
            times["gradus"].append(run_gradus(args.gradus, tok_path, args.text, threads, out_bin))
            times["hf_encode"].append(run_hf(tok_path, args.text, "encode", threads))
            times["hf_batch"].append(run_hf(tok_path, args.text, "batch", threads))
        summary = ", ".join(f"{k} {statistics.median(v):.2f} MB/s" for k, v in times.items())
        print(f"threads {threads}: {summary} (medians of {args.repeats})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
