/* The tokenizer handle: the byte-level tokenizer (every byte its own token, one end-of-document
 * token; exact on any bytes) and byte-level BPE from a tokenizer.json (tables read by
 * tokenizer_json.c), and the encoder that runs BPE's pipeline: UTF-8 repair, added tokens cut
 * out, pre-tokenizer steps, then the merges of each word through a per-encoder word cache.
 *
 * Explained in docs/data.md. */
#include <stdlib.h>
#include <string.h>
#include "engine/tokenizer/tokenizer_impl.h"
#include "runtime/error.h"

enum {
    CACHE_MAX_WORD = 64,      /* longer words are not cached */
    CACHE_MAX_WORDS = 1 << 15 /* the cache is emptied when it holds this many */
};

zoe_status zoe_tokenizer_create_bytes(zoe_tokenizer **out) {
    if (!out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_tokenizer_create_bytes: out is NULL");
    *out = NULL;
    zoe_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "tokenizer: %zu bytes", sizeof *tok);
    tok->kind = ZOE_TOKENIZER_BYTES;
    tok->vocab_size = ZOE_BYTE_VOCAB_SIZE;
    tok->eod = ZOE_BYTE_EOD;
    *out = tok;
    return ZOE_OK;
}

void zoe_tokenizer_destroy(zoe_tokenizer *tok) {
    if (!tok) return;
    zoe_str_map_free(&tok->vocab);
    free(tok->merges.slots);
    free(tok->decoded_off);
    free(tok->decoded);
    free(tok->is_special);
    for (int i = 0; i < tok->n_added; i++) free(tok->added[i].content);
    free(tok->added);
    free(tok->bmp_class);
    free(tok);
}

int32_t zoe_tokenizer_vocab_size(const zoe_tokenizer *tok) {
    return tok ? tok->vocab_size : -1;
}

int32_t zoe_tokenizer_eod(const zoe_tokenizer *tok) {
    return tok ? tok->eod : -1;
}

static int prefix_steps(const zoe_tokenizer *tok) {
    int n = 0;
    for (int s = 0; s < tok->n_steps; s++) n += tok->steps[s].kind == ZOE_PRETOK_PREFIX_SPACE;
    return n;
}

size_t zoe_tokenizer_max_tokens(const zoe_tokenizer *tok, size_t len) {
    if (!tok) return 0;
    if (tok->kind == ZOE_TOKENIZER_BYTES) return len;
    /* Repair makes a byte at most three (U+FFFD); each prefix step adds a byte per piece. */
    return 3 * len * (size_t)(1 + prefix_steps(tok)) + (size_t)prefix_steps(tok);
}

/* ---- the encoder ---- */

typedef zoe_piece piece;

typedef struct piece_list {
    piece *items;
    size_t count, cap;
} piece_list;

struct zoe_encoder {
    const zoe_tokenizer *tok;
    unsigned char *text; /* the repaired text, then the pieces that prefix steps copy */
    size_t text_cap, text_len;
    piece_list a, b;
    zoe_bpe_scratch bpe;
    zoe_str_map cache; /* word -> offset of [count, ids ...] in cache_ids */
    int32_t *cache_ids;
    size_t cache_len, cache_cap;
    int32_t *word; /* one word's tokens */
    size_t word_cap;
};

zoe_status zoe_encoder_create(const zoe_tokenizer *tok, zoe_encoder **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "encoder");
    (*out)->tok = tok;
    return ZOE_OK;
}

void zoe_encoder_destroy(zoe_encoder *enc) {
    if (!enc) return;
    free(enc->text);
    free(enc->a.items);
    free(enc->b.items);
    zoe_bpe_scratch_free(&enc->bpe);
    zoe_str_map_free(&enc->cache);
    free(enc->cache_ids);
    free(enc->word);
    free(enc);
}

static int push_piece(piece_list *l, const unsigned char *s, size_t len, int32_t added) {
    if (l->count == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        piece *items = realloc(l->items, cap * sizeof *items);
        if (!items) return 1;
        l->items = items;
        l->cap = cap;
    }
    l->items[l->count++] = (piece){s, len, added};
    return 0;
}

static size_t spaces_before(const zoe_tokenizer *tok, const unsigned char *s, size_t from,
                            size_t to) {
    /* the start of the whitespace run that ends at `to`, not before `from` */
    size_t i = to;
    while (i > from) {
        size_t j = i - 1;
        while (j > from && (s[j] & 0xC0) == 0x80) j--;
        size_t k = j;
        if (!(zoe_cp_class(tok, zoe_utf8_next(s, &k)) & ZOE_CP_SPACE)) break;
        i = j;
    }
    return i;
}

static size_t spaces_after(const zoe_tokenizer *tok, const unsigned char *s, size_t from,
                           size_t len) {
    size_t i = from;
    while (i < len) {
        size_t k = i;
        if (!(zoe_cp_class(tok, zoe_utf8_next(s, &k)) & ZOE_CP_SPACE)) break;
        i = k;
    }
    return i;
}

/* The longest added token of class `normalized` at s[i], or -1. */
static int added_at(const zoe_tokenizer *tok, int normalized, const unsigned char *s, size_t len,
                    size_t i) {
    int best = -1;
    for (int t = 0; t < tok->n_added; t++) {
        const zoe_added_token *a = &tok->added[t];
        if (a->normalized != normalized || a->len > len - i ||
            (best >= 0 && a->len <= tok->added[best].len))
            continue;
        if (memcmp(s + i, a->content, a->len) == 0) best = t;
    }
    return best;
}

/* Cuts the added tokens of one class out of every plain piece: leftmost, then longest, with
 * lstrip/rstrip taking the whitespace beside them, as `tokenizers` does. */
static int split_added(const zoe_tokenizer *tok, int normalized, const piece_list *in,
                       piece_list *out) {
    out->count = 0;
    for (size_t p = 0; p < in->count; p++) {
        const piece *pc = &in->items[p];
        if (pc->added >= 0) {
            if (push_piece(out, pc->s, pc->len, pc->added)) return 1;
            continue;
        }
        size_t start = 0, i = 0;
        while (i < pc->len) {
            int t = tok->added_first[pc->s[i]] ? added_at(tok, normalized, pc->s, pc->len, i) : -1;
            if (t < 0) {
                i++;
                continue;
            }
            const zoe_added_token *a = &tok->added[t];
            size_t begin = a->lstrip ? spaces_before(tok, pc->s, start, i) : i;
            size_t stop = i + a->len;
            if (a->rstrip) stop = spaces_after(tok, pc->s, stop, pc->len);
            if (begin > start && push_piece(out, pc->s + start, begin - start, -1)) return 1;
            if (push_piece(out, pc->s + begin, stop - begin, a->id)) return 1;
            start = i = stop;
        }
        if (start < pc->len && push_piece(out, pc->s + start, pc->len - start, -1)) return 1;
    }
    return 0;
}

static int apply_step(zoe_encoder *enc, const zoe_pretok_step *step, const piece_list *in,
                      piece_list *out) {
    const zoe_tokenizer *tok = enc->tok;
    out->count = 0;
    for (size_t p = 0; p < in->count; p++) {
        const piece *pc = &in->items[p];
        if (pc->added >= 0) {
            if (push_piece(out, pc->s, pc->len, pc->added)) return 1;
        } else if (step->kind == ZOE_PRETOK_PREFIX_SPACE) {
            if (pc->len > 0 && pc->s[0] == ' ') {
                if (push_piece(out, pc->s, pc->len, -1)) return 1;
                continue;
            }
            /* room was reserved for every prefix step, so the copies never move */
            unsigned char *dst = enc->text + enc->text_len;
            dst[0] = ' ';
            memcpy(dst + 1, pc->s, pc->len);
            enc->text_len += pc->len + 1;
            if (push_piece(out, dst, pc->len + 1, -1)) return 1;
        } else {
            for (size_t i = 0; i < pc->len;) {
                size_t end = zoe_pattern_match(tok, step->pattern, pc->s, pc->len, i);
                if (!step->remove && push_piece(out, pc->s + i, end - i, -1)) return 1;
                i = end;
            }
        }
    }
    return 0;
}

/* One word's tokens, through the cache. */
static long encode_word(zoe_encoder *enc, const unsigned char *w, size_t len, int32_t **ids) {
    const zoe_tokenizer *tok = enc->tok;
    int cacheable = len <= CACHE_MAX_WORD;
    if (cacheable) {
        int32_t at = zoe_str_map_get(&enc->cache, (const char *)w, len);
        if (at >= 0) {
            *ids = enc->cache_ids + at + 1;
            return enc->cache_ids[at];
        }
    }
    size_t need = 4 * len + 2;
    if (need > enc->word_cap) {
        int32_t *word = realloc(enc->word, need * sizeof *word);
        if (!word) return -1;
        enc->word = word;
        enc->word_cap = need;
    }
    long n = zoe_bpe_word(tok, &enc->bpe, w, len, enc->word);
    if (n < 0) return -1;
    *ids = enc->word;
    if (!cacheable) return n;
    if (enc->cache.count >= CACHE_MAX_WORDS) {
        zoe_str_map_clear(&enc->cache);
        enc->cache_len = 0;
    }
    if (enc->cache_len + (size_t)n + 1 > enc->cache_cap) {
        size_t cap = enc->cache_cap ? 2 * enc->cache_cap : 1 << 16;
        while (cap < enc->cache_len + (size_t)n + 1) cap *= 2;
        int32_t *c = realloc(enc->cache_ids, cap * sizeof *c);
        if (!c) return n; /* uncached, still correct */
        enc->cache_ids = c;
        enc->cache_cap = cap;
    }
    if (zoe_str_map_put(&enc->cache, (const char *)w, len, (int32_t)enc->cache_len)) return n;
    enc->cache_ids[enc->cache_len] = (int32_t)n;
    memcpy(enc->cache_ids + enc->cache_len + 1, enc->word, (size_t)n * sizeof *enc->word);
    enc->cache_len += (size_t)n + 1;
    return n;
}

static zoe_status encode_bytes(const char *text, size_t len, int32_t *tokens, size_t cap,
                               size_t *n_tokens) {
    if (len > cap)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "encode: %zu bytes need %zu tokens, buffer holds %zu", len, len, cap);
    const unsigned char *bytes = (const unsigned char *)text;
    for (size_t i = 0; i < len; i++) tokens[i] = bytes[i];
    *n_tokens = len;
    return ZOE_OK;
}

static zoe_status out_of_memory(size_t len) {
    return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "encode: scratch space for %zu bytes", len);
}

zoe_status zoe_encoder_pieces(zoe_encoder *enc, const char *text, size_t len,
                              const zoe_piece **pieces, size_t *n_pieces) {
    const zoe_tokenizer *tok = enc->tok;
    const unsigned char *src = (const unsigned char *)text;
    size_t room = zoe_tokenizer_max_tokens(tok, len) + 1;
    if (room > enc->text_cap) {
        unsigned char *t = realloc(enc->text, room);
        if (!t) return out_of_memory(len);
        enc->text = t;
        enc->text_cap = room;
    }
    enc->text_len = 0;
    if (zoe_utf8_valid_prefix(src, len) != len) {
        enc->text_len = zoe_utf8_sanitize(src, len, enc->text);
        src = enc->text;
        len = enc->text_len;
    }
    piece_list *cur = &enc->a, *next = &enc->b, *swap;
    cur->count = 0;
    if (len > 0 && push_piece(cur, src, len, -1)) return out_of_memory(len);
    for (int normalized = 0; normalized < 2 && tok->n_added; normalized++) {
        if (split_added(tok, normalized, cur, next)) return out_of_memory(len);
        swap = cur, cur = next, next = swap;
    }
    for (int s = 0; s < tok->n_steps; s++) {
        if (apply_step(enc, &tok->steps[s], cur, next)) return out_of_memory(len);
        swap = cur, cur = next, next = swap;
    }
    *pieces = cur->items;
    *n_pieces = cur->count;
    return ZOE_OK;
}

zoe_status zoe_encoder_encode(zoe_encoder *enc, const char *text, size_t len, int32_t *tokens,
                              size_t cap, size_t *n_tokens) {
    *n_tokens = 0;
    if (enc->tok->kind == ZOE_TOKENIZER_BYTES)
        return encode_bytes(text, len, tokens, cap, n_tokens);
    const zoe_piece *pieces;
    size_t count, n = 0;
    ZOE_TRY(zoe_encoder_pieces(enc, text, len, &pieces, &count));
    for (size_t p = 0; p < count; p++) {
        const zoe_piece *pc = &pieces[p];
        int32_t one = pc->added, *ids = &one;
        long k = pc->added >= 0 ? 1 : encode_word(enc, pc->s, pc->len, &ids);
        if (k < 0) return out_of_memory(len);
        if (n + (size_t)k > cap)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "encode: %zu bytes need more than %zu tokens (the buffer)", len, cap);
        memcpy(tokens + n, ids, (size_t)k * sizeof *ids);
        n += (size_t)k;
    }
    *n_tokens = n;
    return ZOE_OK;
}

zoe_status zoe_tokenizer_encode(const zoe_tokenizer *tok, const char *text, size_t len,
                                int32_t *tokens, size_t cap, size_t *n_tokens) {
    if (!tok || !n_tokens || (len && (!text || !tokens)))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_tokenizer_encode: NULL argument");
    *n_tokens = 0;
    if (tok->kind == ZOE_TOKENIZER_BYTES) return encode_bytes(text, len, tokens, cap, n_tokens);
    zoe_encoder *enc;
    ZOE_TRY(zoe_encoder_create(tok, &enc));
    zoe_status st = zoe_encoder_encode(enc, text, len, tokens, cap, n_tokens);
    zoe_encoder_destroy(enc);
    return st;
}

/* ---- decoding ---- */

zoe_status zoe_tokenizer_decode(const zoe_tokenizer *tok, const int32_t *tokens, size_t n,
                                char *text, size_t cap, size_t *len) {
    if (!tok || !len || (n && (!tokens || !text)))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_tokenizer_decode: NULL argument");
    size_t out = 0;
    int first = 1;
    *len = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t t = tokens[i];
        if (t < 0 || t >= tok->vocab_size)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "decode: token %d at position %zu is outside the vocabulary of %d", t,
                            i, tok->vocab_size);
        if (t == tok->eod || (tok->is_special && tok->is_special[t])) continue;
        const char *bytes;
        size_t k;
        unsigned char byte = (unsigned char)t;
        if (tok->kind == ZOE_TOKENIZER_BYTES) {
            bytes = (const char *)&byte, k = 1;
        } else {
            bytes = tok->decoded + tok->decoded_off[t];
            k = tok->decoded_off[t + 1] - tok->decoded_off[t];
        }
        size_t sep = tok->decode_join && !first;
        if (out + sep + k > cap)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "decode: output buffer of %zu bytes is too small", cap);
        if (sep) text[out++] = ' ';
        memcpy(text + out, bytes, k);
        out += k;
        first = 0;
    }
    *len = out;
    return ZOE_OK;
}
