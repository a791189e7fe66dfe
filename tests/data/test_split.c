/* --split by documents (zoe_dataset_split_documents, zoe_dataset_subset) on a random indexed
 * dataset of documents of random lengths:
 *  - the split count is round(D * T / 100), recomputed in double for many D and T, and an
 *    empty part or percentages that are not two positives summing to 100 fail naming them;
 *  - the two subsets are the parent's documents [0, n) and [n, D) exactly: every document's
 *    tokens, the two streams back to back are the parent's stream, so they are disjoint and
 *    cover it; a subset of a subset reads the same parent documents;
 *  - the validation batches (the first K global batches of a loader over the validation
 *    subset) are the same set of windows at every DP size and micro-batch split of a global
 *    batch of 8, and each window reads the parent's tokens from the validation part only;
 *  - opening and splitting again gives the same subsets (deterministic). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "data_util.h"
#include "zoe/data.h"

enum { DOCS = 200, SEQ = 16, GLOBAL = 8, K = 3 };

static void make_dataset(const char *prefix, test_rng *rng) {
    zoe_dataset_writer *w = NULL;
    CHECK_OK(zoe_dataset_writer_create(prefix, ZOE_TOKENS_UINT16, &w));
    int32_t doc[200];
    for (int d = 0; d < DOCS; d++) {
        int64_t n = test_rng_int(rng, 1, 200);
        for (int64_t i = 0; i < n; i++) doc[i] = (int32_t)test_rng_int(rng, 0, 50000);
        CHECK_OK(zoe_dataset_writer_add_document(w, doc, n));
    }
    CHECK_OK(zoe_dataset_writer_finish(w));
    zoe_dataset_writer_destroy(w);
}

static void check_split_count(test_rng *rng) {
    for (int trial = 0; trial < 2000; trial++) {
        int64_t docs = trial < 1000 ? test_rng_int(rng, 2, 300) : test_rng_int(rng, 2, 1 << 30);
        int t = (int)test_rng_int(rng, 1, 99);
        int64_t want = llround((double)docs * t / 100.0), got = -1;
        zoe_status st = zoe_dataset_split_documents(docs, t, 100 - t, &got);
        if (want >= 1 && want < docs)
            CHECK(st == ZOE_OK && got == want, "%lld documents split %d,%d: %lld, want %lld",
                  (long long)docs, t, 100 - t, (long long)got, (long long)want);
        else
            CHECK(st != ZOE_OK && strstr(zoe_last_error(), "without a document"),
                  "%lld documents split %d,%d: status %d (%s), want a refusal", (long long)docs, t,
                  100 - t, (int)st, zoe_last_error());
    }
    int64_t n;
    const int bad[][2] = {{0, 100}, {100, 0}, {50, 49}, {60, 50}, {-2, 102}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char want[64];
        snprintf(want, sizeof want, "--split=%d,%d is not two positive", bad[i][0], bad[i][1]);
        CHECK(zoe_dataset_split_documents(100, bad[i][0], bad[i][1], &n) != ZOE_OK &&
                  strstr(zoe_last_error(), want),
              "split %d,%d: '%s', want '%s'", bad[i][0], bad[i][1], zoe_last_error(), want);
    }
    CHECK(zoe_dataset_split_documents(20, 99, 1, &n) != ZOE_OK &&
              strstr(zoe_last_error(), "of 20 documents leaves validation without a document"),
          "99,1 of 20 documents: '%s'", zoe_last_error());
}

static int32_t *read_all(const zoe_dataset *ds, int64_t offset, int64_t count) {
    int32_t *t = malloc((size_t)(count > 0 ? count : 1) * sizeof *t);
    CHECK_OK(zoe_dataset_read(ds, offset, count, t));
    return t;
}

/* Document d of sub holds the tokens of document first + d of parent. */
static void check_documents(const zoe_dataset *parent, const zoe_dataset *sub, int64_t first,
                            const char *what) {
    int64_t mismatched = 0, sub_off = 0;
    for (int64_t d = 0; d < zoe_dataset_documents(sub); d++) {
        int64_t po, pl, so, sl;
        CHECK_OK(zoe_dataset_document(parent, first + d, &po, &pl));
        CHECK_OK(zoe_dataset_document(sub, d, &so, &sl));
        if (pl != sl || so != sub_off) {
            mismatched++;
            continue;
        }
        int32_t *a = read_all(parent, po, pl), *b = read_all(sub, so, sl);
        mismatched += memcmp(a, b, (size_t)pl * sizeof *a) != 0;
        free(a), free(b);
        sub_off += sl;
    }
    CHECK(mismatched == 0 && sub_off == zoe_dataset_tokens(sub),
          "%s: %lld documents differ from the parent's; stream of %lld tokens, documents sum "
          "to %lld",
          what, (long long)mismatched, (long long)zoe_dataset_tokens(sub), (long long)sub_off);
}

/* The sorted stream windows (parent stream offsets) of the first K global batches, and whether
 * every row fetched equals the parent's tokens there. */
static void val_windows(const zoe_dataset *parent, const zoe_dataset *val, int64_t val_offset,
                        int dp, int micro, int64_t *windows, int64_t *wrong_rows) {
    int accum = GLOBAL / (dp * micro), i = 0;
    int32_t *x = malloc((size_t)micro * SEQ * sizeof *x),
            *y = malloc((size_t)micro * SEQ * sizeof *y);
    int32_t want[SEQ + 1];
    for (int r = 0; r < dp; r++) {
        zoe_loader_config lc = {.seq_len = SEQ,
                                .micro_batch = micro,
                                .dp_size = dp,
                                .dp_rank = r,
                                .grad_accum = accum,
                                .seed = 42};
        zoe_loader *l = NULL;
        if (!CHECK_OK(zoe_loader_create(val, &lc, &l))) break;
        for (int b = 0; b < K; b++)
            for (int m = 0; m < accum; m++) {
                CHECK_OK(zoe_loader_fetch(l, b, m, x, y));
                for (int row = 0; row < micro; row++) {
                    int64_t seq = -1;
                    CHECK_OK(zoe_loader_sequence_index(l, b, m, row, &seq));
                    windows[i++] = val_offset + seq * SEQ;
                    CHECK_OK(zoe_dataset_read(parent, val_offset + seq * SEQ, SEQ + 1, want));
                    *wrong_rows += memcmp(x + row * SEQ, want, SEQ * sizeof *x) != 0 ||
                                   memcmp(y + row * SEQ, want + 1, SEQ * sizeof *y) != 0;
                }
            }
        zoe_loader_destroy(l);
    }
    free(x), free(y);
    for (int a = 1; a < i; a++) /* insertion sort: K * GLOBAL entries */
        for (int b = a; b > 0 && windows[b - 1] > windows[b]; b--) {
            int64_t t = windows[b];
            windows[b] = windows[b - 1], windows[b - 1] = t;
        }
}

static void check_subsets(const char *prefix) {
    zoe_dataset *whole = NULL, *train = NULL, *val = NULL, *inner = NULL;
    if (!CHECK_OK(zoe_dataset_open(prefix, &whole))) return;
    int64_t n = 0, docs = zoe_dataset_documents(whole), val_off, len;
    CHECK_OK(zoe_dataset_split_documents(docs, 80, 20, &n));
    CHECK(n == 160, "80,20 of %lld documents: %lld to train", (long long)docs, (long long)n);
    CHECK_OK(zoe_dataset_subset(whole, 0, n, &train));
    CHECK_OK(zoe_dataset_subset(whole, n, docs - n, &val));
    if (!train || !val) goto done;
    CHECK(zoe_dataset_documents(train) == n && zoe_dataset_documents(val) == docs - n,
          "subsets of %lld and %lld documents", (long long)zoe_dataset_documents(train),
          (long long)zoe_dataset_documents(val));
    CHECK_OK(zoe_dataset_document(whole, n, &val_off, &len));
    CHECK(zoe_dataset_tokens(train) == val_off &&
              zoe_dataset_tokens(train) + zoe_dataset_tokens(val) == zoe_dataset_tokens(whole),
          "train %lld + validation %lld tokens, the parent %lld, validation starting at %lld",
          (long long)zoe_dataset_tokens(train), (long long)zoe_dataset_tokens(val),
          (long long)zoe_dataset_tokens(whole), (long long)val_off);
    int32_t *all = read_all(whole, 0, zoe_dataset_tokens(whole));
    int32_t *t = read_all(train, 0, zoe_dataset_tokens(train));
    int32_t *v = read_all(val, 0, zoe_dataset_tokens(val));
    CHECK(memcmp(all, t, (size_t)zoe_dataset_tokens(train) * sizeof *t) == 0 &&
              memcmp(all + val_off, v, (size_t)zoe_dataset_tokens(val) * sizeof *v) == 0,
          "the subsets' streams are not the parent's, back to back");
    free(all), free(t), free(v);
    check_documents(whole, train, 0, "train");
    check_documents(whole, val, n, "validation");
    CHECK_OK(zoe_dataset_subset(val, 3, 5, &inner));
    if (inner) check_documents(whole, inner, n + 3, "a subset of the validation subset");
    int32_t none[1];
    CHECK(zoe_dataset_read(val, 0, zoe_dataset_tokens(val) + 1, none) != ZOE_OK,
          "a read past the validation subset's end was accepted");
    CHECK(zoe_dataset_subset(whole, n, docs - n + 1, &(zoe_dataset *){NULL}) != ZOE_OK &&
              strstr(zoe_last_error(), "are not a non-empty part"),
          "a subset past the end: '%s'", zoe_last_error());

    /* every DP size and micro-batch split of the global batch sees the same windows */
    const int grids[][2] = {{1, 8}, {1, 4}, {1, 2}, {1, 1}, {2, 4}, {2, 2}, {2, 1}, {4, 2}, {4, 1}};
    int64_t ref[K * GLOBAL], got[K * GLOBAL], wrong = 0;
    val_windows(whole, val, val_off, 1, 8, ref, &wrong);
    for (size_t g = 1; g < sizeof grids / sizeof grids[0]; g++) {
        val_windows(whole, val, val_off, grids[g][0], grids[g][1], got, &wrong);
        CHECK(memcmp(ref, got, sizeof ref) == 0,
              "DP=%d micro-batch %d: other validation windows than DP=1 micro-batch 8", grids[g][0],
              grids[g][1]);
    }
    CHECK(wrong == 0, "%lld validation rows are not the parent's tokens at their window",
          (long long)wrong);
    int64_t distinct = 1;
    for (int i = 1; i < K * GLOBAL; i++) distinct += ref[i] != ref[i - 1];
    CHECK(ref[0] >= val_off && ref[K * GLOBAL - 1] + SEQ + 1 <= zoe_dataset_tokens(whole) &&
              distinct == K * GLOBAL,
          "validation windows from %lld to %lld (+%d), %lld distinct of %d: outside the "
          "validation part [%lld, %lld) or repeated",
          (long long)ref[0], (long long)ref[K * GLOBAL - 1], SEQ + 1, (long long)distinct,
          K * GLOBAL, (long long)val_off, (long long)zoe_dataset_tokens(whole));

    /* deterministic: the same split again */
    zoe_dataset *again = NULL;
    int64_t n2 = 0;
    CHECK_OK(zoe_dataset_split_documents(zoe_dataset_documents(whole), 80, 20, &n2));
    CHECK_OK(zoe_dataset_subset(whole, n2, docs - n2, &again));
    CHECK(again && n2 == n && zoe_dataset_tokens(again) == zoe_dataset_tokens(val) &&
              strcmp(zoe_dataset_name(again), zoe_dataset_name(val)) == 0,
          "the split again: %lld documents to train (first time %lld)", (long long)n2,
          (long long)n);
    zoe_dataset_destroy(again);
done:
    zoe_dataset_destroy(inner);
    zoe_dataset_destroy(train);
    zoe_dataset_destroy(val);
    zoe_dataset_destroy(whole);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    test_rng rng;
    test_rng_seed(&rng, 11);
    char dir[256], prefix[300];
    tmpdir_create(dir);
    snprintf(prefix, sizeof prefix, "%s/docs", dir);
    make_dataset(prefix, &rng);
    check_split_count(&rng);
    check_subsets(prefix);
    tmpdir_remove(dir);
    return test_finish("test_split");
}
