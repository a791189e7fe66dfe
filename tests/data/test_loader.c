/* The loader over a random-token dataset: rows are the dataset windows it names (checked
 * against zoe_dataset_read), targets are inputs shifted by one, a global batch is disjoint
 * across DP ranks, an epoch covers steps_per_epoch * global distinct sequences, epochs and
 * seeds shuffle differently, the same arguments give the same batch whatever was fetched
 * before, and bad configurations and out-of-vocabulary tokens fail naming the value. */
#include <stdlib.h>
#include "data_util.h"
#include "zoe/data.h"

enum { SEQ_LEN = 16, MICRO = 3, DP = 4, ACCUM = 2, GLOBAL = DP * ACCUM * MICRO };
enum { TOKENS = 5200 }; /* (5200 - 1) / 16 = 324 sequences: 13 steps of 24, 12 left over */

static zoe_loader_config config(int dp_rank, uint64_t seed) {
    return (zoe_loader_config){.seq_len = SEQ_LEN,
                               .micro_batch = MICRO,
                               .dp_size = DP,
                               .dp_rank = dp_rank,
                               .grad_accum = ACCUM,
                               .seed = seed,
                               .vocab_size = ZOE_BYTE_VOCAB_SIZE};
}

/* The GLOBAL sequence indices of one step, ordered by (dp_rank, micro_step, row). */
static void global_batch(zoe_loader *const *loaders, int64_t step, int64_t *seqs) {
    for (int r = 0; r < DP; r++)
        for (int m = 0; m < ACCUM; m++)
            for (int b = 0; b < MICRO; b++) {
                int64_t *s = &seqs[(r * ACCUM + m) * MICRO + b];
                *s = -1;
                CHECK_OK(zoe_loader_sequence_index(loaders[r], step, m, b, s));
            }
}

/* Each epoch: every step disjoint, the epoch's sequences distinct and in range; epoch 1 is
 * ordered differently from epoch 0. */
static void check_epochs(zoe_loader *const *loaders, int64_t n_seq, int64_t steps) {
    char *seen = malloc((size_t)n_seq);
    int64_t *order[2] = {malloc(sizeof(int64_t) * (size_t)(steps * GLOBAL)),
                         malloc(sizeof(int64_t) * (size_t)(steps * GLOBAL))};
    for (int e = 0; e < 2; e++) {
        memset(seen, 0, (size_t)n_seq);
        int64_t repeats = 0, out_of_range = 0;
        for (int64_t s = 0; s < steps; s++) {
            int64_t *seqs = order[e] + s * GLOBAL;
            global_batch(loaders, e * steps + s, seqs);
            for (int i = 0; i < GLOBAL; i++) {
                if (seqs[i] < 0 || seqs[i] >= n_seq) {
                    out_of_range++;
                    continue;
                }
                repeats += seen[seqs[i]];
                seen[seqs[i]] = 1;
            }
        }
        CHECK(out_of_range == 0 && repeats == 0,
              "epoch %d: %lld sequences out of range, %lld repeated (DP shares must be disjoint)",
              e, (long long)out_of_range, (long long)repeats);
    }
    int64_t same = 0, fixed = 0, rising = 0, n = steps * GLOBAL;
    for (int64_t i = 0; i < n; i++) {
        same += order[0][i] == order[1][i];
        fixed += order[0][i] == i;
        if (i) rising += order[0][i] > order[0][i - 1];
    }
    /* A random order of ~300 has about one fixed point and rises about half the time. */
    CHECK(same < n / 10, "epochs 0 and 1 agree at %lld of %lld positions", (long long)same,
          (long long)n);
    CHECK(fixed < n / 10, "%lld fixed points of %lld: not shuffled", (long long)fixed,
          (long long)n);
    CHECK(rising > n / 3 && rising < 2 * n / 3, "order rises %lld times in %lld", (long long)rising,
          (long long)n);
    free(seen);
    free(order[0]);
    free(order[1]);
}

/* fetch fills rows with the windows sequence_index names; targets are inputs shifted by one. */
static void check_fetch(const zoe_dataset *ds, zoe_loader *const *loaders, int64_t step) {
    int32_t tokens[MICRO * SEQ_LEN], targets[MICRO * SEQ_LEN], window[SEQ_LEN + 1];
    for (int r = 0; r < DP; r++)
        for (int m = 0; m < ACCUM; m++) {
            for (int i = 0; i < MICRO * SEQ_LEN; i++) tokens[i] = targets[i] = -3;
            if (!CHECK_OK(zoe_loader_fetch(loaders[r], step, m, tokens, targets))) continue;
            for (int b = 0; b < MICRO; b++) {
                int64_t seq;
                CHECK_OK(zoe_loader_sequence_index(loaders[r], step, m, b, &seq));
                CHECK_OK(zoe_dataset_read(ds, seq * SEQ_LEN, SEQ_LEN + 1, window));
                int bad = 0;
                for (int i = 0; i < SEQ_LEN; i++) {
                    bad += tokens[b * SEQ_LEN + i] != window[i];
                    bad += targets[b * SEQ_LEN + i] != window[i + 1];
                    if (i + 1 < SEQ_LEN)
                        bad += targets[b * SEQ_LEN + i] != tokens[b * SEQ_LEN + i + 1];
                }
                CHECK(bad == 0, "step %lld rank %d micro %d row %d: %d tokens wrong",
                      (long long)step, r, m, b, bad);
            }
        }
}

/* Same configuration, fresh loader, other steps fetched in between: the same batch. A new seed
 * gives another batch. */
static void check_determinism(const zoe_dataset *ds, zoe_loader *const *loaders) {
    int32_t a[MICRO * SEQ_LEN], at[MICRO * SEQ_LEN], b[MICRO * SEQ_LEN], bt[MICRO * SEQ_LEN];
    zoe_loader_config cfg = config(2, 1234);
    zoe_loader *again, *reseeded;
    if (!CHECK_OK(zoe_loader_create(ds, &cfg, &again))) return;
    CHECK_OK(zoe_loader_fetch(loaders[2], 20, 1, a, at));
    CHECK_OK(zoe_loader_fetch(again, 3, 0, b, bt)); /* unrelated fetch first */
    CHECK_OK(zoe_loader_fetch(again, 20, 1, b, bt));
    CHECK(memcmp(a, b, sizeof a) == 0 && memcmp(at, bt, sizeof at) == 0,
          "same seed, same (step, micro_step): same batch");
    cfg.seed = 1235;
    if (CHECK_OK(zoe_loader_create(ds, &cfg, &reseeded))) {
        int differ = 0;
        for (int64_t step = 0; step < 4; step++) {
            CHECK_OK(zoe_loader_fetch(loaders[2], step, 0, a, at));
            CHECK_OK(zoe_loader_fetch(reseeded, step, 0, b, bt));
            differ += memcmp(a, b, sizeof a) != 0;
        }
        CHECK(differ == 4, "seed 1235 differs from 1234 in %d of 4 steps", differ);
        zoe_loader_destroy(reseeded);
    }
    zoe_loader_destroy(again);
}

static void check_errors(const zoe_dataset *ds, const zoe_loader *loader) {
    zoe_loader *l = (zoe_loader *)0x1;
    zoe_loader_config cfg = config(4, 1);
    CHECK(zoe_loader_create(ds, &cfg, &l) == ZOE_ERR_INVALID_ARGUMENT && l == NULL &&
              strstr(zoe_last_error(), "dp_rank=4"),
          "dp_rank 4 of 4 rejected: '%s'", zoe_last_error());
    cfg = config(0, 1), cfg.seq_len = 0;
    CHECK(zoe_loader_create(ds, &cfg, &l) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "seq_len=0"),
          "seq_len 0 rejected: '%s'", zoe_last_error());
    cfg = config(0, 1), cfg.micro_batch = 20; /* 4 x 2 x 20 = 160 of 324: fine */
    if (CHECK_OK(zoe_loader_create(ds, &cfg, &l))) zoe_loader_destroy(l);
    cfg.micro_batch = 41; /* 328 > 324 */
    CHECK(zoe_loader_create(ds, &cfg, &l) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "324 sequences") &&
              strstr(zoe_last_error(), "global batch of 328"),
          "global batch over the dataset rejected: '%s'", zoe_last_error());
    int32_t t[MICRO * SEQ_LEN], y[MICRO * SEQ_LEN];
    CHECK(zoe_loader_fetch(loader, 0, ACCUM, t, y) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "micro_step=2"),
          "micro_step 2 of 2 rejected: '%s'", zoe_last_error());
    CHECK(zoe_loader_fetch(loader, -1, 0, t, y) == ZOE_ERR_INVALID_ARGUMENT, "step -1 rejected");
    cfg = config(0, 1), cfg.vocab_size = 100; /* the data hold ids up to 256 */
    if (CHECK_OK(zoe_loader_create(ds, &cfg, &l))) {
        zoe_status st = zoe_loader_fetch(l, 0, 0, t, y);
        CHECK(st == ZOE_ERR_INVALID_ARGUMENT && strstr(zoe_last_error(), "vocabulary of 100"),
              "token outside vocab 100 rejected: '%s'", zoe_last_error());
        zoe_loader_destroy(l);
    }
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    char dir[256], prefix[512];
    tmpdir_create(dir);
    snprintf(prefix, sizeof prefix, "%s/random", dir);
    test_rng rng;
    test_rng_seed(&rng, 2024);
    int32_t *all = malloc(TOKENS * sizeof *all);
    for (int i = 0; i < TOKENS; i++) all[i] = (int32_t)test_rng_int(&rng, 0, 256);
    zoe_dataset_writer *w;
    zoe_dataset *ds = NULL;
    if (CHECK_OK(zoe_dataset_writer_create(prefix, ZOE_TOKENS_UINT16, &w))) {
        for (int d = 0; d < 4; d++) /* four documents of 1300 tokens */
            CHECK_OK(zoe_dataset_writer_add_document(w, all + d * 1300, 1300));
        CHECK_OK(zoe_dataset_writer_finish(w));
        zoe_dataset_writer_destroy(w);
    }
    zoe_loader *loaders[DP] = {0};
    if (CHECK_OK(zoe_dataset_open_indexed(prefix, &ds))) {
        int ok = 1;
        for (int r = 0; r < DP; r++) {
            zoe_loader_config cfg = config(r, 1234);
            ok &= CHECK_OK(zoe_loader_create(ds, &cfg, &loaders[r]));
        }
        if (ok) {
            int64_t n_seq = zoe_loader_sequences(loaders[0]);
            int64_t steps = zoe_loader_steps_per_epoch(loaders[0]);
            CHECK(n_seq == 324 && steps == 13, "%lld sequences, %lld steps per epoch",
                  (long long)n_seq, (long long)steps);
            check_epochs(loaders, n_seq, steps);
            for (int64_t step = 0; step < 30; step += 7) check_fetch(ds, loaders, step);
            check_determinism(ds, loaders);
            check_errors(ds, loaders[0]);
        }
        for (int r = 0; r < DP; r++) zoe_loader_destroy(loaders[r]);
        zoe_dataset_destroy(ds);
    }
    free(all);
    tmpdir_remove(dir);
    return test_finish("test_loader");
}
