/* Shapes that do not split over TP fail with ZOE_ERR_INVALID_ARGUMENT and a message naming the
 * values, and leave the described struct untouched. Also the vocabulary padding rule. */
#include <string.h>
#include "tensor_parallel/block.h"
#include "testing.h"

#define SENTINEL 0x5a

static void expect_error(zoe_status st, const char *want, const void *obj, size_t size,
                         const char *what) {
    CHECK(st == ZOE_ERR_INVALID_ARGUMENT, "%s: status %s", what, zoe_status_string(st));
    CHECK(strstr(zoe_last_error(), want) != NULL, "%s: message '%s' lacks '%s'", what,
          zoe_last_error(), want);
    const unsigned char *p = obj;
    size_t touched = 0;
    for (size_t i = 0; i < size; i++) touched += p[i] != SENTINEL;
    CHECK(touched == 0, "%s: %zu bytes of the output written on failure", what, touched);
}

static void block_errors(void) {
    static zoe_tp_block blk;
    struct {
        zoe_tp_block_config cfg;
        int tp;
        const char *want;
    } cases[] = {
        {{.hidden = 768, .heads = 12, .ffn = 3072}, 5, "heads=12 not divisible by tp=5"},
        {{.hidden = 100, .heads = 12, .ffn = 400}, 1, "hidden=100 not divisible by heads=12"},
        {{.hidden = 64, .heads = 4, .ffn = 258}, 4, "ffn=258 not divisible by tp=4"},
        {{.hidden = 64, .heads = 4, .ffn = 256, .hidden_dropout = 1.0f}, 2, "hidden_dropout=1"},
        {{.hidden = 0, .heads = 4, .ffn = 256}, 2, "hidden=0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memset(&blk, SENTINEL, sizeof blk);
        expect_error(zoe_tp_block_init(&blk, "h.0.", &cases[i].cfg, cases[i].tp, 0), cases[i].want,
                     &blk, sizeof blk, cases[i].want);
    }
    zoe_tp_block_config ok = {.hidden = 64, .heads = 4, .ffn = 256};
    CHECK_OK(zoe_tp_block_init(&blk, "h.0.", &ok, 4, 3));
    CHECK(blk.local_heads == 1 && blk.linear_qkv.out_local == 48 && blk.local_ffn == 64,
          "tp=4 split of 4 heads / ffn 256");
    CHECK(strcmp(blk.linear_qkv.weight.name, "h.0.attn.linear_qkv.weight") == 0 &&
              strcmp(blk.linear_fc2.bias.name, "h.0.mlp.linear_fc2.bias") == 0,
          "parameter names: %s, %s", blk.linear_qkv.weight.name, blk.linear_fc2.bias.name);
    CHECK(blk.linear_qkv.weight.local_offset[0] == 144 &&
              blk.linear_fc2.weight.local_offset[1] == 192,
          "rank 3 shard offsets");
    CHECK(blk.linear_proj.bias.replicated && !blk.linear_qkv.bias.replicated &&
              blk.ln_2_weight.replicated,
          "replicated flags");
}

static void linear_and_vocab_errors(void) {
    static zoe_tp_linear lin;
    memset(&lin, SENTINEL, sizeof lin);
    expect_error(zoe_tp_column_linear_init(&lin, "fc", 8, 10, true, false, 0.02f, 4, 0),
                 "fc: out=10 not divisible by tp=4", &lin, sizeof lin, "column out");
    memset(&lin, SENTINEL, sizeof lin);
    expect_error(zoe_tp_row_linear_init(&lin, "proj", 6, 8, true, 0.02f, 4, 1),
                 "proj: in=6 not divisible by tp=4", &lin, sizeof lin, "row in");
    zoe_tp_vocab v;
    memset(&v, SENTINEL, sizeof v);
    expect_error(zoe_tp_vocab_init(&v, 0, 128, 2, 0), "vocab=0", &v, sizeof v, "empty vocab");
    static zoe_tp_embedding e;
    memset(&e, SENTINEL, sizeof e);
    expect_error(zoe_tp_embedding_init(&e, "", 100, 128, -1, 16, 0.02f, 2, 0), "hidden=-1", &e,
                 sizeof e, "embedding hidden");
    zoe_tp_param p;
    memset(&p, SENTINEL, sizeof p);
    expect_error(
        zoe_tp_param_describe(&p, "w", 2, 6, 10, ZOE_TP_SPLIT_COLS, ZOE_TP_INIT_ZEROS, 0, 4, 0),
        "w: cols=10 not divisible by tp=4", &p, sizeof p, "param cols");

    /* padding: a multiple of 128 for every t dividing 128 (TP-invariant), else of
     * t * ceil(128 / t); rank ranges cover the padded table */
    const int tps[] = {1, 2, 4, 8, 3, 5};
    const int64_t want[] = {50304, 50304, 50304, 50304, 50310, 50310};
    for (int i = 0; i < 6; i++) {
        CHECK_OK(zoe_tp_vocab_init(&v, 50257, 0, tps[i], tps[i] - 1));
        CHECK(v.padded == want[i] && v.padded % tps[i] == 0, "GPT-2 vocab at tp=%d padded to %lld",
              tps[i], (long long)v.padded);
        CHECK(v.start + v.local == v.padded && v.valid_local == 50257 - v.start,
              "last rank's range at tp=%d", tps[i]);
    }
    CHECK_OK(zoe_tp_vocab_init(&v, 257, 128, 4, 3));
    CHECK(v.padded == 384 && v.local == 96 && v.start == 288 && v.valid_local == 0,
          "vocab 257 at tp=4: rank 3 holds only padding");
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    block_errors();
    linear_and_vocab_errors();
    return test_finish("test_tp_errors");
}
