/* A window on zoe's tokenizer for the Python tests that compare it with `tokenizers`:
 *   tokenize_probe encode TOKENIZER.json DOCS   ids of each document, one line each
 *   tokenize_probe pieces TOKENIZER.json DOCS   byte lengths of each document's pieces
 *   tokenize_probe decode TOKENIZER.json IDS    each line of ids decoded, as hex, one line each
 * DOCS holds documents framed as a little-endian uint32 length and the bytes. Exit 2 with the
 * message on a failure (the bad-input tests read it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "data_util.h"
#include "engine/tokenizer/tokenizer_impl.h"
#include "zoe/status.h"

static int fail(void) {
    fprintf(stderr, "tokenize_probe: %s\n", zoe_last_error());
    return 2;
}

static int run_docs(zoe_tokenizer *tok, const char *mode, const char *data, size_t len) {
    zoe_encoder *enc;
    if (zoe_encoder_create(tok, &enc) != ZOE_OK) return fail();
    int rc = 0;
    for (size_t at = 0; rc == 0 && at + 4 <= len;) {
        uint32_t n;
        memcpy(&n, data + at, 4);
        at += 4;
        const char *doc = data + at;
        at += n;
        if (strcmp(mode, "encode") == 0) {
            size_t cap = zoe_tokenizer_max_tokens(tok, n) + 1, got;
            int32_t *ids = malloc(cap * sizeof *ids);
            if (zoe_encoder_encode(enc, doc, n, ids, cap, &got) != ZOE_OK) rc = fail();
            for (size_t i = 0; rc == 0 && i < got; i++) printf(i ? " %d" : "%d", ids[i]);
            free(ids);
        } else {
            const zoe_piece *p;
            size_t count;
            if (zoe_encoder_pieces(enc, doc, n, &p, &count) != ZOE_OK) rc = fail();
            for (size_t i = 0; rc == 0 && i < count; i++) printf(i ? " %zu" : "%zu", p[i].len);
        }
        printf("\n");
    }
    zoe_encoder_destroy(enc);
    return rc;
}

static int run_decode(zoe_tokenizer *tok, char *data) {
    size_t cap = 1 << 20;
    int32_t *ids = malloc(cap * sizeof *ids);
    char *out = malloc(cap * 16);
    int rc = 0;
    for (char *line = data, *eol; rc == 0 && (eol = strchr(line, '\n')); line = eol + 1) {
        *eol = '\0';
        size_t n = 0;
        for (char *p = line, *end; n < cap; p = end) {
            long v = strtol(p, &end, 10);
            if (end == p) break;
            ids[n++] = (int32_t)v;
        }
        size_t got;
        if (zoe_tokenizer_decode(tok, ids, n, out, cap * 16, &got) != ZOE_OK) rc = fail();
        for (size_t i = 0; rc == 0 && i < got; i++) printf("%02x", (unsigned char)out[i]);
        printf("\n");
    }
    free(ids);
    free(out);
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: tokenize_probe encode|pieces|decode TOKENIZER.json FILE\n");
        return 2;
    }
    zoe_tokenizer *tok;
    if (zoe_tokenizer_load_json(argv[2], NULL, &tok) != ZOE_OK) return fail();
    size_t len = 0;
    char *data = read_file(argv[3], &len);
    int rc = 2;
    if (!data)
        fprintf(stderr, "tokenize_probe: cannot read '%s'\n", argv[3]);
    else if (strcmp(argv[1], "decode") == 0)
        rc = run_decode(tok, data);
    else
        rc = run_docs(tok, argv[1], data, len);
    free(data);
    zoe_tokenizer_destroy(tok);
    return rc;
}
