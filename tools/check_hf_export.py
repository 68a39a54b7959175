#!/usr/bin/env python3
"""Checks a Hugging Face directory written by gradus (`gradus train --save-hf DIR`) in transformers.

    python3 tools/check_hf_export.py DIR TOKENS.bin --context N [--batch-size B]

Loads DIR with transformers' from_pretrained (float64, "sdpa" attention) and prints the mean
next-token loss and perplexity over the token file's consecutive windows exactly as
`gradus eval --checkpoint DIR --data tokens --data-file TOKENS.bin --context N` defines them:
window i feeds tokens [i N, (i + 1) N) and predicts the next token of each; the last window
without a full set of targets is dropped. The two commands' val_loss lines agree to float32
accuracy when the export is right.
"""

import argparse
import math

import numpy as np
import torch
from transformers import AutoModelForCausalLM


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("tokens")
    parser.add_argument("--context", type=int, required=True)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--dtype", default="uint16", choices=["uint16", "uint32"])
    args = parser.parse_args()
    model = AutoModelForCausalLM.from_pretrained(args.dir, attn_implementation="sdpa",
                                                 dtype=torch.float64).eval()
    tokens = torch.from_numpy(np.fromfile(args.tokens, dtype=args.dtype).astype(np.int64))
    c = args.context
    windows = (tokens.numel() - 1) // c
    assert windows > 0, "no window"
    total = 0.0
    with torch.no_grad():
        for first in range(0, windows, args.batch_size):
            n = min(args.batch_size, windows - first)
            x = torch.stack([tokens[(first + w) * c:(first + w + 1) * c] for w in range(n)])
            y = torch.stack([tokens[(first + w) * c + 1:(first + w + 1) * c + 1] for w in range(n)])
            logits = model(x).logits
            total += torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum").item()
    loss = total / (windows * c)
    print(f"val_loss={loss:.6f}")
    print(f"perplexity={math.exp(loss):.6f}")
    print(f"windows={windows}")


if __name__ == "__main__":
    main()
