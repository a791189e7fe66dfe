#!/usr/bin/env python3
"""zoe's BPE against the `tokenizers` package, token for token.

usage: test_tokenizer.py exact|pieces|bad_input|zoe_data PROBE ZOE_DATA WORKDIR CORPUS

The tokenizers are trained here by `tokenizers` itself (no download) on the demo corpus plus a
corpus of Unicode edge cases: a GPT-2-style one (ByteLevel pre-tokenizer with its regex) and a
Llama-3-style one (Split with the Llama-3 pattern, then ByteLevel without regex, ignore_merges),
and variants (prefix space, the Qwen2 pattern, added tokens with lstrip/rstrip, merges written
as "a b" strings). Invalid UTF-8: zoe reads raw bytes and replaces each maximal invalid subpart
with U+FFFD; `tokenizers` only takes str, so the test hands it bytes.decode("utf-8", "replace"),
which is the same text. Every mismatch is printed; the exit code is the number of failures.
"""
import json
import os
import random
import struct
import subprocess
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")

FAILURES = []


def fail(msg):
    FAILURES.append(msg)
    if len(FAILURES) <= 20:
        print("FAIL:", msg)


# ---- the corpus ----

SAMPLES = [
    "Hello world", " leading space", "trailing space ", "  two leading", "tabs\tand\t\ttabs",
    "line\nbreaks\n\nand\r\nCRLF\r\n", "   \n  \n\t ", "don't I'll we've they're she's I'd I'm",
    "DON'T WE'VE SHE'S", "'s 't 're 've 'm 'll 'd", "'ſ 'S 'T 'Re 'vE 'LL", "'''quotes'''",
    "numbers 1 12 123 1234 12345 3.14159 1,000,000", "٣٤٥ ১২৩ ⅫⅣ ²³ ①②", "e\u0301 a\u0308 n\u0303 "
    "combining\u0300\u0301\u0302", "emoji 😀😃 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️", "日本語のテキスト、中文文本。한국어 텍스트",
    "mixed: abcабвαβγ אבג عربي हिन्दी ไทย", "nbsp\u00a0here\u2003em\u3000ideographic\u2028ls\u2029ps",
    "nel\u0085here\u000bvt\u000cff", "zero\u200bwidth\u200djoiner\ufeffbom", "symbols !@#$%^&*()_+-=[]{}|;:,.<>?/~`",
    "  !!  ??  ..  ", "a\u0000nul", "<|endoftext|> inside text<|endoftext|>x", "<|begin_of_text|>hi<|end_of_text|>",
    "email me@example.com https://example.org/path?q=1&r=2", "CamelCaseWordsAndALLCAPS snake_case_words",
    "\u1c89\u1c8a new letters of Unicode 16", "ſtraße STRASSE ß ẞ", "x" * 300, " " * 50 + "end", "\n" * 20,
    "a'b'c'd", "1'2'3", "  'll", "\t\n \r\n x", "。、！？「」『』",
]


def edge_corpus(rng):
    docs = [s.encode() for s in SAMPLES]
    alphabet = ([chr(c) for c in range(0x20, 0x7f)] + list("\t\n\r \u00a0\u3000\u0085'") +
                list("éüñßøçĀąłðþ") + list("абвгдежзийΑΒΓαβγ") + list("日本語中文한국어") +
                ["\u0301", "\u0308", "\u200d", "😀", "👍", "\U0001f3fd", "①", "٣", "Ⅻ", "²", "ſ"])
    for _ in range(300):
        n = rng.randint(0, 80)
        docs.append("".join(rng.choice(alphabet) for _ in range(n)).encode())
    invalid = [b"\xff", b"\xc0\xaf", b"\xe2\x82", b"\xed\xa0\x80", b"\xf0\x9f\x98", b"\xf4\x90\x80\x80",
               b"\x80\x80", b"\xf5", b"\xe0\x80\xaf", b"\xc3"]
    for i in range(60):
        a = rng.choice(docs[:len(SAMPLES)])
        cut = rng.randint(0, len(a))
        docs.append(a[:cut] + rng.choice(invalid) + a[cut:] + (rng.choice(invalid) if i % 3 == 0 else b""))
    return docs


def as_text(doc):
    return doc.decode("utf-8", errors="replace")


# ---- the tokenizers ----

def train(kind, texts, vocab_size=1500):
    if kind in ("gpt2", "gpt2-prefix"):
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=kind == "gpt2-prefix")
        specials = ["<|endoftext|>"]
    else:
        tok = Tokenizer(models.BPE(ignore_merges=True))
        pattern = QWEN2 if kind == "qwen2" else LLAMA3
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    if kind == "llama3":
        from tokenizers import AddedToken
        tok.add_tokens([AddedToken("hello world", normalized=True), AddedToken("[MASK]", lstrip=True, rstrip=True)])
        tok.add_special_tokens([AddedToken("<tool>", lstrip=True, special=True)])
    return tok


def save(tok, path, string_merges=False):
    data = json.loads(tok.to_str())
    if string_merges:
        data["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in data["model"]["merges"]]
    with open(path, "w") as f:
        json.dump(data, f, ensure_ascii=False)
    return path


def write_docs(path, docs):
    with open(path, "wb") as f:
        for d in docs:
            f.write(struct.pack("<I", len(d)) + d)


def probe(probe_bin, mode, tok_path, data_path):
    out = subprocess.run([probe_bin, mode, tok_path, data_path], capture_output=True)
    if out.returncode != 0:
        fail("%s %s: exit %d: %s" % (mode, tok_path, out.returncode, out.stderr.decode()))
        return None
    return [[int(x) for x in line.split()] if mode != "decode" else line
            for line in out.stdout.decode().split("\n")[:-1]]


def load_corpus(path):
    with open(path, "rb") as f:
        return [p for p in f.read().split(b"\n\n") if p.strip()]


def tokenizers_for(work, corpus_path):
    rng = random.Random(20261201)
    docs = edge_corpus(rng)
    train_texts = [as_text(d) for d in load_corpus(corpus_path)[:400]] + [as_text(d) for d in docs]
    made = {}
    for kind in ("gpt2", "gpt2-prefix", "llama3", "qwen2"):
        tok = train(kind, train_texts)
        made[kind] = (tok, save(tok, os.path.join(work, kind + ".json")))
    tok = made["gpt2"][0]
    made["gpt2-string-merges"] = (tok, save(tok, os.path.join(work, "gpt2-string-merges.json"), True))
    return made, docs + load_corpus(corpus_path)[:200]


def check_exact(probe_bin, work, corpus_path):
    made, docs = tokenizers_for(work, corpus_path)
    docs_path = os.path.join(work, "docs.bin")
    write_docs(docs_path, docs)
    texts = [as_text(d) for d in docs]
    for kind, (tok, path) in made.items():
        want = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
        got = probe(probe_bin, "encode", path, docs_path)
        if got is None:
            continue
        bad = [i for i in range(len(docs)) if got[i] != want[i]]
        for i in bad[:5]:
            fail("%s: document %d %r: zoe %s, tokenizers %s" % (kind, i, docs[i][:80], got[i][:30], want[i][:30]))
        print("%s: %d documents, %d tokens, %d differ" % (kind, len(docs), sum(map(len, want)), len(bad)))
        ids_path = os.path.join(work, kind + ".ids")
        with open(ids_path, "w") as f:
            f.write("".join(" ".join(map(str, w)) + "\n" for w in want))
        decoded = probe(probe_bin, "decode", path, ids_path)
        if decoded is None:
            continue
        ref = tok.decode_batch(want, skip_special_tokens=True)
        bad = [i for i in range(len(docs)) if bytes.fromhex(decoded[i]).decode("utf-8", "replace") != ref[i]]
        for i in bad[:5]:
            fail("%s: decode of document %d: zoe %r, tokenizers %r" % (kind, i, bytes.fromhex(decoded[i])[:60], ref[i][:60]))
        print("%s: decode: %d differ" % (kind, len(bad)))


def check_pieces(probe_bin, work, corpus_path):
    """Every code point in the contexts the patterns care about: zoe's pieces equal the
    pre-tokenizer's, for the GPT-2, Llama-3 and Qwen2 patterns (tables and matcher alike)."""
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    contexts = ["'{0}e {0}", " {0}{0}a\n", "{0}1\t{0}\r\n x", "a{0}b {0}  {0}", "1{0}2 {0}'l{0}\n"]
    docs = []
    for ctx in contexts:
        for k in range(0, len(cps), 4096):
            docs.append("".join(ctx.format(chr(c)) for c in cps[k:k + 4096]).encode("utf-8", "surrogatepass"))
    docs_path = os.path.join(work, "all-code-points.bin")
    write_docs(docs_path, docs)
    for kind, pretok in (("gpt2", pre_tokenizers.ByteLevel(add_prefix_space=False)),
                         ("llama3", pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated")),
                         ("qwen2", pre_tokenizers.Split(Regex(QWEN2), behavior="isolated"))):
        alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
        tok = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
        tok.pre_tokenizer = pretok if kind == "gpt2" else pre_tokenizers.Sequence(
            [pretok, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        path = os.path.join(work, "pieces-%s.json" % kind)
        tok.save(path)
        got = probe(probe_bin, "pieces", path, docs_path)
        if got is None:
            continue
        bad = 0
        for i, d in enumerate(docs):
            want = [len(p) for p, _ in tok.pre_tokenizer.pre_tokenize_str(d.decode())]
            if got[i] != want:
                bad += 1
                j = next(j for j in range(min(len(got[i]), len(want))) if got[i][j] != want[j]) if any(
                    a != b for a, b in zip(got[i], want)) else min(len(got[i]), len(want))
                at = sum(want[:j])
                raw = d.decode()
                fail("%s: document %d: piece %d differs near %r: zoe %s, tokenizers %s" % (
                    kind, i, j, raw[max(0, at - 10):at + 10], got[i][j:j + 4], want[j:j + 4]))
        print("%s: %d documents over every code point, %d differ" % (kind, len(docs), bad))


def main():
    mode, probe_bin, zoe_data, work, corpus = sys.argv[1:6]
    os.makedirs(work, exist_ok=True)
    {"exact": lambda: check_exact(probe_bin, work, corpus),
     "pieces": lambda: check_pieces(probe_bin, work, corpus)}[mode]()
    print("%d failures" % len(FAILURES))
    sys.exit(min(len(FAILURES), 100))


if __name__ == "__main__":
    main()
