/* The byte-level tokenizer: every byte is its own token and one special token ends a document.
 * Exact on any input (no normalisation, no UTF-8 validation), which is what a small demo model
 * and round-trip tests need; a handle so that a BPE tokenizer can take its place later. */
#include <stdlib.h>
#include "runtime/error.h"
#include "zoe/data.h"

struct zoe_tokenizer {
    int32_t vocab_size;
    int32_t eod;
};

zoe_status zoe_tokenizer_create_bytes(zoe_tokenizer **out) {
    if (!out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_tokenizer_create_bytes: out is NULL");
    *out = NULL;
    zoe_tokenizer *tok = malloc(sizeof *tok);
    if (!tok) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "tokenizer: %zu bytes", sizeof *tok);
    tok->vocab_size = ZOE_BYTE_VOCAB_SIZE;
    tok->eod = ZOE_BYTE_EOD;
    *out = tok;
    return ZOE_OK;
}

void zoe_tokenizer_destroy(zoe_tokenizer *tok) {
    free(tok);
}

int32_t zoe_tokenizer_vocab_size(const zoe_tokenizer *tok) {
    return tok ? tok->vocab_size : -1;
}

int32_t zoe_tokenizer_eod(const zoe_tokenizer *tok) {
    return tok ? tok->eod : -1;
}

size_t zoe_tokenizer_max_tokens(const zoe_tokenizer *tok, size_t len) {
    return len;
}

zoe_status zoe_tokenizer_encode(const zoe_tokenizer *tok, const char *text, size_t len,
                                int32_t *tokens, size_t cap, size_t *n_tokens) {
    if (!tok || !n_tokens || (len && (!text || !tokens)))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_tokenizer_encode: NULL argument");
    *n_tokens = 0;
    if (len > cap)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "encode: %zu bytes need %zu tokens, buffer holds %zu", len, len, cap);
    const unsigned char *bytes = (const unsigned char *)text;
    for (size_t i = 0; i < len; i++) tokens[i] = bytes[i];
    *n_tokens = len;
    return ZOE_OK;
}

zoe_status zoe_tokenizer_decode(const zoe_tokenizer *tok, const int32_t *tokens, size_t n,
                                char *text, size_t cap, size_t *len) {
    if (!tok || !len || (n && (!tokens || !text)))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_tokenizer_decode: NULL argument");
    size_t out = 0;
    *len = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t t = tokens[i];
        if (t < 0 || t >= tok->vocab_size)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "decode: token %d at position %zu is outside the vocabulary of %d", t,
                            i, tok->vocab_size);
        if (t == tok->eod) continue;
        if (out == cap)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "decode: output buffer of %zu bytes is too small", cap);
        text[out++] = (char)(unsigned char)t;
    }
    *len = out;
    return ZOE_OK;
}
