/* The loader: sequence i of a dataset is the window of seq_len + 1 stream tokens at i * seq_len.
 * Each epoch visits them in the order of a keyed pseudo-random permutation (a Feistel network
 * over the next power of four, cycle-walked down to the sequence count), so the sequence for
 * any (step, micro_step, row) is computed directly: no permutation table in memory, no state,
 * the same answer on every rank.
 *
 * Explained in docs/data.md, "The loader". */
#include <stdlib.h>
#include "engine/data/data_impl.h"
#include "runtime/error.h"

enum { FEISTEL_ROUNDS = 6 };

struct zoe_loader {
    const zoe_dataset *ds;
    zoe_loader_config cfg;
    int64_t sequences;    /* windows in the stream */
    int64_t global_batch; /* sequences per step over all DP ranks */
    int64_t steps_per_epoch;
    int half_bits; /* the permutation domain is 2^(2 * half_bits) >= sequences */
};

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Round keys for epoch e: a function of (seed, e) only. */
static void epoch_keys(uint64_t seed, int64_t epoch, uint64_t keys[FEISTEL_ROUNDS]) {
    uint64_t base = mix64(seed ^ mix64((uint64_t)epoch + 0x9e3779b97f4a7c15ull));
    for (int r = 0; r < FEISTEL_ROUNDS; r++)
        keys[r] = mix64(base + (uint64_t)r * 0x632be59bd9b4e019ull);
}

/* A bijection of [0, 4^half_bits). */
static uint64_t feistel(uint64_t x, int half_bits, const uint64_t keys[FEISTEL_ROUNDS]) {
    uint64_t mask = (1ull << half_bits) - 1, left = x >> half_bits, right = x & mask;
    for (int r = 0; r < FEISTEL_ROUNDS; r++) {
        uint64_t next = left ^ (mix64(right ^ keys[r]) & mask);
        left = right;
        right = next;
    }
    return (left << half_bits) | right;
}

/* Position i of epoch e's order: walking the cycle of i under the bijection until it lands
 * below n keeps this a permutation of [0, n) (the domain is < 4n, so few steps on average). */
static int64_t permute(const zoe_loader *l, int64_t epoch, int64_t i) {
    uint64_t keys[FEISTEL_ROUNDS];
    epoch_keys(l->cfg.seed, epoch, keys);
    uint64_t y = (uint64_t)i;
    do y = feistel(y, l->half_bits, keys);
    while (y >= (uint64_t)l->sequences);
    return (int64_t)y;
}

static zoe_status check_config(const zoe_dataset *ds, const zoe_loader_config *c) {
    if (c->seq_len < 1 || c->micro_batch < 1 || c->grad_accum < 1 || c->dp_size < 1 ||
        c->dp_rank < 0 || c->dp_rank >= c->dp_size || c->vocab_size < 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "loader: seq_len=%lld micro_batch=%d grad_accum=%d dp_size=%d "
                        "dp_rank=%d vocab_size=%d (need seq_len, micro_batch, grad_accum, "
                        "dp_size >= 1, 0 <= dp_rank < dp_size, vocab_size >= 0)",
                        (long long)c->seq_len, c->micro_batch, c->grad_accum, c->dp_size,
                        c->dp_rank, (int)c->vocab_size);
    return ZOE_OK;
}

zoe_status zoe_loader_create(const zoe_dataset *ds, const zoe_loader_config *cfg,
                             zoe_loader **out) {
    if (!out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_loader_create: out is NULL");
    *out = NULL;
    if (!ds || !cfg) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_loader_create: NULL argument");
    ZOE_TRY(check_config(ds, cfg));
    int64_t tokens = zoe_dataset_tokens(ds);
    int64_t sequences = tokens > 0 ? (tokens - 1) / cfg->seq_len : 0;
    int64_t global = (int64_t)cfg->dp_size * cfg->grad_accum * cfg->micro_batch;
    if (sequences < global)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "'%s': %lld tokens make %lld sequences of seq_len=%lld (+1), fewer than "
                        "one global batch of %lld (dp %d x grad_accum %d x micro_batch %d)",
                        zoe_dataset_name(ds), (long long)tokens, (long long)sequences,
                        (long long)cfg->seq_len, (long long)global, cfg->dp_size, cfg->grad_accum,
                        cfg->micro_batch);
    zoe_loader *l = malloc(sizeof *l);
    if (!l) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "loader");
    *l = (zoe_loader){.ds = ds,
                      .cfg = *cfg,
                      .sequences = sequences,
                      .global_batch = global,
                      .steps_per_epoch = sequences / global,
                      .half_bits = 1};
    while ((1ull << (2 * l->half_bits)) < (uint64_t)sequences) l->half_bits++;
    *out = l;
    return ZOE_OK;
}

void zoe_loader_destroy(zoe_loader *loader) {
    free(loader);
}

int64_t zoe_loader_sequences(const zoe_loader *loader) {
    return loader->sequences;
}

int64_t zoe_loader_steps_per_epoch(const zoe_loader *loader) {
    return loader->steps_per_epoch;
}

zoe_status zoe_loader_sequence_index(const zoe_loader *loader, int64_t step, int micro_step,
                                     int row, int64_t *sequence) {
    if (!loader || !sequence)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_loader_sequence_index: NULL argument");
    const zoe_loader_config *c = &loader->cfg;
    if (step < 0 || micro_step < 0 || micro_step >= c->grad_accum || row < 0 ||
        row >= c->micro_batch)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "loader: step=%lld micro_step=%d row=%d (need step >= 0, micro_step in "
                        "[0, %d), row in [0, %d))",
                        (long long)step, micro_step, row, c->grad_accum, c->micro_batch);
    /* This rank's share of the global batch is contiguous, micro-batch after micro-batch. */
    int64_t in_batch = ((int64_t)c->dp_rank * c->grad_accum + micro_step) * c->micro_batch + row;
    int64_t epoch = step / loader->steps_per_epoch;
    int64_t in_epoch = (step % loader->steps_per_epoch) * loader->global_batch + in_batch;
    *sequence = permute(loader, epoch, in_epoch);
    return ZOE_OK;
}

static zoe_status check_vocab(const zoe_loader *l, const int32_t *t, int64_t n, int64_t offset) {
    int32_t vocab = l->cfg.vocab_size;
    if (vocab == 0) return ZOE_OK;
    for (int64_t i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= vocab)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "'%s': token %d at stream position %lld is outside the vocabulary "
                            "of %d",
                            zoe_dataset_name(l->ds), t[i], (long long)(offset + i), vocab);
    return ZOE_OK;
}

zoe_status zoe_loader_fetch(const zoe_loader *loader, int64_t step, int micro_step, int32_t *tokens,
                            int32_t *targets) {
    if (!loader || !tokens || !targets)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_loader_fetch: NULL argument");
    int64_t len = loader->cfg.seq_len;
    for (int row = 0; row < loader->cfg.micro_batch; row++) {
        int64_t seq;
        ZOE_TRY(zoe_loader_sequence_index(loader, step, micro_step, row, &seq));
        int32_t *x = tokens + row * len, *y = targets + row * len;
        /* Two reads of the window instead of a scratch buffer keep fetch reentrant. */
        ZOE_TRY(zoe_dataset_read(loader->ds, seq * len, len, x));
        ZOE_TRY(zoe_dataset_read(loader->ds, seq * len + 1, len, y));
        ZOE_TRY(check_vocab(loader, x, len, seq * len));
        ZOE_TRY(check_vocab(loader, y + len - 1, 1, seq * len + len));
    }
    return ZOE_OK;
}
