/* libFuzzer target for the tokenizer.json reader: any bytes either fail to load with a message
 * or load into a tokenizer that then encodes the same bytes as text and decodes the result
 * (ids inside the vocabulary, buffers never overrun: ASan and UBSan watch). Built with clang
 * only (tests/fuzz/CMakeLists.txt); seeds are the tokenizer.json files the Python tests make. */
#include <stdlib.h>
#include <string.h>
#include "zoe/tokenizer.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    zoe_tokenizer *tok;
    if (zoe_tokenizer_parse_json((const char *)data, size, "fuzz", NULL, &tok) != ZOE_OK) return 0;
    size_t cap = zoe_tokenizer_max_tokens(tok, size) + 1, n = 0, len = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (ids && zoe_tokenizer_encode(tok, (const char *)data, size, ids, cap, &n) == ZOE_OK) {
        int32_t vocab = zoe_tokenizer_vocab_size(tok);
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= vocab) abort();
        size_t text_cap = 64 * n + 64;
        char *text = malloc(text_cap);
        if (text) zoe_tokenizer_decode(tok, ids, n, text, text_cap, &len);
        free(text);
    }
    free(ids);
    zoe_tokenizer_destroy(tok);
    return 0;
}
