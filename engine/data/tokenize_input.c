/* Tokenizing input into a dataset writer: documents from text (split as zoe_doc_split says)
 * or from JSON lines (one object per line, the document under a key), gathered in batches,
 * encoded by an OpenMP team with one encoder (scratch and word cache) per thread, and appended
 * in input order, so the output is the same at any thread count.
 *
 * Explained in docs/data.md, "A tokenizer.json and JSON lines". */
#include <cjson/cJSON.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/data/data_impl.h"
#include "runtime/error.h"

enum {
    BATCH_BYTES = 4 << 20, /* input bytes per batch */
    BATCH_DOCS = 16384
};

typedef struct doc_ref {
    const char *text; /* NULL until a batch of JSON documents is complete: then at owned */
    size_t owned;     /* JSON: offset of the unescaped text in the batch's buffer */
    size_t len;
    size_t input_end; /* input offset after this document, for progress */
} doc_ref;

/* One thread's output: the tokens of its documents back to back. */
typedef struct thread_out {
    int32_t *tokens;
    size_t len, cap;
    zoe_encoder *enc;
} thread_out;

typedef struct batch {
    doc_ref *docs;
    size_t n, cap;
    char *owned; /* JSON strings, unescaped */
    size_t owned_len, owned_cap;
    /* per document: which thread, where in its output, how many tokens */
    int *thread;
    size_t *offset, *count;
    thread_out *out;
    int threads;
} batch;

static void batch_free(batch *b) {
    free(b->docs);
    free(b->owned);
    free(b->thread);
    free(b->offset);
    free(b->count);
    for (int t = 0; b->out && t < b->threads; t++) {
        free(b->out[t].tokens);
        zoe_encoder_destroy(b->out[t].enc);
    }
    free(b->out);
}

static zoe_status batch_init(batch *b, const zoe_tokenizer *tok, int threads) {
    memset(b, 0, sizeof *b);
    b->threads = threads;
    b->cap = BATCH_DOCS;
    b->docs = malloc(b->cap * sizeof *b->docs);
    b->thread = malloc(b->cap * sizeof *b->thread);
    b->offset = malloc(b->cap * sizeof *b->offset);
    b->count = malloc(b->cap * sizeof *b->count);
    b->out = calloc((size_t)threads, sizeof *b->out);
    if (!b->docs || !b->thread || !b->offset || !b->count || !b->out)
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "tokenizing: batch of %d documents", BATCH_DOCS);
    for (int t = 0; t < threads; t++) ZOE_TRY(zoe_encoder_create(tok, &b->out[t].enc));
    return ZOE_OK;
}

/* Encodes document i into thread t's output. */
static zoe_status encode_one(const zoe_tokenizer *tok, batch *b, size_t i, int t, int eod,
                             size_t max_bytes) {
    thread_out *o = &b->out[t];
    if (b->docs[i].len > max_bytes)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%zu bytes, more than the %zu a document may have (the .idx counts a "
                        "document's tokens in int32); split it",
                        b->docs[i].len, max_bytes);
    /* Room for the most tokens the .idx can count, however many the tokenizer's bound allows
     * (up to 3 per byte): a longer encoding fails here, naming the document. */
    size_t need = zoe_tokenizer_max_tokens(tok, b->docs[i].len);
    if (need > (size_t)INT32_MAX - 1) need = (size_t)INT32_MAX - 1;
    need += 1;
    if (o->len + need > o->cap) {
        size_t cap = o->cap ? o->cap : 1 << 16;
        while (cap < o->len + need) cap *= 2;
        int32_t *tokens = realloc(o->tokens, cap * sizeof *tokens);
        if (!tokens) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "tokenizing: %zu tokens", cap);
        o->tokens = tokens;
        o->cap = cap;
    }
    size_t n = 0;
    ZOE_TRY(
        zoe_encoder_encode(o->enc, b->docs[i].text, b->docs[i].len, o->tokens + o->len, need, &n));
    /* An empty document gets no end-of-document token either, as in Megatron's preprocess_data
     * (which appends it only to a document with tokens). */
    if (eod >= 0 && n > 0) o->tokens[o->len + n++] = eod;
    b->thread[i] = t;
    b->offset[i] = o->len;
    b->count[i] = n;
    o->len += n;
    return ZOE_OK;
}

static zoe_status flush_batch(zoe_dataset_writer *w, const zoe_tokenizer *tok, batch *b,
                              const zoe_input_options *opt, int64_t docs_before) {
    int eod = opt->append_eod ? zoe_tokenizer_eod(tok) : -1;
    size_t max_bytes = opt->max_document_bytes ? opt->max_document_bytes : ZOE_MAX_DOCUMENT_BYTES;
    zoe_status first = ZOE_OK;
    char message[512] = "";
    size_t failed_at = SIZE_MAX;
    for (int t = 0; t < b->threads; t++) b->out[t].len = 0;
#pragma omp parallel num_threads(b->threads)
    {
        int t = omp_get_thread_num();
#pragma omp for schedule(dynamic, 16)
        for (size_t i = 0; i < b->n; i++) {
            zoe_status st = encode_one(tok, b, i, t, eod, max_bytes);
            if (st != ZOE_OK) {
#pragma omp critical(zoe_tokenize_error)
                if (i < failed_at) {
                    failed_at = i, first = st;
                    snprintf(message, sizeof message, "%s", zoe_last_error());
                }
            }
        }
    }
    if (first != ZOE_OK)
        return zoe_fail(first, "document %lld: %s", (long long)(docs_before + (int64_t)failed_at),
                        message);
    for (size_t i = 0; i < b->n; i++)
        ZOE_TRY(zoe_dataset_writer_add_document(w, b->out[b->thread[i]].tokens + b->offset[i],
                                                (int64_t)b->count[i]));
    return ZOE_OK;
}

/* An escaped NUL anywhere in the line (a key's or another value's too: rare enough). */
static int has_escaped_nul(const char *line, size_t len) {
    for (size_t i = 0; i + 6 <= len; i++)
        if (line[i] == '\\') {
            if (line[i + 1] == 'u' && memcmp(line + i + 2, "0000", 4) == 0) return 1;
            i++; /* skip the escaped character, so \\u0000 is not read as an escape */
        }
    return 0;
}

static int blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!memchr(" \t\r\n\f\v", s[i], 6)) return 0;
    return 1;
}

/* What cJSON accepts and Python's json.loads (which Megatron's preprocess_data reads with)
 * refuses, or reads otherwise: a raw control character (a NUL byte included) inside a string,
 * a NUL byte anywhere. NULL when the line has none. */
static const char *json_strictness_problem(const char *line, size_t len, unsigned *byte) {
    int in_string = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)line[i];
        if (in_string && c < 0x20) return *byte = c, "a raw control character in a string";
        if (!in_string && c == 0) return *byte = c, "a NUL byte";
        if (in_string && c == '\\')
            i++; /* the escaped character */
        else if (c == '"')
            in_string = !in_string;
    }
    return NULL;
}

/* The string under key in one JSON line, copied into the batch. A key given twice takes its
 * last value, as json.loads does. */
static zoe_status json_document(batch *b, const char *line, size_t len, const char *key,
                                int64_t line_no, const char *name, doc_ref *doc) {
    const char *end = NULL;
    unsigned byte = 0;
    const char *problem = json_strictness_problem(line, len, &byte);
    cJSON *obj = problem ? NULL : cJSON_ParseWithLengthOpts(line, len, &end, 0);
    const cJSON *v = NULL, *item = NULL;
    if (cJSON_IsObject(obj))
        cJSON_ArrayForEach(item, obj) if (item->string && strcmp(item->string, key) == 0) v = item;
    zoe_status st = ZOE_OK;
    if (problem)
        st = zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                      "'%s' line %lld: %s (0x%02x; JSON, and Python's json.loads, refuse it)", name,
                      (long long)line_no, problem, byte);
    else if (obj && !blank(end, len - (size_t)(end - line)))
        st = zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "'%s' line %lld: text after the JSON object", name,
                      (long long)line_no);
    else if (!obj)
        st = zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "'%s' line %lld: not valid JSON", name,
                      (long long)line_no);
    else if (!cJSON_IsObject(obj))
        st = zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "'%s' line %lld: not a JSON object", name,
                      (long long)line_no);
    else if (!cJSON_IsString(v))
        st = zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "'%s' line %lld: no string under key \"%s\"", name,
                      (long long)line_no, key);
    if (st == ZOE_OK && has_escaped_nul(line, len))
        st = zoe_fail(ZOE_ERR_UNSUPPORTED,
                      "'%s' line %lld: \\u0000 in a string (cJSON ends strings at NUL, so the "
                      "document would be cut short)",
                      name, (long long)line_no);
    if (st == ZOE_OK) {
        size_t n = strlen(v->valuestring);
        if (b->owned_len + n > b->owned_cap) {
            size_t cap = b->owned_cap ? b->owned_cap : BATCH_BYTES;
            while (cap < b->owned_len + n) cap *= 2;
            char *owned = realloc(b->owned, cap);
            if (!owned) st = zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "'%s': %zu bytes", name, cap);
            if (owned) b->owned = owned, b->owned_cap = cap;
        }
        if (st == ZOE_OK) {
            memcpy(b->owned + b->owned_len, v->valuestring, n);
            *doc = (doc_ref){.owned = b->owned_len, .len = n};
            b->owned_len += n;
        }
    }
    cJSON_Delete(obj);
    return st;
}

zoe_status zoe_dataset_writer_add_input(zoe_dataset_writer *w, const zoe_tokenizer *tok,
                                        const char *text, size_t len, const char *name,
                                        const zoe_input_options *opt) {
    if (!w || !tok || !opt || (len && !text))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_dataset_writer_add_input: NULL argument");
    if (opt->append_eod && zoe_tokenizer_eod(tok) < 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "'%s': --append-eod, but the tokenizer has no end-of-document token "
                        "(name one with --eod-token)",
                        name);
    int threads = opt->threads > 0 ? opt->threads : omp_get_max_threads();
    batch b;
    zoe_status st = batch_init(&b, tok, threads);
    zoe_text_cursor cur = {.text = text, .len = len, .split = opt->split};
    size_t pos = 0, batch_bytes = 0;
    int64_t line_no = 0, docs_before = zoe_dataset_writer_documents(w);
    while (st == ZOE_OK) {
        doc_ref doc = {0};
        size_t end;
        int more;
        if (opt->json_key) {
            more = 0;
            while (pos < len) {
                const char *nl = memchr(text + pos, '\n', len - pos);
                end = nl ? (size_t)(nl - text) + 1 : len;
                size_t start = pos;
                pos = end;
                line_no++;
                if (blank(text + start, end - start)) continue;
                st = json_document(&b, text + start, end - start, opt->json_key, line_no, name,
                                   &doc);
                more = st == ZOE_OK;
                break;
            }
            end = pos;
        } else {
            more = zoe_text_next_document(&cur, &doc.text, &doc.len);
            end = cur.pos;
        }
        if (more) {
            doc.input_end = end;
            b.docs[b.n++] = doc;
            batch_bytes += doc.len;
        }
        if (st != ZOE_OK || (more && b.n < b.cap && batch_bytes < BATCH_BYTES)) continue;
        if (opt->json_key) /* the buffer has stopped moving */
            for (size_t i = 0; i < b.n; i++) b.docs[i].text = b.owned + b.docs[i].owned;
        if (b.n) st = flush_batch(w, tok, &b, opt, docs_before);
        if (st == ZOE_OK && b.n && opt->progress)
            opt->progress(opt->progress_user, zoe_dataset_writer_documents(w),
                          (int64_t)b.docs[b.n - 1].input_end);
        docs_before += (int64_t)b.n;
        b.n = 0, b.owned_len = 0, batch_bytes = 0;
        if (!more) break;
    }
    batch_free(&b);
    return st;
}

zoe_status zoe_dataset_writer_add_file(zoe_dataset_writer *w, const zoe_tokenizer *tok,
                                       const char *path, const zoe_input_options *opt) {
    if (!w || !tok || !path || !opt)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_dataset_writer_add_file: NULL argument");
    zoe_mapped_file text;
    ZOE_TRY(zoe_map_file(path, &text));
    zoe_status st = zoe_dataset_writer_add_input(w, tok, text.data, text.len, path, opt);
    zoe_unmap_file(&text);
    return st;
}
