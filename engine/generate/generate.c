/* The generator (zoe/generate.h): a trainer rebuilt from the checkpoint's own configuration at
 * TP = the world size and one replica (dp 1, the saved global batch as accumulation steps, so
 * the checkpoint's batch check holds), its weights loaded by zoe_trainer_load at any grid, and the
 * model's KV-cache decoding path (models/gpt.h) driven token by token. The vocabulary-parallel
 * logits are gathered on every rank; rank 0 samples and broadcasts the token.
 *
 * Explained in docs/generate.md, "One replica, any TP". */
#include <stdlib.h>
#include <string.h>
#include "engine/checkpoint/directory.h"
#include "engine/config/config_impl.h"
#include "engine/train/trainer_impl.h"
#include "models/gpt.h"
#include "runtime/error.h"
#include "zoe/generate.h"
#include "zoe/grid.h"
#include "zoe/tokenizer.h"

/* Prompt tokens per prefill chunk: buffers of the chunk's size sit beside the model's own. */
enum { PREFILL_CHUNK = 256 };

struct zoe_generator {
    zoe_generate_config cfg;
    zoe_trainer *tr;
    zoe_gpt *gpt;
    zoe_gpt_kv_cache *cache;
    zoe_model_config model;
    int byte_tokens;
    int64_t chunk;
    MPI_Comm tp_comm;
    int rank, tp;
    void *raw;          /* host [chunk, vocab.local] in the compute dtype */
    float *local, *all; /* host fp32 [chunk, vocab.local] and [tp, chunk, vocab.local] */
    float *row;         /* host fp32 [vocab]: the last token's logits */
    double *work;       /* [vocab] for the sampler */
};

static zoe_status check_config(const zoe_generate_config *c, int world) {
    ZOE_TRY(
        zoe_check_struct_version("zoe_generate_config", c->struct_size, c->api_version, sizeof *c));
    if (!c->checkpoint[0])
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "no checkpoint given (--checkpoint DIR)");
    const int tp = c->tp ? c->tp : world;
    if (tp != world)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--tp %d with %d ranks: generation runs one model replica, so the world "
                        "size must equal --tp (mpirun -np %d)",
                        c->tp, world, c->tp);
    if (c->max_new_tokens <= 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--max-new-tokens %d must be positive",
                        c->max_new_tokens);
    return zoe_sampling_check(&c->sampling);
}

/* The data was zoe's byte tokens: a text corpus (zoe-train tokenizes it by bytes) or the byte
 * vocabulary. */
static int is_byte_data(const char *data, int vocab) {
    const size_t n = strlen(data);
    return vocab == ZOE_BYTE_VOCAB_SIZE || (n > 4 && strcmp(data + n - 4, ".txt") == 0);
}

/* The training configuration the checkpoint was written with, set up for one replica of tp
 * ranks that loads it and never trains. */
static zoe_status checkpoint_config(const zoe_generate_config *gc, int world, char *dir, size_t cap,
                                    zoe_train_config *tc, int *byte_tokens) {
    cJSON *root = NULL;
    ZOE_TRY(ckpt_open(gc->checkpoint, dir, cap, &root));
    cJSON *config = cJSON_GetObjectItemCaseSensitive(root, "config");
    const cJSON *batch = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(root, "data"), "global_batch");
    /* the shape is in the run's own keys; an --init-from would read the Hugging Face model
     * again, whose weights the checkpoint replaces anyway */
    if (cJSON_IsObject(config)) cJSON_DeleteItemFromObjectCaseSensitive(config, "init-from");
    char *text = cJSON_IsObject(config) ? cJSON_PrintUnformatted(config) : NULL;
    zoe_status st =
        text && cJSON_IsNumber(batch) && batch->valuedouble >= 1 && batch->valuedouble <= 1e9
            ? ZOE_OK
            : zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s/%s: no run configuration or global batch", dir,
                       CKPT_TRAINER_FILE);
    if (st == ZOE_OK) st = zoe_train_config_defaults(tc);
    if (st == ZOE_OK) st = zoe_train_config_apply_json(tc, text, dir);
    if (st == ZOE_OK) {
        *byte_tokens = is_byte_data(tc->data, tc->model.vocab);
        tc->backend = gc->backend;
        tc->tp = world;
        tc->micro_batch = 1;
        tc->grad_accum = (int)batch->valuedouble;
        tc->offload = ZOE_OFFLOAD_CPU;
        tc->offload_ratio = 1.0f;
        tc->dpu = ZOE_DPU_OFF;
        tc->dpu_warmup = 0;
        tc->stall_timeout = tc->stop_grace = 0; /* no training steps: no watchdog */
        tc->recompute = 1; /* the training forward never runs: keep its activations small */
        tc->data[0] = tc->metrics[0] = tc->save[0] = tc->resume[0] = tc->init_from[0] = '\0';
    }
    free(text);
    cJSON_Delete(root);
    return st;
}

static zoe_status alloc_buffers(zoe_generator *g) {
    const zoe_tp_embedding *e = zoe_gpt_embedding(g->gpt);
    const size_t rows = (size_t)g->chunk, local = (size_t)e->vocab.local;
    g->raw = malloc(rows * local * zoe_dtype_size(zoe_trainer_config(g->tr)->dtype));
    g->local = malloc(rows * local * sizeof(float));
    g->all = malloc((size_t)g->tp * rows * local * sizeof(float));
    g->row = malloc((size_t)g->model.vocab * sizeof(float));
    g->work = malloc((size_t)g->model.vocab * sizeof(double));
    if (!g->raw || !g->local || !g->all || !g->row || !g->work)
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "generator buffers for %zu x %zu logits", rows,
                        local);
    return ZOE_OK;
}

zoe_status zoe_generator_create(MPI_Comm world, const zoe_generate_config *cfg,
                                zoe_generator **out) {
    if (!cfg || !out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_generator_create: NULL");
    *out = NULL;
    int size;
    MPI_Comm_size(world, &size);
    ZOE_TRY(check_config(cfg, size));
    zoe_generator *g = calloc(1, sizeof *g);
    if (!g) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "generator");
    g->cfg = *cfg;
    char dir[ZOE_PATH_MAX];
    zoe_train_config tc;
    /* every rank reads trainer.json (the ranks share the checkpoint's file system, as the
     * MPI-IO load assumes), so a bad checkpoint fails alike everywhere */
    zoe_status st = checkpoint_config(cfg, size, dir, sizeof dir, &tc, &g->byte_tokens);
    if (st == ZOE_OK) st = zoe_trainer_create(world, &tc, &g->tr);
    if (st == ZOE_OK) st = zoe_trainer_load(g->tr, dir, NULL, 0);
    /* a checkpoint saved with a delayed update pending loads the stale weights the next
     * training forward would read; generation wants the latest, the master's copy */
    if (st == ZOE_OK) st = zoe_optimizer_refresh_params(zoe_trainer_optimizer(g->tr));
    if (st == ZOE_OK) {
        g->gpt = zoe_trainer_gpt(g->tr);
        g->model = tc.model;
        g->tp_comm = zoe_grid_tp_comm(zoe_trainer_grid(g->tr));
        g->rank = zoe_grid_rank(zoe_trainer_grid(g->tr));
        g->tp = zoe_grid_tp_size(zoe_trainer_grid(g->tr));
        g->chunk = tc.model.seq_len < PREFILL_CHUNK ? tc.model.seq_len : PREFILL_CHUNK;
        st = zoe_gpt_kv_cache_create(g->gpt, tc.model.seq_len, g->chunk, &g->cache);
    }
    if (st == ZOE_OK) st = alloc_buffers(g);
    if (st != ZOE_OK) {
        zoe_generator_destroy(g);
        return st;
    }
    *out = g;
    return ZOE_OK;
}

void zoe_generator_destroy(zoe_generator *g) {
    if (!g) return;
    zoe_gpt_kv_cache_destroy(g->cache);
    zoe_trainer_destroy(g->tr);
    free(g->raw), free(g->local), free(g->all), free(g->row), free(g->work);
    free(g);
}

const zoe_model_config *zoe_generator_model(const zoe_generator *g) {
    return g ? &g->model : NULL;
}
int zoe_generator_byte_tokens(const zoe_generator *g) {
    return g ? g->byte_tokens : 0;
}

/* Rows [first, first + rows) of the last decode's vocabulary-parallel logits, gathered into host
 * fp32 [rows, vocab] over the real vocabulary: rank r holds columns [r local, (r + 1) local). */
static zoe_status gather_logits(zoe_generator *g, int64_t first, int64_t rows, float *out) {
    const zoe_tp_embedding *e = zoe_gpt_embedding(g->gpt);
    const zoe_dtype dt = zoe_trainer_config(g->tr)->dtype;
    const size_t local = (size_t)e->vocab.local, vocab = (size_t)e->vocab.vocab;
    const size_t n = (size_t)rows * local, es = zoe_dtype_size(dt);
    const char *src = (const char *)zoe_gpt_kv_cache_logits(g->cache) + (size_t)first * local * es;
    zoe_stream *stream = zoe_trainer_stream(g->tr);
    ZOE_TRY(zoe_memcpy_async(g->raw, src, n * es, ZOE_COPY_DEVICE_TO_HOST, stream));
    ZOE_TRY(zoe_stream_synchronize(stream));
    ZOE_TRY(zoe_convert(g->local, ZOE_F32, g->raw, dt, n));
    if (MPI_Allgather(g->local, (int)n, MPI_FLOAT, g->all, (int)n, MPI_FLOAT, g->tp_comm) !=
        MPI_SUCCESS)
        return zoe_fail(ZOE_ERR_MPI, "all-gather of the logits failed");
    for (size_t i = 0; i < (size_t)rows; i++)
        for (size_t c = 0; c < vocab; c++)
            out[i * vocab + c] = g->all[(c / local) * n + i * local + c % local];
    return ZOE_OK;
}

/* Feeds tokens[0..n) after what the cache holds, in chunks; with out, gathers every row's
 * logits into out [n, vocab], else only the last row's into g->row. */
static zoe_status feed(zoe_generator *g, const int32_t *tokens, int64_t n, float *out) {
    for (int64_t done = 0; done < n;) {
        const int64_t m = n - done < g->chunk ? n - done : g->chunk;
        ZOE_TRY(zoe_gpt_decode(g->gpt, g->cache, tokens + done, m));
        if (out)
            ZOE_TRY(gather_logits(g, 0, m, out + (size_t)done * (size_t)g->model.vocab));
        else if (done + m == n)
            ZOE_TRY(gather_logits(g, m - 1, 1, g->row));
        done += m;
    }
    return ZOE_OK;
}

zoe_status zoe_generator_logits(zoe_generator *g, const int32_t *tokens, int64_t n, float *logits) {
    if (!g || !tokens || !logits)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_generator_logits: NULL argument");
    if (n <= 0 || n > g->model.seq_len)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "logits of %lld tokens: outside [1, %d], the model's context", (long long)n,
                        g->model.seq_len);
    zoe_gpt_kv_cache_reset(g->cache);
    return feed(g, tokens, n, logits);
}

/* Feeds the newest token of history[0, n) to the cache. When the cache is full (the model's
 * context), it is rebuilt from the newest half of the context instead, so a long generation pays
 * one prefill per seq_len / 2 tokens and the model never sees more than its context (as
 * nanoGPT's crop to block_size), though after a rebuild as few as seq_len / 2 tokens. */
static zoe_status advance(zoe_generator *g, const int32_t *history, int64_t n) {
    const int64_t context = g->model.seq_len;
    if (zoe_gpt_kv_cache_length(g->cache) < context) return feed(g, history + n - 1, 1, NULL);
    const int64_t keep = context / 2 > 0 ? context / 2 : 1;
    zoe_gpt_kv_cache_reset(g->cache);
    return feed(g, history + n - keep, keep, NULL);
}

zoe_status zoe_generator_generate(zoe_generator *g, const int32_t *prompt, int64_t n_prompt,
                                  int32_t eod, int32_t *out, int64_t *n_out) {
    if (!g || !prompt || !out || !n_out)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_generator_generate: NULL argument");
    *n_out = 0;
    if (n_prompt <= 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "a prompt of %lld tokens: at least one needed",
                        (long long)n_prompt);
    const int64_t max_new = g->cfg.max_new_tokens, context = g->model.seq_len;
    int32_t *history = malloc((size_t)(n_prompt + max_new) * sizeof *history);
    if (!history) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "%lld tokens", (long long)max_new);
    memcpy(history, prompt, (size_t)n_prompt * sizeof *history);
    int64_t n = n_prompt;
    /* a prompt longer than the context: its last context tokens */
    const int64_t first = n_prompt > context ? n_prompt - context : 0;
    zoe_gpt_kv_cache_reset(g->cache);
    zoe_status st = feed(g, prompt + first, n_prompt - first, NULL);
    for (int64_t step = 0; st == ZOE_OK && step < max_new; step++) {
        int32_t token = 0;
        if (g->rank == 0)
            st = zoe_sample_token(g->row, g->model.vocab, &g->cfg.sampling,
                                  zoe_sampling_uniform(g->cfg.seed, (uint64_t)step), g->work,
                                  &token);
        int msg[2] = {(int)st, token};
        MPI_Bcast(msg, 2, MPI_INT, 0, g->tp_comm);
        if (msg[0] != ZOE_OK && g->rank != 0)
            st = zoe_fail((zoe_status)msg[0], "sampling failed on rank 0");
        token = msg[1];
        if (st != ZOE_OK || (eod >= 0 && token == eod)) break;
        out[(*n_out)++] = history[n++] = token;
        if (step + 1 < max_new) st = advance(g, history, n);
    }
    free(history);
    return st;
}
