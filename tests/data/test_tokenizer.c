/* The byte-level tokenizer: decode(encode(x)) == x on random UTF-8 with multibyte code points,
 * every token is its byte (checked against the bytes, not against encode), EOD is skipped on
 * decode, and ids outside the vocabulary or too-small buffers fail with the value named. */
#include <stdlib.h>
#include "data_util.h"
#include "zoe/data.h"

static void round_trip(const zoe_tokenizer *tok, test_rng *rng, size_t len) {
    char *text = malloc(len + 1), *back = malloc(len + 1);
    int32_t *tokens = malloc((len + 1) * sizeof *tokens);
    random_utf8(rng, text, len);
    for (size_t i = 0; i <= len; i++) tokens[i] = -7; /* poison */
    size_t n = 12345, m = 12345;
    CHECK_OK(zoe_tokenizer_encode(tok, text, len, tokens, len, &n));
    CHECK(n == len, "len %zu: %zu tokens, want one per byte", len, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += tokens[i] != (int32_t)(unsigned char)text[i];
    CHECK(bad == 0, "len %zu: %zu tokens differ from their bytes", len, bad);
    memset(back, '#', len + 1);
    CHECK_OK(zoe_tokenizer_decode(tok, tokens, n, back, len, &m));
    CHECK(m == len && memcmp(back, text, len) == 0, "len %zu: decode(encode(x)) != x", len);
    free(text);
    free(back);
    free(tokens);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    zoe_tokenizer *tok;
    if (!CHECK_OK(zoe_tokenizer_create_bytes(&tok))) return test_finish("test_tokenizer");
    CHECK(zoe_tokenizer_vocab_size(tok) == 257 && zoe_tokenizer_eod(tok) == 256, "vocab %d eod %d",
          zoe_tokenizer_vocab_size(tok), zoe_tokenizer_eod(tok));
    test_rng rng;
    test_rng_seed(&rng, 61);
    size_t lens[] = {0, 1, 7, 100, 4099};
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
        for (int rep = 0; rep < 5; rep++) round_trip(tok, &rng, lens[i]);

    /* Multibyte characters are split into their bytes, high bytes as 128..255. */
    const char *euro = "\xe2\x82\xac"; /* U+20AC */
    int32_t t[8];
    size_t n;
    CHECK_OK(zoe_tokenizer_encode(tok, euro, 3, t, 8, &n));
    CHECK(n == 3 && t[0] == 0xe2 && t[1] == 0x82 && t[2] == 0xac, "euro sign -> %d %d %d", t[0],
          t[1], t[2]);

    /* EOD produces no bytes: "ab" EOD "c" decodes to "abc". */
    int32_t with_eod[] = {'a', 'b', ZOE_BYTE_EOD, 'c'};
    char out[8];
    CHECK_OK(zoe_tokenizer_decode(tok, with_eod, 4, out, sizeof out, &n));
    CHECK(n == 3 && memcmp(out, "abc", 3) == 0, "EOD skipped on decode");

    int32_t bad[] = {'a', 257};
    CHECK(zoe_tokenizer_decode(tok, bad, 2, out, sizeof out, &n) == ZOE_ERR_INVALID_ARGUMENT,
          "token 257 rejected");
    CHECK(strstr(zoe_last_error(), "token 257") != NULL, "message names 257: '%s'",
          zoe_last_error());
    bad[1] = -1;
    CHECK(zoe_tokenizer_decode(tok, bad, 2, out, sizeof out, &n) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "token -1") != NULL,
          "token -1 rejected: '%s'", zoe_last_error());
    CHECK(zoe_tokenizer_encode(tok, "hello", 5, t, 4, &n) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "holds 4") != NULL,
          "small encode buffer rejected: '%s'", zoe_last_error());
    CHECK(zoe_tokenizer_decode(tok, with_eod, 4, out, 2, &n) == ZOE_ERR_INVALID_ARGUMENT,
          "small decode buffer rejected");
    zoe_tokenizer_destroy(tok);
    return test_finish("test_tokenizer");
}
