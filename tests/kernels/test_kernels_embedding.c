/* Token + position embedding forward and backward against float64 references, fp32 and bf16:
 * a vocabulary shard [vocab_start, vocab_start + vocab_rows) with tokens inside and outside
 * it (rows of out-of-range tokens are 0 + wpe, and they add nothing to dwte), with and without
 * wpe, a small vocabulary so tokens repeat (the scatter-add must sum every occurrence), and
 * accumulation into random initial gradients. The backward is also run twice with different
 * thread counts: the result must be bit-identical (deterministic).
 *
 * Tolerances: forward is one fp32 addition (u32 of the operands) and one storage rounding;
 * a gradient row summing n occurrences is within (n + 2) u32 sum|terms|, plus 2^-8 of the
 * value for bf16 storage. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include "kernel_test.h"

static void run_case(kt_env *env, test_rng *rng, zoe_dtype dt, int64_t B, int64_t T, int64_t C,
                     int64_t vocab, int64_t vs, int64_t vr, int with_wpe) {
    char what[160];
    snprintf(what, sizeof what, "embedding %s B=%lld T=%lld C=%lld shard [%lld,+%lld) wpe=%d",
             zoe_dtype_name(dt), (long long)B, (long long)T, (long long)C, (long long)vs,
             (long long)vr, with_wpe);
    const size_t n = (size_t)(B * T * C);
    int32_t *tok = malloc((size_t)(B * T) * sizeof(int32_t));
    for (int64_t i = 0; i < B * T; i++) tok[i] = (int32_t)test_rng_int(rng, 0, vocab - 1);
    double *wte = kt_random(rng, (size_t)(vr * C), -1, 1);
    double *wpe = with_wpe ? kt_random(rng, (size_t)(T * C), -1, 1) : NULL;
    void *wtes = kt_to_storage(dt, wte, (size_t)(vr * C));
    void *wpes = with_wpe ? kt_to_storage(dt, wpe, (size_t)(T * C)) : NULL;
    void *ys = kt_poisoned(dt, n);
    double *y = kt_vec(n), *tol = kt_vec(n);
    for (int64_t i = 0; i < B * T; i++)
        for (int64_t c = 0; c < C; c++) {
            int64_t v = tok[i] - vs;
            double e = v >= 0 && v < vr ? wte[v * C + c] : 0.0;
            double p = with_wpe ? wpe[(i % T) * C + c] : 0.0;
            y[i * C + c] = e + p;
            tol[i * C + c] = KT_U32 * (fabs(e) + fabs(p));
        }
    CHECK_OK(zoe_embedding_forward(env->k, dt, ys, tok, wtes, wpes, B, T, C, vs, vr));
    kt_check_storage(ys, dt, y, tol, kt_unit(dt), n, what);

    double *dy = kt_random(rng, n, -1, 1);
    void *dys = kt_to_storage(dt, dy, n);
    double *dwte = kt_random(rng, (size_t)(vr * C), -1, 1),
           *dwpe = kt_random(rng, (size_t)(T * C), -1, 1);
    void *dwtes = kt_to_storage(dt, dwte, (size_t)(vr * C));
    void *dwpes = kt_to_storage(dt, dwpe, (size_t)(T * C));
    void *dwtes2 = kt_to_storage(dt, dwte, (size_t)(vr * C));
    double *mte = kt_vec((size_t)(vr * C)), *mpe = kt_vec((size_t)(T * C));
    int64_t *occ = calloc((size_t)vr, sizeof(int64_t));
    for (size_t i = 0; i < (size_t)(vr * C); i++) mte[i] = fabs(dwte[i]);
    for (size_t i = 0; i < (size_t)(T * C); i++) mpe[i] = fabs(dwpe[i]);
    for (int64_t i = 0; i < B * T; i++) {
        int64_t v = tok[i] - vs;
        if (v >= 0 && v < vr) occ[v]++;
        for (int64_t c = 0; c < C; c++) {
            if (v >= 0 && v < vr)
                dwte[v * C + c] += dy[i * C + c], mte[v * C + c] += fabs(dy[i * C + c]);
            dwpe[(i % T) * C + c] += dy[i * C + c];
            mpe[(i % T) * C + c] += fabs(dy[i * C + c]);
        }
    }
    for (int64_t v = 0; v < vr; v++)
        for (int64_t c = 0; c < C; c++) mte[v * C + c] *= (double)(occ[v] + 2) * KT_U32;
    for (size_t i = 0; i < (size_t)(T * C); i++) mpe[i] *= (double)(B + 2) * KT_U32;
    CHECK_OK(zoe_embedding_backward(env->k, dt, dwtes, dwpes, dys, tok, B, T, C, vs, vr));
    kt_check_storage(dwtes, dt, dwte, mte, kt_unit(dt), (size_t)(vr * C), "embedding dwte");
    kt_check_storage(dwpes, dt, dwpe, mpe, kt_unit(dt), (size_t)(T * C), "embedding dwpe");
    /* one thread, dwte only: the same bits */
    kt_env one;
    zoe_kernel_plan plan = {.max_rows = B * T,
                            .max_dim = vr > C ? vr : C,
                            .max_seq = 1,
                            .max_heads = 1,
                            .max_head_dim = 1};
    kt_setup(&one, &plan, 1);
    CHECK_OK(zoe_embedding_backward(one.k, dt, dwtes2, NULL, dys, tok, B, T, C, vs, vr));
    CHECK(memcmp(dwtes, dwtes2, (size_t)(vr * C) * zoe_dtype_size(dt)) == 0,
          "%s: dwte differs between 1 and 3 threads", what);
    kt_teardown(&one);
    free(tok), free(wte), free(wpe), free(wtes), free(wpes), free(ys), free(y), free(tol);
    free(dy), free(dys), free(dwte), free(dwpe), free(dwtes), free(dwpes), free(dwtes2);
    free(mte), free(mpe), free(occ);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    test_rng rng;
    test_rng_seed(&rng, 9);
    zoe_kernel_plan plan = {
        .max_rows = 256, .max_dim = 1000, .max_seq = 1, .max_heads = 1, .max_head_dim = 1};
    kt_env env;
    kt_setup(&env, &plan, 3);
    for (int d = 0; d < 2; d++) {
        zoe_dtype dt = d ? ZOE_BF16 : ZOE_F32;
        run_case(&env, &rng, dt, 1, 1, 1, 1, 0, 1, 1);
        run_case(&env, &rng, dt, 4, 50, 96, 7, 0, 7, 1);         /* heavy repetition */
        run_case(&env, &rng, dt, 3, 37, 130, 1000, 400, 300, 1); /* shard of a larger vocab */
        run_case(&env, &rng, dt, 2, 64, 33, 50, 25, 25, 0);      /* second half, no wpe */
        run_case(&env, &rng, dt, 8, 32, 1000, 900, 0, 900, 1);
    }
    float y[4], w[4] = {1, 2, 3, 4};
    int32_t tok[2] = {0, 1};
    CHECK(zoe_embedding_forward(env.k, ZOE_F32, y, tok, w, NULL, 1, 2, 2, -1, 2) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "negative vocab_start");
    CHECK(strstr(zoe_last_error(), "vocab_start=-1") != NULL, "names it: %s", zoe_last_error());
    CHECK(zoe_embedding_forward(env.k, ZOE_F32, y, tok, w, NULL, 1, 2, 2, 0, 1001) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "vocab_rows over the plan");
    CHECK(zoe_embedding_backward(env.k, ZOE_F32, y, NULL, w, NULL, 1, 2, 2, 0, 2) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "NULL tokens");
    CHECK(zoe_embedding_forward(env.k, ZOE_F32, y, tok, w, NULL, 257, 1, 2, 0, 2) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "B*T over the plan");
    kt_teardown(&env);
    return test_finish("test_kernels_embedding");
}
