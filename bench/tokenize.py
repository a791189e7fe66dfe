#!/usr/bin/env python3
"""The tokenize benchmark (bench/tokenize.sh): zoe-data vs tokenizers' encode_batch.

usage: tokenize.py ZOE_DATA CORPUS [ROUNDS] [MB]

The text: the demo corpus's paragraphs with words shuffled between them and a share of
non-English paragraphs (CJK, Cyrillic, emoji, digits), MB megabytes of it as JSON lines. Each
round runs zoe-data --threads T on the file and tokenizers' encode_batch and encode_batch_fast
on the same documents (the faster counts);
one JSON object per measurement, then a summary with the median ratio per tokenizer.
"""
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def make_text(corpus, mb, rng):
    paras = [p for p in open(corpus, encoding="utf-8").read().split("\n\n") if p.strip()]
    words = " ".join(paras).split()
    extra = ["日本語のテキストと中文文本", "Привет мир, как дела", "emoji 😀 👍🏽 ❤️", "3.14159 2718 1,000,000",
             "don't WE'LL they've", "ελληνικά κείμενα", "עברית ועוד"]
    docs, size = [], 0
    while size < mb * 1e6:
        n = rng.randint(20, 400)
        doc = " ".join(rng.choice(words) if rng.random() > 0.05 else rng.choice(extra) for _ in range(n))
        docs.append(doc)
        size += len(doc.encode())
    return docs


def train(kind, texts):
    if kind == "gpt2":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        specials = ["<|endoftext|>"]
    else:
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=8000, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return tok


def main():
    zoe_data, corpus = sys.argv[1:3]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    mb = float(sys.argv[4]) if len(sys.argv) > 4 else 8
    threads = os.environ.get("OMP_NUM_THREADS", "2")
    rng = random.Random(7)
    docs = make_text(corpus, mb, rng)
    nbytes = sum(len(d.encode()) for d in docs)
    work = tempfile.mkdtemp(prefix="zoe_bench_tokenize_")
    jsonl = os.path.join(work, "text.jsonl")
    with open(jsonl, "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    ratios = {}
    for kind in ("gpt2", "llama3"):
        tok = train(kind, docs[: max(1, len(docs) // 10)])
        path = os.path.join(work, kind + ".json")
        tok.save(path)
        for r in range(rounds):
            t0 = time.perf_counter()
            out = subprocess.run([zoe_data, "--tokenizer", path, "--input", jsonl, "--output-prefix",
                                  os.path.join(work, "out"), "--append-eod", "--threads", threads],
                                 capture_output=True)
            t_zoe = time.perf_counter() - t0
            if out.returncode != 0:
                sys.exit("zoe-data failed: " + out.stderr.decode())
            # the faster of encode_batch and encode_batch_fast (no offsets), as the baseline
            t_tok = float("inf")
            for name in ("encode_batch", "encode_batch_fast"):
                if hasattr(tok, name):
                    t0 = time.perf_counter()
                    getattr(tok, name)(docs, add_special_tokens=False)
                    t_tok = min(t_tok, time.perf_counter() - t0)
            ratio = t_tok / t_zoe
            ratios.setdefault(kind, []).append(ratio)
            print(json.dumps({"bench": "tokenize", "tokenizer": kind, "round": r, "threads": int(threads),
                              "mb": round(nbytes / 1e6, 2), "zoe_mb_s": round(nbytes / 1e6 / t_zoe, 2),
                              "tokenizers_mb_s": round(nbytes / 1e6 / t_tok, 2), "ratio": round(ratio, 3)}))
            sys.stdout.flush()
    summary = {"bench": "tokenize", "summary": True, "threads": int(threads), "mb": round(nbytes / 1e6, 2),
               "goal_ratio": 1.0}
    for kind, rs in ratios.items():
        summary["median_ratio_" + kind] = round(statistics.median(rs), 3)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
