/* The model of models/gpt.h (vocab-parallel embedding, 2 blocks, final norm, LM head,
 * vocab-parallel cross-entropy), GPT and Llama, at TP = world size against the same stack at
 * TP = 1 on this rank (MPI_COMM_SELF), and at 4 ranks also TP = 2 x DP = 2: loss, logits and
 * every gradient in global layout; after SGD steps the replicated parameters are bit-identical
 * across TP ranks, and so are the KV heads replicated over ranks; each layer's traffic equals the
 * formula. The Llama shapes: 4 query heads over 2 KV heads (at TP=4 each KV head is replicated
 * on 2 ranks; at TP=2 split) with an untied head and Llama 3 RoPE scaling, and 4 over 1 KV head
 * (replicated on every rank at TP=2 and 4) with a tied head.
 *
 * Tolerances, relative to the largest magnitude of the reference tensor (|got - want| <=
 * tol * max|want| + tol * |want|): the two runs differ only in the order of sums (the split
 * matmul reductions, the all-reduces, the split softmax sums), so
 *  - fp32: eps32 = 1.2e-7 per rounding over a few hundred-term dot products chained through
 *    ~20 ops forward and back gives ~1e-6 (measured: 8e-7 at TP=4); tol = 2e-5, a 25x margin;
 *  - bf16: every op rounds its output to bf16 (2^-8 = 3.9e-3 relative), and rounding of
 *    differently ordered partial sums flips bf16 ulps; a few ulps through the chain:
 *    tol = 6e-2 (about 15 ulps; measured: 1.4e-2 at TP=4). A wrong split, a bias added t
 *    times or a missing all-reduce gives O(1) errors (checked by breaking each once).
 * TP_VERBOSE=1 prints the measured errors. */
#include <math.h>
#include <stdlib.h>
#include "stack.h"
#include "testing.h"

static zoe_gpt_config config(zoe_dtype dt, float dropout) {
    return (zoe_gpt_config){.shape = {.vocab = 257,
                                      .hidden = 64,
                                      .heads = 4,
                                      .ffn = 256,
                                      .layers = 2,
                                      .seq_len = 17,
                                      .dropout = dropout},
                            .micro_batch = 2,
                            .pad_multiple = 128,
                            .dtype = dt,
                            .seed = 77};
}

static zoe_gpt_config llama_config(zoe_dtype dt, int kv_heads, int tied) {
    zoe_gpt_config c = config(dt, 0.0f);
    c.shape.family = ZOE_MODEL_LLAMA;
    c.shape.kv_heads = kv_heads;
    c.shape.ffn = 96;
    c.shape.rope_theta = 10000.0f;
    c.shape.norm_eps = 1e-6f;
    c.shape.tie_embeddings = tied;
    if (!tied)
        c.shape.rope_scaling = (zoe_rope_scaling){.factor = 8.0f,
                                                  .low_freq_factor = 1.0f,
                                                  .high_freq_factor = 4.0f,
                                                  .original_max_position = 8};
    return c;
}

static double tol_of(zoe_dtype dt) {
    return dt == ZOE_F32 ? 2e-5 : 6e-2;
}

static int64_t tokens_of(const zoe_gpt_config *c) {
    return c->micro_batch * c->shape.seq_len;
}

static void batch(const zoe_gpt_config *c, uint64_t salt, int32_t *tokens, int32_t *targets) {
    test_rng rng;
    test_rng_seed(&rng, 500 + salt); /* same on every rank */
    int32_t V = c->shape.vocab;
    for (int64_t i = 0; i < tokens_of(c); i++) {
        tokens[i] = (int32_t)test_rng_int(&rng, 0, V - 1);
        targets[i] = (int32_t)test_rng_int(&rng, 0, V - 1);
    }
    targets[3] = ZOE_GPT_IGNORE_INDEX; /* ignored rows contribute nothing */
    targets[4] = V - 1;                /* the last real id lives on the last real shard */
}

static void compare(const double *got, const double *want, size_t n, double tol, const char *what) {
    double amax = 0;
    for (size_t i = 0; i < n; i++) amax = fmax(amax, fabs(want[i]));
    CHECK(amax > 0, "%s: reference is all zero", what);
    double worst = 0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(got[i] - want[i]) / amax);
    if (getenv("TP_VERBOSE") && test_rank() == 0) printf("  %-50s worst %.3g\n", what, worst);
    CHECK_CLOSE(got, want, n, tol * amax, tol, what);
}

static void compare_logits(stack *par, stack *ref, double tol, const char *tag) {
    int64_t n = tokens_of(&par->cfg) * zoe_gpt_embedding(par->gpt)->vocab.padded;
    double *a = malloc((size_t)n * sizeof(double)), *b = malloc((size_t)n * sizeof(double));
    CHECK_OK(stack_logits(par, a));
    CHECK_OK(stack_logits(ref, b));
    char what[96];
    snprintf(what, sizeof what, "%s logits", tag);
    compare(a, b, (size_t)n, tol, what);
    free(a), free(b);
}

static void compare_params(stack *par, stack *ref, bool of_grad, double tol, const char *tag) {
    for (int i = 0; i < par->ntensors; i++) {
        const zoe_tp_param *p = zoe_gpt_tensor(par->gpt, i);
        size_t n = (size_t)(p->global_shape[0] * p->global_shape[1]);
        double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double));
        CHECK_OK(stack_param_global(par, i, of_grad, a));
        CHECK_OK(stack_param_global(ref, i, of_grad, b));
        char what[192];
        snprintf(what, sizeof what, "%s %s %s", tag, p->name, of_grad ? "grad" : "weight");
        if (of_grad && (strcmp(p->name, "wte") == 0 || strcmp(p->name, "lm_head.weight") == 0)) {
            /* padding rows [vocab, padded) never receive gradient */
            size_t pad0 = (size_t)par->cfg.shape.vocab * (size_t)par->cfg.shape.hidden, bad = 0;
            for (size_t j = pad0; j < n; j++) bad += a[j] != 0 || b[j] != 0;
            CHECK(bad == 0, "%s: %zu nonzero gradients in padding rows", what, bad);
        }
        compare(a, b, n, tol, what);
        free(a), free(b);
    }
}

static void check_traffic(stack *s) {
    int t = s->tp->size;
    zoe_dtype dt = s->cfg.dtype;
    int64_t N = tokens_of(&s->cfg), B = s->cfg.micro_batch, T = s->cfg.shape.seq_len;
    uint64_t act = t > 1 ? (uint64_t)(N * s->cfg.shape.hidden) * zoe_dtype_size(dt) : 0;
    for (int l = 0; l < s->cfg.shape.layers; l++) {
        const zoe_tp_block *blk = zoe_gpt_block(s->gpt, l);
        const zoe_tp_llama_block *lblk = zoe_gpt_llama_block(s->gpt, l);
        /* Llama: the same 2 all-reduces each way over TP (the KV replicas' sum runs on their
         * own communicator) */
        uint64_t f = blk ? zoe_tp_block_comm_bytes_formula(blk, B, T, dt, t) : 2 * act;
        const zoe_tp_traffic tr = blk ? blk->traffic : lblk->traffic;
        CHECK(f == 2 * act, "formula %llu, want 2 all-reduces of %llu", (unsigned long long)f,
              (unsigned long long)act);
        CHECK(tr.forward == f && tr.backward == f, "layer %d traffic %llu/%llu bytes, formula %llu",
              l, (unsigned long long)tr.forward, (unsigned long long)tr.backward,
              (unsigned long long)f);
    }
    const zoe_tp_embedding *emb = zoe_gpt_embedding(s->gpt);
    CHECK(emb->traffic.forward == act && emb->traffic.backward == 0, "embedding traffic");
    /* head: nothing forward but the loss's row max and (sum_exp, target) fp32 all-reduces */
    uint64_t loss = t > 1 ? (uint64_t)(3 * N) * sizeof(float) : 0;
    CHECK(emb->head_traffic.forward == loss && emb->head_traffic.backward == act,
          "head traffic %llu/%llu", (unsigned long long)emb->head_traffic.forward,
          (unsigned long long)emb->head_traffic.backward);
}

/* Every rank of the TP group holds the same bits of every replicated parameter; a sharded
 * tensor's replicas hold their block's bits (the gathered tensor takes each block from its
 * first replica). */
static void check_replicated_identical(stack *s, MPI_Comm tp_group, const char *tag) {
    for (int i = 0; i < s->ntensors; i++) {
        const zoe_tp_param *p = zoe_gpt_tensor(s->gpt, i);
        if (!p->replicated && p->replicas > 1) {
            size_t n = (size_t)(p->global_shape[0] * p->global_shape[1]);
            double *global = malloc(n * sizeof(double)), *mine = malloc(n * sizeof(double));
            CHECK_OK(stack_param_global(s, i, false, global));
            size_t bytes = (size_t)p->local_numel * zoe_dtype_size(s->cfg.dtype);
            char *raw = malloc(bytes);
            CHECK_OK(zoe_memcpy_async(raw, p->data, bytes, ZOE_COPY_DEVICE_TO_HOST, s->stream));
            CHECK_OK(zoe_stream_synchronize(s->stream));
            size_t off = (size_t)(p->local_offset[0] * p->global_shape[1]), bad = 0;
            for (size_t j = 0; j < (size_t)p->local_numel; j++)
                bad += stack_load(s->cfg.dtype, raw, j) != global[off + j];
            CHECK(bad == 0, "%s %s: %zu elements of this replica differ from the first", tag,
                  p->name, bad);
            free(global), free(mine), free(raw);
        }
        if (!p->replicated) continue;
        size_t bytes = (size_t)p->local_numel * zoe_dtype_size(s->cfg.dtype);
        char *mine = malloc(bytes), *root = malloc(bytes);
        CHECK_OK(zoe_memcpy_async(mine, p->data, bytes, ZOE_COPY_DEVICE_TO_HOST, s->stream));
        CHECK_OK(zoe_stream_synchronize(s->stream));
        memcpy(root, mine, bytes);
        MPI_Bcast(root, (int)bytes, MPI_BYTE, 0, tp_group);
        CHECK(memcmp(mine, root, bytes) == 0, "%s %s: replicated copy drifted from TP rank 0", tag,
              p->name);
        free(mine), free(root);
    }
}

/* TP group from the grid (tp x dp = world): each TP group runs the model on the same batches.
 * Both models count forwards alike, so they draw the same dropout masks (step = micro step). */
static void run(zoe_gpt_config cfg, int tp_size) {
    const zoe_dtype dt = cfg.dtype;
    double tol = tol_of(dt);
    int64_t N = tokens_of(&cfg);
    int32_t *tokens = malloc((size_t)N * 4), *targets = malloc((size_t)N * 4);
    char tag[72];
    snprintf(tag, sizeof tag, "%s %s kv=%d%s p=%.1f tp=%d dp=%d",
             zoe_model_family_name(cfg.shape.family), zoe_dtype_name(dt), cfg.shape.kv_heads,
             cfg.shape.tie_embeddings ? " tied" : "", (double)cfg.shape.dropout, tp_size,
             test_world_size() / tp_size);
    stack *ref = NULL, *par = NULL;
    zoe_grid *grid = NULL;
    if (!CHECK_OK(zoe_grid_create(MPI_COMM_WORLD, tp_size, &grid)) ||
        !CHECK_OK(stack_create(&cfg, MPI_COMM_SELF, &ref)) ||
        !CHECK_OK(stack_create(&cfg, zoe_grid_tp_comm(grid), &par)))
        goto done;
    batch(&cfg, 0, tokens, targets);
    CHECK_OK(stack_forward(ref, tokens, targets));
    CHECK_OK(stack_forward(par, tokens, targets));
    CHECK(zoe_gpt_loss_count(par->gpt) == N - 1 && zoe_gpt_loss_count(ref->gpt) == N - 1,
          "%s: %lld counted rows", tag, (long long)zoe_gpt_loss_count(par->gpt));
    double log_v = log((double)cfg.shape.vocab);
    CHECK(isfinite(ref->loss) && fabs(ref->loss - log_v) < 0.5,
          "%s: initial loss %g, want near log(vocab) = %g", tag, ref->loss, log_v);
    CHECK(fabs(par->loss - ref->loss) <= tol * fabs(ref->loss), "%s: loss %.9g, TP=1 %.9g", tag,
          par->loss, ref->loss);
    compare_logits(par, ref, tol, tag);
    CHECK_OK(stack_backward(ref));
    CHECK_OK(stack_backward(par));
    check_traffic(par);
    compare_params(par, ref, true, tol, tag);

    /* a few SGD steps on fresh batches: replicated parameters stay bit-identical across ranks
     * and the weights keep matching TP=1 */
    for (int step = 1; step <= 3; step++) {
        CHECK_OK(stack_sgd(ref, 0.5f));
        CHECK_OK(stack_sgd(par, 0.5f));
        CHECK_OK(stack_zero_grads(ref));
        CHECK_OK(stack_zero_grads(par));
        batch(&cfg, (uint64_t)step, tokens, targets);
        CHECK_OK(stack_forward(ref, tokens, targets));
        CHECK_OK(stack_forward(par, tokens, targets));
        CHECK_OK(stack_backward(ref));
        CHECK_OK(stack_backward(par));
    }
    check_replicated_identical(par, zoe_grid_tp_comm(grid), tag);
    CHECK(fabs(par->loss - ref->loss) <= tol * fabs(ref->loss),
          "%s: loss after SGD %.9g, TP=1 %.9g", tag, par->loss, ref->loss);
    char after[96];
    snprintf(after, sizeof after, "%s after SGD", tag);
    compare_params(par, ref, false, tol, after);
    if (test_rank() == 0) printf("%s: loss %.6f (TP=1 %.6f)\n", tag, par->loss, ref->loss);
done:
    stack_destroy(par);
    stack_destroy(ref);
    zoe_grid_destroy(grid);
    free(tokens), free(targets);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    int world = test_world_size();
    run(config(ZOE_F32, 0.0f), world);
    run(config(ZOE_F32, 0.1f), world);
    run(config(ZOE_BF16, 0.0f), world);
    if (world == 4) run(config(ZOE_F32, 0.1f), 2); /* TP=2 x DP=2: TP groups from the grid */
    run(llama_config(ZOE_F32, 2, 0), world);
    run(llama_config(ZOE_F32, 1, 1), world);
    run(llama_config(ZOE_BF16, 2, 0), world);
    if (world == 4) run(llama_config(ZOE_F32, 2, 1), 2);
    return test_finish("test_tp_stack");
}
