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


def train_chars(kind, texts):
    """BPE over characters, not bytes (no ByteLevel): trained on ASCII text only, so other
    characters are unknown and take the byte-fallback tokens <0xXX> or the unk token, fused into
    one per run or not."""
    fallback = kind == "chars-fallback"
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=fallback, fuse_unk=kind == "chars-unk-fused"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated")
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    # half the byte tokens, so that some characters fall back and others end as unk
    specials = ["<unk>"] + (["<0x%02X>" % b for b in range(0, 256, 2)] if fallback else [])
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials, show_progress=False)
    # (no NUL: zoe's JSON reader cannot hold a vocabulary key "\u0000", and refuses one)
    tok.train_from_iterator([t for t in texts if t.isascii() and "\x00" not in t], trainer)
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
    for kind in ("chars-fallback", "chars-unk-fused", "chars-unk"):
        tok = train_chars(kind, train_texts)
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
    pre-tokenizer's, for the GPT-2, Llama-3 and Qwen2 patterns (tables and matcher alike).
    Context A puts each character after an apostrophe, a space, itself and before a letter and a
    line break; B between digits, after a tab, after 'l, after two spaces and before CRLF."""
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    contexts = {"A": "'{0}e {0}{0}a\n", "B": "1{0}2\t{0}'l{0}  {0}\r\n x"}
    # (pattern, context, every stride-th block of 4096 code points from block first): every code
    # point once per pattern in context A, where each one's class in the tables shows; context B
    # (digits, whitespace runs) on a quarter of them for Llama-3 and another quarter for Qwen2. All
    # of B at Llama-3 took a third of the test's 10 minutes on a busy 2-core machine.
    plan = [("gpt2", "A", 1, 0), ("llama3", "A", 1, 0), ("llama3", "B", 4, 0), ("qwen2", "B", 4, 2)]
    for kind, ctx, stride, first in plan:
        docs = []
        for k in range(4096 * first, len(cps), 4096 * stride):
            docs.append("".join(contexts[ctx].format(chr(c)) for c in cps[k:k + 4096]).encode())
        docs_path = os.path.join(work, "code-points-%s-%s.bin" % (kind, ctx))
        write_docs(docs_path, docs)
        if kind == "gpt2":
            pretok = pre_tokenizers.ByteLevel(add_prefix_space=False)
        else:
            pretok = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(LLAMA3 if kind == "llama3" else QWEN2), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
        tok = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
        tok.pre_tokenizer = pretok
        tok.decoder = decoders.ByteLevel()
        path = os.path.join(work, "pieces-%s.json" % kind)
        tok.save(path)
        got = probe(probe_bin, "pieces", path, docs_path)
        if got is None:
            continue
        bad = 0
        for i, d in enumerate(docs):
            raw = d.decode()
            want = [len(p) for p, _ in pretok.pre_tokenize_str(raw)]
            if got[i] == want:
                continue
            bad += 1
            j = next((j for j, (a, b) in enumerate(zip(got[i], want)) if a != b), min(len(got[i]), len(want)))
            at = sum(want[:j])
            fail("%s %s: document %d: piece %d differs near byte %d: zoe %s, tokenizers %s" % (
                kind, ctx, i, j, at, got[i][j:j + 4], want[j:j + 4]))
        print("%s, context %s: %d documents over %s code point, %d differ" % (
            kind, ctx, len(docs), "every" if stride == 1 else "every %dth block of 4096 from block %d" % (stride, first),
            bad))


def read_dataset(prefix):
    """Documents of a Megatron .bin/.idx pair as lists of ids, and the dtype code."""
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    assert idx[:9] == b"MMIDIDX\x00\x00", "magic"
    dtype = idx[17]
    seqs, docs = struct.unpack_from("<QQ", idx, 18)
    sizes = struct.unpack_from("<%di" % seqs, idx, 34)
    size = {8: 2, 4: 4}[dtype]
    with open(prefix + ".bin", "rb") as f:
        data = f.read()
    out, at = [], 0
    for n in sizes:
        out.append(list(struct.unpack_from("<%d%s" % (n, "H" if size == 2 else "i"), data, at)))
        at += n * size
    return out, dtype


def run_zoe_data(zoe_data, args):
    return subprocess.run([zoe_data] + args, capture_output=True)


def check_zoe_data(zoe_data, work, corpus_path):
    """zoe-data end to end: JSON lines and text, --append-eod, any thread count, against
    tokenizers' encode_batch of the same documents plus the EOD id."""
    made, docs = tokenizers_for(work, corpus_path)
    texts = [as_text(d) for d in docs if d.strip() and b"\x00" not in d]  # NUL: see bad_input
    jsonl = os.path.join(work, "docs.jsonl")
    with open(jsonl, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "content": t}, ensure_ascii=i % 2 == 0) + "\n")
            if i % 50 == 0:
                f.write("\n")  # blank lines are skipped
    # text input: documents without newlines survive the blank-line split byte for byte
    plain = [d for d in docs if b"\n" not in d and b"\r" not in d and d.strip()]
    txt = os.path.join(work, "docs.txt")
    with open(txt, "wb") as f:
        f.write(b"\n\n".join(plain) + b"\n")
    for kind in ("gpt2", "llama3"):
        tok, path = made[kind]
        eod_name = "<|endoftext|>" if kind == "gpt2" else "<|end_of_text|>"
        eod = tok.token_to_id(eod_name)
        cases = [("jsonl", jsonl, ["--json-key", "content"], [t for t in texts]),
                 ("text", txt, [], [as_text(d) for d in plain])]
        for name, src, extra, want_texts in cases:
            want = [e.ids + [eod] for e in tok.encode_batch(want_texts, add_special_tokens=False)]
            bins = []
            for threads in ("1", "2"):
                prefix = os.path.join(work, "%s-%s-%s" % (kind, name, threads))
                r = run_zoe_data(zoe_data, ["--tokenizer", path, "--input", src, "--output-prefix", prefix,
                                            "--append-eod", "--threads", threads] + extra)
                if r.returncode != 0:
                    fail("zoe-data %s %s: exit %d: %s" % (kind, name, r.returncode, r.stderr.decode()))
                    continue
                got, dtype = read_dataset(prefix)
                if dtype != 8:
                    fail("%s %s: dtype code %d, want 8 (uint16 for a vocabulary of %d)" % (kind, name, dtype, tok.get_vocab_size()))
                if len(got) != len(want):
                    fail("%s %s: %d documents, want %d" % (kind, name, len(got), len(want)))
                bad = [i for i in range(min(len(got), len(want))) if got[i] != want[i]]
                for i in bad[:3]:
                    fail("%s %s: document %d: zoe %s, tokenizers %s" % (kind, name, i, got[i][:20], want[i][:20]))
                print("zoe-data %s %s threads %s: %d documents, %d differ" % (kind, name, threads, len(got), len(bad)))
                bins.append(open(prefix + ".bin", "rb").read())
            if len(bins) == 2 and bins[0] != bins[1]:
                fail("%s %s: output differs between 1 and 2 threads" % (kind, name))
    # empty documents: Megatron's preprocess_data gives one no tokens and no EOD, and its
    # IndexedDatasetBuilder records it as a document of no sequences (document_indices repeats
    # the count). The expected .bin and .idx are built here from that layout: byte for byte.
    tok, path = made["gpt2"]
    eod = tok.token_to_id("<|endoftext|>")
    texts_e = ["first document", "", "third one", "", ""]
    src = os.path.join(work, "empty-docs.jsonl")
    with open(src, "w") as f:
        for t in texts_e:
            f.write(json.dumps({"text": t}) + "\n")
    prefix = os.path.join(work, "empty-docs")
    r = run_zoe_data(zoe_data, ["--tokenizer", path, "--input", src, "--output-prefix", prefix, "--append-eod"])
    docs_ids = [tok.encode(t, add_special_tokens=False).ids for t in texts_e]
    docs_ids = [ids + [eod] if ids else [] for ids in docs_ids]
    sizes = [len(ids) for ids in docs_ids if ids]
    doc_index = [0]
    for ids in docs_ids:
        doc_index.append(doc_index[-1] + (1 if ids else 0))
    pointers, at = [], 0
    for n in sizes:
        pointers.append(at)
        at += 2 * n
    want_idx = (b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8)
                + struct.pack("<Q", len(sizes)) + struct.pack("<Q", len(doc_index))
                + struct.pack("<%di" % len(sizes), *sizes) + struct.pack("<%dq" % len(pointers), *pointers)
                + struct.pack("<%dq" % len(doc_index), *doc_index))
    want_bin = b"".join(struct.pack("<%dH" % len(ids), *ids) for ids in docs_ids)
    if r.returncode != 0:
        fail("empty documents: exit %d: %s" % (r.returncode, r.stderr.decode()))
    else:
        got_idx, got_bin = open(prefix + ".idx", "rb").read(), open(prefix + ".bin", "rb").read()
        if got_idx != want_idx or got_bin != want_bin:
            fail("empty documents: .idx %s, .bin %s the Megatron layout (idx %d vs %d bytes)"
                 % ("equals" if got_idx == want_idx else "differs from", "equals" if got_bin == want_bin else "differs from",
                    len(got_idx), len(want_idx)))
        print("empty documents: .idx and .bin as Megatron's builder writes them (%d documents, %d sequences)"
              % (len(texts_e), len(sizes)))
    # a key given twice: json.loads keeps the last value, and so does zoe-data
    tok, path = made["gpt2"]
    dup = os.path.join(work, "dup.jsonl")
    line = '{"text": "the first words", "id": 1, "text": "the second words"}'
    with open(dup, "w") as f:
        f.write(line + "\n")
    r = run_zoe_data(zoe_data, ["--tokenizer", path, "--input", dup, "--output-prefix", dup + "-out"])
    got, _ = read_dataset(dup + "-out") if r.returncode == 0 else ([], 0)
    want = [tok.encode(json.loads(line)["text"], add_special_tokens=False).ids]
    if r.returncode != 0 or got != want:
        fail("duplicated key: exit %d, zoe %s, json.loads' last value %s" % (r.returncode, got, want))
    # int32 on request, and auto picks int32 when ids pass 65535
    tok, path = made["gpt2"]
    prefix = os.path.join(work, "int32")
    r = run_zoe_data(zoe_data, ["--tokenizer", path, "--input", txt, "--output-prefix", prefix, "--dtype", "int32"])
    got, dtype = read_dataset(prefix) if r.returncode == 0 else ([], 0)
    want = [e.ids for e in tok.encode_batch([as_text(d) for d in plain], add_special_tokens=False)]
    if r.returncode != 0 or dtype != 4 or got != want:
        fail("--dtype int32 without --append-eod: exit %d, dtype %d, equal %s" % (r.returncode, dtype, got == want))
    big = json.loads(open(path).read())
    big["added_tokens"].append({"id": 70000, "content": "<big>", "single_word": False, "lstrip": False,
                                "rstrip": False, "normalized": False, "special": True})
    big_path = os.path.join(work, "big.json")
    json.dump(big, open(big_path, "w"))
    r = run_zoe_data(zoe_data, ["--tokenizer", big_path, "--input", txt, "--output-prefix", prefix + "-big"])
    got, dtype = read_dataset(prefix + "-big") if r.returncode == 0 else ([], 0)
    if r.returncode != 0 or dtype != 4 or got != want:
        fail("auto dtype for vocabulary 70001: exit %d, dtype %d (want 4 = int32), equal %s" % (r.returncode, dtype, got == want))


def check_bad_input(zoe_data, work, corpus_path):
    """Broken tokenizer.json files and JSON lines: exit 2, one line naming the problem, no output."""
    made, _ = tokenizers_for(work, corpus_path)
    good = json.loads(open(made["gpt2"][1]).read())
    raw = open(made["gpt2"][1]).read()
    txt = os.path.join(work, "in.txt")
    with open(txt, "w") as f:
        f.write("some text\n\nmore text\n")

    def variant(name, edit):
        data = json.loads(json.dumps(good))
        edit(data)
        path = os.path.join(work, name + ".json")
        json.dump(data, open(path, "w"))
        return path

    def setitem(path, value):
        def edit(d):
            obj = d
            for k in path[:-1]:
                obj = obj[k]
            obj[path[-1]] = value
        return edit

    truncated = os.path.join(work, "truncated.json")
    open(truncated, "w").write(raw[: len(raw) // 2])
    first_merge = good["model"]["merges"][0]
    cases = [
        ("truncated", truncated, [], "not valid JSON"),
        ("empty file", os.path.join(work, "empty.json"), [], "not valid JSON"),
        ("array root", os.path.join(work, "array.json"), [], "is not a JSON object"),
        ("no model", variant("nomodel", lambda d: d.pop("model")), [], 'no "model" object'),
        ("unknown model", variant("wordpiece", setitem(["model", "type"], "WordPiece")), [], 'model.type "WordPiece" is not supported'),
        ("no model type", variant("notype", lambda d: d["model"].pop("type")), [], "model.type is missing"),
        ("vocab id string", variant("vocabstr", lambda d: d["model"]["vocab"].update({"a": "x"})), [], 'model.vocab["a"] must be an integer id'),
        ("merges not array", variant("mergesobj", setitem(["model", "merges"], {"a": 1})), [], "model.merges must be an array"),
        ("merge number", variant("mergenum", lambda d: d["model"]["merges"].insert(0, 7)), [], "model.merges[0] must be"),
        ("merge three parts", variant("merge3", lambda d: d["model"]["merges"].insert(0, "a b c")), [], "model.merges[0]"),
        ("merge unknown token", variant("mergeunk", lambda d: d["model"]["merges"].insert(0, ["zzzq", first_merge[1]])), [], "is not in model.vocab"),
        ("normalizer", variant("nfc", setitem(["normalizer"], {"type": "NFC"})), [], 'normalizer "NFC" is not supported'),
        ("unknown regex", variant("regex", setitem(["pre_tokenizer"], {"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated", "invert": False})), [], "is not one zoe implements"),
        ("whitespace pretok", variant("ws", setitem(["pre_tokenizer"], {"type": "Whitespace"})), [], 'type "Whitespace" is not supported'),
        ("bool as string", variant("boolstr", setitem(["pre_tokenizer", "add_prefix_space"], "yes")), [], "add_prefix_space must be true or false"),
        ("added not array", variant("addedobj", setitem(["added_tokens"], {"x": 1})), [], "added_tokens must be an array"),
        ("added without id", variant("addedid", lambda d: d["added_tokens"][0].pop("id")), [], "added_tokens[0] needs an integer"),
        ("nul key", variant("nulkey", lambda d: d["model"]["vocab"].update({"\x00": 99999})), [], "model.vocab has an empty key (id 99999)"),
        ("dropout", variant("dropout", setitem(["model", "dropout"], 0.1)), [], "model.dropout must be null"),
        ("missing file", os.path.join(work, "no-such.json"), [], "cannot open tokenizer"),
        ("unknown eod", made["gpt2"][1], ["--eod-token", "<nope>"], 'end-of-document token "<nope>"'),
        ("no eod", variant("noeod", setitem(["added_tokens"], [])), [], "has no end-of-document token"),
        ("bad dtype", made["qwen2"][1], ["--dtype", "uint8"], "--dtype 'uint8' unknown"),
    ]
    open(os.path.join(work, "empty.json"), "w").close()
    open(os.path.join(work, "array.json"), "w").write("[1, 2]")
    for name, path, extra, want in cases:
        prefix = os.path.join(work, "out-" + name.replace(" ", "-"))
        r = run_zoe_data(zoe_data, ["--tokenizer", path, "--input", txt, "--output-prefix", prefix, "--append-eod"] + extra)
        err = r.stderr.decode()
        lines = err.strip().split("\n")
        if r.returncode != 2 or len(lines) != 1 or (want and want not in err) or not err.startswith("zoe-data: "):
            fail("%s: exit %d, stderr %r (want exit 2 and one line with %r)" % (name, r.returncode, err, want))
        if os.path.exists(prefix + ".bin") or os.path.exists(prefix + ".idx"):
            fail("%s: output left behind" % name)
        print("%-20s exit %d: %s" % (name, r.returncode, err.strip()))
    bad_jsonl = os.path.join(work, "bad.jsonl")
    with open(bad_jsonl, "w") as f:
        f.write('{"text": "ok"}\n\n{"text": "fine"\n')
    missing_key = os.path.join(work, "missing.jsonl")
    with open(missing_key, "w") as f:
        f.write('{"text": "ok"}\n{"body": "no text key"}\n')
    nul = os.path.join(work, "nul.jsonl")
    with open(nul, "w") as f:
        f.write('{"text": "ok"}\n{"text": "a\\u0000b"}\n')
    # what json.loads (Megatron's preprocess_data) refuses, zoe-data refuses, naming the line
    strict_cases = (("raw tab", b'{"text": "ok"}\n{"text": "a\tb"}\n', "line 2: a raw control character in a string (0x09"),
                    ("raw nul", b'{"text": "a\x00b"}\n', "line 1: a raw control character in a string (0x00"),
                    ("trailing text", b'{"text": "ok"} and more\n', "line 1: text after the JSON object"))
    strict = []
    for name, data, want in strict_cases:
        path = os.path.join(work, name.replace(" ", "-") + ".jsonl")
        with open(path, "wb") as f:
            f.write(data)
        last = data.rstrip(b"\n").split(b"\n")[-1].decode("latin-1")
        try:
            json.loads(last)
            fail("%s: json.loads accepts %r, so zoe-data should too" % (name, last))
        except ValueError:
            pass
        strict.append((name, path, want))
    for name, path, want in (("bad json line", bad_jsonl, "line 3: not valid JSON"),
                             ("escaped nul", nul, "line 2: \\u0000 in a string"),
                             ("missing key", missing_key, 'line 2: no string under key "text"')) + tuple(strict):
        prefix = os.path.join(work, "out-" + name.replace(" ", "-"))
        r = run_zoe_data(zoe_data, ["--tokenizer", made["gpt2"][1], "--input", path, "--output-prefix", prefix])
        err = r.stderr.decode()
        if r.returncode != 2 or want not in err or len(err.strip().split("\n")) != 1:
            fail("%s: exit %d, stderr %r (want exit 2 and %r)" % (name, r.returncode, err, want))
        if os.path.exists(prefix + ".bin") or os.path.exists(prefix + ".idx"):
            fail("%s: output left behind" % name)
        print("%-20s exit %d: %s" % (name, r.returncode, err.strip()))


def main():
    mode, probe_bin, zoe_data, work, corpus = sys.argv[1:6]
    os.makedirs(work, exist_ok=True)
    {"exact": lambda: check_exact(probe_bin, work, corpus),
     "pieces": lambda: check_pieces(probe_bin, work, corpus),
     "zoe_data": lambda: check_zoe_data(zoe_data, work, corpus),
     "bad_input": lambda: check_bad_input(zoe_data, work, corpus)}[mode]()
    print("%d failures" % len(FAILURES))
    sys.exit(min(len(FAILURES), 100))


if __name__ == "__main__":
    main()
