/* The checkpoint tests' harness (ckpt_test.h). */
#include "ckpt_test.h"
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "engine/formats/safetensors.h"
#include "engine/checkpoint/directory.h"
#include "engine/checkpoint/mpi_io.h"
#include "kernels/adam_state.h"
#include "engine/train/trainer_impl.h"
#include "runtime/error.h"

void ckpt_test_config(zoe_train_config *c, int tp, int dp, int grad_accum, float dropout,
                      int dpu_warmup) {
    zoe_train_config_defaults(c);
    c->model = (zoe_model_config){.name = "test",
                                  .layers = 2,
                                  .hidden = 64,
                                  .heads = 4,
                                  .seq_len = 32,
                                  .vocab = ZOE_BYTE_VOCAB_SIZE,
                                  .dropout = dropout};
    c->tp = tp, c->grad_accum = grad_accum, c->micro_batch = 8 / (dp * grad_accum);
    c->steps = 40, c->lr = 2e-3f, c->min_lr = 2e-4f, c->warmup = 3, c->seed = 5;
    c->dpu_warmup = dpu_warmup;
    c->log_every = 1000;
}

zoe_status ckpt_session_open(ckpt_session *s, MPI_Comm comm, const zoe_train_config *cfg,
                             const char *corpus) {
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    ZOE_TRY(zoe_trainer_create(comm, cfg, &s->tr));
    ZOE_TRY(zoe_dataset_open(corpus, &s->ds));
    zoe_loader_config lc = {.seq_len = cfg->model.seq_len,
                            .micro_batch = cfg->micro_batch,
                            .dp_size = zoe_trainer_dp_size(s->tr),
                            .dp_rank = zoe_trainer_dp_rank(s->tr),
                            .grad_accum = cfg->grad_accum,
                            .seed = cfg->seed,
                            .vocab_size = cfg->model.vocab};
    ZOE_TRY(zoe_loader_create(s->ds, &lc, &s->loader));
    size_t n = (size_t)cfg->micro_batch * (size_t)cfg->model.seq_len;
    s->tokens = malloc(n * sizeof(int32_t));
    s->targets = malloc(n * sizeof(int32_t));
    return s->tokens && s->targets ? ZOE_OK : ZOE_ERR_OUT_OF_MEMORY;
}

zoe_status ckpt_session_steps(ckpt_session *s, int to, float *losses) {
    for (int step = zoe_trainer_steps_done(s->tr); step < to; step++) {
        for (int m = 0; m < s->cfg.grad_accum; m++) {
            ZOE_TRY(zoe_loader_fetch(s->loader, step, m, s->tokens, s->targets));
            ZOE_TRY(zoe_trainer_micro_batch(s->tr, s->tokens, s->targets, NULL));
        }
        zoe_step_stats st;
        ZOE_TRY(zoe_trainer_step(s->tr, zoe_train_lr_at(&s->cfg, step), &st));
        if (losses) losses[step] = st.loss;
        zoe_optimizer_stats os;
        ZOE_TRY(zoe_optimizer_stats_get(zoe_trainer_optimizer(s->tr), &os));
        s->speculated_steps += os.speculated, s->redone_steps += os.redone;
    }
    return ZOE_OK;
}

void ckpt_session_close(ckpt_session *s) {
    free(s->tokens), free(s->targets);
    zoe_loader_destroy(s->loader);
    zoe_dataset_destroy(s->ds);
    zoe_trainer_destroy(s->tr);
    memset(s, 0, sizeof *s);
}

void ckpt_test_tmpdir(MPI_Comm comm, char *out, size_t cap) {
    char dir[256] = "/tmp/zoe_ckpt_XXXXXX";
    int rank;
    MPI_Comm_rank(comm, &rank);
    if (rank == 0 && !mkdtemp(dir)) dir[0] = '\0';
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, comm);
    snprintf(out, cap, "%s", dir);
}

void ckpt_test_rmdir(MPI_Comm comm, const char *dir) {
    MPI_Barrier(comm);
    int rank;
    MPI_Comm_rank(comm, &rank);
    if (rank != 0) return;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup of %s", dir);
}

void *ckpt_test_read_tensor(const char *path, const char *tensor, size_t *n) {
    zoe_safetensors st;
    if (zoe_safetensors_read_header(path, &st) != ZOE_OK) return NULL;
    const zoe_st_tensor *t = zoe_safetensors_find(&st, tensor);
    void *buf = t ? malloc((size_t)(t->end - t->begin) + 1) : NULL;
    if (buf && zoe_safetensors_read_data(path, &st, t, 0, t->end - t->begin, buf) != ZOE_OK) {
        free(buf);
        buf = NULL;
    }
    if (buf) *n = (size_t)(t->end - t->begin);
    zoe_safetensors_free(&st);
    return buf;
}

/* An int8 moment's values from its codes (I8: m, U8: v) and its scales [shards, blocks] written
 * at TP 1 or by a replicated tensor (one shard, whose blocks run over the global tensor in
 * order; an embedding's padding rows come after its stored rows): code c of block b is
 * unit(|c|) * scale[b], signed as c. NULL for several shards. */
static float *read_int8_values(const char *path, const zoe_st_tensor *t, const void *codes,
                               size_t n) {
    char name[300];
    snprintf(name, sizeof name, "%s.scales", t->name);
    size_t bytes = 0;
    float *scales = ckpt_test_read_tensor(path, name, &bytes), *out = NULL;
    zoe_safetensors st;
    if (scales && zoe_safetensors_read_header(path, &st) == ZOE_OK) {
        const zoe_st_tensor *sc = zoe_safetensors_find(&st, name);
        if (sc && sc->shape[0] == 1) out = malloc(n * sizeof *out + 1);
        zoe_safetensors_free(&st);
    }
    for (size_t i = 0; out && i < n; i++) {
        float scale = scales[i / ZOE_ADAM_INT8_BLOCK];
        if (t->dtype == ZOE_ST_I8) {
            int c = ((const int8_t *)codes)[i];
            out[i] = (c < 0 ? -1.0f : 1.0f) * zoe_adam_int8_m_unit(c < 0 ? -c : c) * scale;
        } else {
            out[i] = zoe_adam_int8_v_unit(((const uint8_t *)codes)[i]) * scale;
        }
    }
    free(scales);
    return out;
}

/* A tensor's values widened to fp32 (*n elements), from F32, BF16 or int8 codes with their
 * scales (read_int8_values); NULL otherwise. */
static float *read_widened(const char *path, const zoe_st_tensor *t, size_t *n) {
    size_t bytes = 0;
    void *raw = ckpt_test_read_tensor(path, t->name, &bytes);
    size_t esz = zoe_st_dtype_size(t->dtype);
    float *out = NULL;
    if (raw && (t->dtype == ZOE_ST_I8 || t->dtype == ZOE_ST_U8)) {
        *n = bytes;
        out = read_int8_values(path, t, raw, bytes);
    } else if (raw && (t->dtype == ZOE_ST_F32 || t->dtype == ZOE_ST_BF16)) {
        out = malloc((bytes / esz) * sizeof(float) + 1);
        *n = bytes / esz;
        if (out) zoe_convert(out, ZOE_F32, raw, zoe_st_dtype_to_zoe(t->dtype), *n);
    }
    free(raw);
    return out;
}

/* Tensors of a table that hold values: widen 1 leaves out int8 moments' scales. */
static int value_tensors(const zoe_safetensors *t, int widen) {
    int n = 0;
    for (int i = 0; i < t->count; i++) {
        size_t len = strlen(t->tensors[i].name);
        n += !(widen && len > 7 && strcmp(t->tensors[i].name + len - 7, ".scales") == 0);
    }
    return n;
}

/* file in both directories: the same tensor names and, widen 0, the same bytes, or, widen 1,
 * the same values each widened to fp32 from its own dtype; the BF16 tensors of each counted. */
static int compare_files(const char *dir_a, const char *dir_b, const char *file, int widen,
                         int *bf16_a, int *bf16_b) {
    char pa[1024], pb[1024];
    snprintf(pa, sizeof pa, "%s/%s", dir_a, file);
    snprintf(pb, sizeof pb, "%s/%s", dir_b, file);
    zoe_safetensors a, b;
    *bf16_a = *bf16_b = 0;
    if (zoe_safetensors_read_header(pa, &a) != ZOE_OK) return 0;
    if (zoe_safetensors_read_header(pb, &b) != ZOE_OK) {
        zoe_safetensors_free(&a);
        return 0;
    }
    int same = value_tensors(&a, widen) == value_tensors(&b, widen) && a.count > 0;
    for (int i = 0; same && i < a.count; i++) {
        const zoe_st_tensor *ta = &a.tensors[i], *tb = zoe_safetensors_find(&b, ta->name);
        size_t len = strlen(ta->name);
        if (widen && len > 7 && strcmp(ta->name + len - 7, ".scales") == 0) continue;
        size_t na = 0, nb = 0, esz = widen ? sizeof(float) : 1;
        void *x =
            widen ? (void *)read_widened(pa, ta, &na) : ckpt_test_read_tensor(pa, ta->name, &na);
        void *y = !tb     ? NULL
                  : widen ? (void *)read_widened(pb, tb, &nb)
                          : ckpt_test_read_tensor(pb, tb->name, &nb);
        same = x && y && na == nb && memcmp(x, y, na * esz) == 0;
        if (!same) fprintf(stderr, "%s: tensor %s differs\n", file, ta->name);
        *bf16_a += ta->dtype == ZOE_ST_BF16;
        *bf16_b += tb && tb->dtype == ZOE_ST_BF16;
        free(x), free(y);
    }
    zoe_safetensors_free(&a);
    zoe_safetensors_free(&b);
    return same;
}

int ckpt_test_same_tensors(const char *dir_a, const char *dir_b, const char *file) {
    int bf16_a, bf16_b;
    return compare_files(dir_a, dir_b, file, 0, &bf16_a, &bf16_b);
}

void ckpt_test_same_files(const char *a, const char *b, const char *what) {
    const char *files[] = {"model.safetensors", "optimizer.safetensors"};
    for (int f = 0; f < 2; f++)
        CHECK(ckpt_test_same_tensors(a, b, files[f]), "%s: %s differs", what, files[f]);
    char pa[1100], pb[1100];
    snprintf(pa, sizeof pa, "%s/params-in-use.safetensors", a);
    snprintf(pb, sizeof pb, "%s/params-in-use.safetensors", b);
    FILE *fa = fopen(pa, "rb"), *fb = fopen(pb, "rb");
    CHECK(!fa == !fb, "%s: params-in-use.safetensors in one checkpoint only", what);
    if (fa && fb)
        CHECK(ckpt_test_same_tensors(a, b, "params-in-use.safetensors"),
              "%s: params-in-use.safetensors differs", what);
    if (fa) fclose(fa);
    if (fb) fclose(fb);
}

int ckpt_test_same_values(const char *dir_a, const char *dir_b, const char *file, int *bf16_a,
                          int *bf16_b) {
    return compare_files(dir_a, dir_b, file, 1, bf16_a, bf16_b);
}

/* The optimizer file's tensor i as an older zoe wrote it: int8 moments as their F32 values. */
typedef struct legacy_source {
    const char *path;
    const zoe_safetensors *held;
    const int *from; /* [legacy tensor] its tensor in held */
} legacy_source;

static zoe_status legacy_fill(void *user, int index, void *dst) {
    const legacy_source *ls = user;
    const zoe_st_tensor *t = &ls->held->tensors[ls->from[index]];
    size_t n = 0;
    void *raw = ckpt_test_read_tensor(ls->path, t->name, &n);
    float *values = raw && (t->dtype == ZOE_ST_I8 || t->dtype == ZOE_ST_U8)
                        ? read_int8_values(ls->path, t, raw, n)
                        : NULL;
    if (values)
        memcpy(dst, values, n * sizeof(float));
    else if (raw)
        memcpy(dst, raw, n);
    free(raw), free(values);
    return raw && (values || (t->dtype != ZOE_ST_I8 && t->dtype != ZOE_ST_U8))
               ? ZOE_OK
               : zoe_fail(ZOE_ERR_IO, "legacy copy of %s", t->name);
}

int ckpt_test_write_legacy_int8(const char *src, const char *dst) {
    char cmd[2200], path[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dst, src, dst);
    if (system(cmd) != 0) return 0;
    snprintf(path, sizeof path, "%s/" CKPT_OPTIMIZER_FILE, src);
    zoe_safetensors held, legacy;
    if (zoe_safetensors_read_header(path, &held) != ZOE_OK) return 0;
    zoe_safetensors_init(&legacy);
    int *from = calloc((size_t)held.count, sizeof *from), ok = from != NULL;
    for (int i = 0; ok && i < held.count; i++) {
        const zoe_st_tensor *t = &held.tensors[i];
        size_t len = strlen(t->name);
        if (len > 7 && strcmp(t->name + len - 7, ".scales") == 0) continue;
        int codes = t->dtype == ZOE_ST_I8 || t->dtype == ZOE_ST_U8;
        from[legacy.count] = i;
        ok = zoe_safetensors_add(&legacy, t->name, codes ? ZOE_ST_F32 : t->dtype, t->ndim,
                                 t->shape) == ZOE_OK;
    }
    legacy_source ls = {.path = path, .held = &held, .from = from};
    char out[1100];
    snprintf(out, sizeof out, "%s/" CKPT_OPTIMIZER_FILE, dst);
    ok = ok && zoe_safetensors_write_stream(out, &legacy, legacy_fill, &ls) == ZOE_OK;
    /* trainer.json: the file's size and its tensors' checksums (mpi_io.h's, over the whole
     * tensor from global index 0) */
    cJSON *root = NULL;
    ok = ok && ckpt_read_trainer_json(dst, &root) == ZOE_OK;
    cJSON *entry = ok ? cJSON_GetObjectItemCaseSensitive(
                            cJSON_GetObjectItemCaseSensitive(root, "files"), CKPT_OPTIMIZER_FILE)
                      : NULL;
    ok = ok && entry;
    if (ok) {
        cJSON_ReplaceItemInObject(
            entry, "bytes", cJSON_CreateNumber((double)(legacy.data_offset + legacy.data_size)));
        cJSON *sums = cJSON_CreateObject();
        for (int i = 0; ok && i < legacy.count; i++) {
            const zoe_st_tensor *t = &legacy.tensors[i];
            size_t n = 0;
            void *data = ckpt_test_read_tensor(out, t->name, &n);
            ok = data != NULL;
            char hex[32];
            if (ok)
                snprintf(hex, sizeof hex, "%016" PRIx64,
                         ckpt_hash_elements(ckpt_salt(t->name), 0, data,
                                            n / zoe_st_dtype_size(t->dtype),
                                            zoe_st_dtype_size(t->dtype)));
            if (ok) cJSON_AddStringToObject(sums, t->name, hex);
            free(data);
        }
        cJSON_ReplaceItemInObject(entry, "checksums", sums);
        char *text = cJSON_Print(root);
        snprintf(path, sizeof path, "%s/" CKPT_TRAINER_FILE, dst);
        ok = ok && text && ckpt_write_text(path, text) == ZOE_OK;
        free(text);
    }
    cJSON_Delete(root);
    free(from);
    zoe_safetensors_free(&held);
    zoe_safetensors_free(&legacy);
    return ok;
}
