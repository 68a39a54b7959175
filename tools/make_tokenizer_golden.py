#!/usr/bin/env python3
"""Writes the byte-level BPE golden files that tests/data/bpe_tokenizer_test.cpp and the
`gradus tokenize` CLI test compare gradus's data::BpeTokenizer against.

    python3 tools/make_tokenizer_golden.py [--out tests/data/golden/bpe]

Needs Hugging Face `tokenizers` (pip; offline: the tokenizer is trained here, nothing is
downloaded). The files are committed: Python is never needed to build or test gradus.

Trains a small GPT-2 style tokenizer (ByteLevel pre-tokenizer with GPT-2's regex and no prefix
space, BPE over the 256 byte symbols, ByteLevel decoder) on corpus.txt, which is written first:
tests/data/text/shakespeare_sample.txt followed by lines of unicode, digits and whitespace.

Writes
  corpus.txt            the training text (also the CLI test's input)
  tokenizer.json        the trained tokenizer as tokenizers saves it (merges as [a, b] pairs),
                        with added tokens: "<|endoftext|>" (special), "[MASK]" (lstrip),
                        "<sep>" (rstrip) and " Romeo" (single_word, normalized)
  vocab.json            the same BPE model's vocabulary ...
  merges.txt            ... and merges (GPT-2's format: no added tokens)
  tokenizer_legacy.json tokenizer.json as older tokenizers wrote it (merges as "a b" strings),
                        with add_prefix_space=true
  tokenizer_llama3.json a tokenizer laid out as Llama 3's (and Qwen 2's, less its NFC normalizer):
                        a Sequence of a Split on Llama 3's regex (Isolated) and a ByteLevel
                        pre-tokenizer without its own regex, ignore_merges, a BOS template
  expected.json         {"texts": [...], "<file>": [[ids], ...] for each of the four
                        tokenizers}: the ids tokenizers gives each text (add_special_tokens=False)
  corpus.bin            corpus.txt encoded with tokenizer.json, raw little-endian uint16
                        (nanoGPT's .bin format)
"""

import argparse
import json
import os
import struct

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from tokenizers import trainers

HERE = os.path.dirname(os.path.abspath(__file__))

# Lines appended to the Shakespeare sample so that the merges see more than ASCII.
EXTRA_LINES = [
    "café naïve résumé façade Ærøskøbing Straße",
    "日本語のテキストと中文文本，한국어 텍스트。",
    "emoji 👋🏽 family 👨‍👩‍👧 flags 🇫🇷🇩🇪 ❤️",
    "numbers 12345 3.14159 007 2024-06-01 1,000,000 ½ ² Ⅻ",
    "tabs\tand\t\ttabs, spaces    and    runs",
    "Ελληνικά русский текст עברית العربية नमस्ते",
    "I'll don't we've they're it's he'd I'm O'Neil 'quoted' ''",
    "Romeo, Romeo! wherefore art thou Romeo?<|endoftext|>",
]

TEXTS = [
    "",
    "Hello world",
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n",
    "  leading spaces and trailing spaces   ",
    "runs  of   spaces    and\ttabs\t\t\tand\n\n\nnewlines\n",
    "\n\n\n",
    " ",
    "    ",
    "\t",
    "x \n y",
    "a  \nb",
    "digits 12345 1234567890 3.14159 007 42nd 1st",
    "I'll don't we've they're it's he'd I'm WE'LL IT'S O'Neil ''quoted'' '",
    "café naïve résumé e\u0301 Ærøskøbing",
    "日本語のテキスト 中文文本 한국어",
    "emoji 👋🏽 👨‍👩‍👧 🇫🇷 ❤️ 🙂🙂🙂",
    "नमस्ते العربية עברית русский Ελληνικά",
    "½ ² Ⅻ ٣٤٥ ４５６",
    "nbsp\u00a0here, ideographic\u3000space, nel\u0085line, mvs\u180esep, ls\u2028ps\u2029end",
    "windows\r\nline\r\nendings\r\n",
    "end of text<|endoftext|>start of text",
    "<|endoftext|><|endoftext|>",
    "<|endoftext|> spaced <|endoftext|>",
    "a [MASK] b   [MASK]c",
    "x<sep>   y <sep>z",
    "Romeo, Romeo! wherefore art thou Romeo? Romeos",
    # single_word: is the next character a word character as Rust's regex \w has it (marks and
    # joiners are, unlike PCRE2's \w)?
    ", Romeo\u0301 , Romeo\u200d , Romeo_ , Romeo\u00bd , Romeo\u216b , Romeo\u0663",
    "punctuation!!! ...??? (brackets) [x] {y} <z> ~~~ ___ ---",
    "mixed123abc 123abc abc123 _under_score_",
    "trailing newline\n",
    "\u00a0\u00a0x",
    "😀" * 5 + " " + "ab" * 20,
]


def train(corpus_path):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=600, min_frequency=2,
                                  special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train([corpus_path], trainer)
    tok.add_tokens([AddedToken("[MASK]", lstrip=True, rstrip=False, normalized=False),
                    AddedToken("<sep>", lstrip=False, rstrip=True, normalized=False),
                    AddedToken(" Romeo", single_word=True, normalized=True)])
    return tok


# Llama 3's pre-tokenization regex (its tokenizer.json's Split pattern).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def train_llama3_style(corpus_path):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=2,
                                  special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train([corpus_path], trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))])
    return tok


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(HERE, "..", "tests", "data", "golden", "bpe"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    with open(os.path.join(HERE, "..", "tests", "data", "text", "shakespeare_sample.txt"),
              encoding="utf-8") as f:
        corpus = f.read()
    corpus += "\n" + "\n".join(EXTRA_LINES) + "\n"
    corpus_path = os.path.join(args.out, "corpus.txt")
    with open(corpus_path, "w", encoding="utf-8", newline="") as f:
        f.write(corpus)

    tok = train(corpus_path)
    tok_path = os.path.join(args.out, "tokenizer.json")
    tok.save(tok_path, pretty=True)
    tok.model.save(args.out)  # vocab.json, merges.txt

    # The format of older tokenizers versions: merges as "a b" strings. Also add_prefix_space.
    with open(tok_path, encoding="utf-8") as f:
        legacy = json.load(f)
    legacy["model"]["merges"] = [" ".join(pair) for pair in legacy["model"]["merges"]]
    legacy["pre_tokenizer"]["add_prefix_space"] = True
    legacy_path = os.path.join(args.out, "tokenizer_legacy.json")
    with open(legacy_path, "w", encoding="utf-8") as f:
        json.dump(legacy, f, ensure_ascii=False, indent=1)

    # Reload every tokenizer from its files, as gradus will.
    from_json = Tokenizer.from_file(tok_path)
    legacy_tok = Tokenizer.from_file(legacy_path)
    vm = Tokenizer(models.BPE.from_file(os.path.join(args.out, "vocab.json"),
                                        os.path.join(args.out, "merges.txt")))
    vm.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    vm.decoder = decoders.ByteLevel()

    llama3_path = os.path.join(args.out, "tokenizer_llama3.json")
    train_llama3_style(corpus_path).save(llama3_path, pretty=True)
    llama3 = Tokenizer.from_file(llama3_path)

    expected = {"texts": TEXTS}
    for name, t in (("tokenizer.json", from_json), ("vocab_merges", vm),
                    ("tokenizer_legacy.json", legacy_tok), ("tokenizer_llama3.json", llama3)):
        ids = [t.encode(text, add_special_tokens=False).ids for text in TEXTS]
        for text, row in zip(TEXTS, ids):
            back = t.decode(row, skip_special_tokens=False)
            if name != "tokenizer_legacy.json" and "[MASK]" not in text and "<sep>" not in text:
                assert back == text, (name, text, back)
        expected[name] = ids
    expected["vocab_size"] = from_json.get_vocab_size(with_added_tokens=True)
    with open(os.path.join(args.out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=0)
        f.write("\n")

    ids = from_json.encode(corpus, add_special_tokens=False).ids
    assert max(ids) < 65536
    with open(os.path.join(args.out, "corpus.bin"), "wb") as f:
        f.write(struct.pack("<%dH" % len(ids), *ids))
    print(f"{args.out}: vocab {expected['vocab_size']}, {len(TEXTS)} texts, "
          f"corpus {len(corpus.encode())} bytes -> {len(ids)} tokens")


if __name__ == "__main__":
    main()
