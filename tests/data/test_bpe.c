/* BPE from a tokenizer.json, without Python: a vocabulary small enough to merge by hand, so
 * the expected ids below are worked out from the GPT-2 pattern and the merge ranks (the Python
 * tests compare against `tokenizers` itself). Also: added tokens cut out first, invalid UTF-8
 * read as U+FFFD (here not in the vocabulary, so dropped, as `tokenizers` drops unknown
 * characters without unk), decode skipping special tokens, and one encoder reused. */
#include <string.h>
#include "data_util.h"
#include "zoe/tokenizer.h"

/* a b c Ġ(space) ab abc Ġa; merges a+b (rank 0), ab+c (1), Ġ+a (2) */
static const char json[] =
    "{\"version\": \"1.0\", \"normalizer\": null,"
    " \"added_tokens\": [{\"id\": 7, \"content\": \"<|endoftext|>\", \"single_word\": false,"
    "   \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}],"
    " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false,"
    "   \"trim_offsets\": true, \"use_regex\": true},"
    " \"decoder\": {\"type\": \"ByteLevel\"},"
    " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null,"
    "   \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"\\u0120\": 3, \"ab\": 4, \"abc\": 5,"
    "     \"\\u0120a\": 6, \"<|endoftext|>\": 7},"
    "   \"merges\": [\"a b\", [\"ab\", \"c\"], \"\\u0120 a\"]}}";

static void expect(zoe_encoder *enc, const char *text, size_t len, const int32_t *want, size_t n,
                   const char *what) {
    int32_t got[64];
    for (int i = 0; i < 64; i++) got[i] = -9; /* poison */
    size_t k = 0;
    CHECK_OK(zoe_encoder_encode(enc, text, len, got, 64, &k));
    CHECK(k == n && (n == 0 || memcmp(got, want, n * sizeof *want) == 0),
          "%s: %zu tokens (%d %d %d ...)", what, k, got[0], got[1], got[2]);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    zoe_tokenizer *tok;
    if (!CHECK_OK(zoe_tokenizer_parse_json(json, sizeof json - 1, "inline", NULL, &tok)))
        return test_finish("test_bpe");
    CHECK(zoe_tokenizer_vocab_size(tok) == 8 && zoe_tokenizer_eod(tok) == 7, "vocab %d eod %d",
          zoe_tokenizer_vocab_size(tok), zoe_tokenizer_eod(tok));
    zoe_encoder *enc;
    CHECK_OK(zoe_encoder_create(tok, &enc));
    /* "abc" | " abab": a+b first everywhere (rank 0, leftmost first), then ab+c; " abab" has
     * Ġ a b a b -> Ġ ab a b -> Ġ ab ab, and Ġ+a never applies (a is gone) */
    expect(enc, "abc abab", 8, (const int32_t[]){5, 3, 4, 4}, 4, "abc abab");
    /* " a" is Ġ+a; the special token is cut out before the pre-tokenizer */
    expect(enc, "abc<|endoftext|> a", 18, (const int32_t[]){5, 7, 6}, 3, "special token");
    /* \xff is invalid: U+FFFD, a piece of its own (not a letter), not in the vocabulary */
    expect(enc,
           "a\xff"
           "b",
           3, (const int32_t[]){0, 1}, 2, "invalid UTF-8");
    expect(enc, "", 0, NULL, 0, "empty text");
    /* the pattern's space handling: "  a" is Ġ | Ġa (the run gives its last space away) */
    expect(enc, "  a", 3, (const int32_t[]){3, 6}, 2, "two spaces");
    int32_t ids[] = {5, 7, 3, 4, 6};
    char text[32];
    size_t len = 0;
    CHECK_OK(zoe_tokenizer_decode(tok, ids, 5, text, sizeof text, &len));
    CHECK(len == 8 && memcmp(text, "abc ab a", 8) == 0, "decode: '%.*s'", (int)len, text);
    int32_t bad[] = {8};
    CHECK(zoe_tokenizer_decode(tok, bad, 1, text, sizeof text, &len) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "token 8"),
          "decode names token 8: '%s'", zoe_last_error());
    int32_t small[2];
    size_t n;
    CHECK(zoe_encoder_encode(enc, "abc abab", 8, small, 2, &n) == ZOE_ERR_INVALID_ARGUMENT,
          "too small a token buffer is an error");
    zoe_encoder_destroy(enc);
    zoe_tokenizer_destroy(tok);
    zoe_tokenizer *none;
    CHECK(zoe_tokenizer_parse_json("{\"model\": {\"type\": \"Unigram\"}}", 31, "unigram", NULL,
                                   &none) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "model.type \"Unigram\" is not supported"),
          "unknown model type: '%s'", zoe_last_error());
    /* a sparse id (found by fuzz_tokenizer_json): 8 tokens listed, one of them at 2^31 - 2, would
     * size the id-indexed arrays at 2^31 entries; refused before anything is allocated */
    char sparse[sizeof json + 16];
    const char *at = strstr(json, "\"id\": 7");
    snprintf(sparse, sizeof sparse, "%.*s\"id\": 2147483646%s", (int)(at - json), json,
             at + strlen("\"id\": 7"));
    CHECK(zoe_tokenizer_parse_json(sparse, strlen(sparse), "sparse", NULL, &none) ==
                  ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "the largest id is 2147483646 but only 9 tokens are listed"),
          "sparse ids: '%s'", zoe_last_error());
    return test_finish("test_bpe");
}
