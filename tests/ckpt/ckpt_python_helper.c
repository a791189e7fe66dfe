/* Writes what tests/ckpt/check_ckpt.py compares against Python's readers, into OUT:
 *   tp2/        a checkpoint written at TP=2 (world of 2 ranks), and tp2-ref.safetensors: its
 *               weights gathered by the TP layer's own gather (zoe_tp_param_gather), an
 *               independent path to the global layout
 *   tp1/        a checkpoint of the same run at TP=1 on rank 0 alone, and tp1-ref.safetensors:
 *               master weights and moments read from the optimizer's partition, which at one
 *               rank is the tensors back to back
 *   logits.safetensors  a batch of tokens and zoe's logits on it with the tp1 weights
 * Run as: mpirun -np 2 ckpt_python_helper OUT CORPUS */
#include <stdlib.h>
#include "ckpt_test.h"
#include "engine/formats/safetensors.h"
#include "engine/train/trainer_impl.h"
#include "models/gpt.h"
#include "tensor_parallel/param.h"

enum { STEPS = 3 };

/* Stored rows: the embedding without its vocabulary padding. */
static int64_t rows_of(zoe_gpt *g, const zoe_tp_param *p) {
    return p == &zoe_gpt_embedding(g)->wte ? zoe_gpt_embedding(g)->vocab.vocab : p->global_shape[0];
}

static void gathered_reference(zoe_trainer *tr, const char *path) {
    zoe_gpt *g = zoe_trainer_gpt(tr);
    int n = zoe_gpt_num_tensors(g);
    zoe_safetensors st;
    zoe_safetensors_init(&st);
    void **data = calloc((size_t)n, sizeof *data);
    for (int t = 0; t < n; t++) {
        const zoe_tp_param *p = zoe_gpt_tensor(g, t);
        int64_t shape[2] = {rows_of(g, p), p->global_shape[1]};
        data[t] = malloc((size_t)(p->global_shape[0] * p->global_shape[1]) * sizeof(float));
        CHECK_OK(zoe_tp_param_gather(zoe_gpt_tp(g), p, false, data[t]));
        CHECK_OK(zoe_safetensors_add(&st, p->name, ZOE_ST_F32, p->ndim, shape));
    }
    if (test_rank() == 0)
        CHECK_OK(zoe_safetensors_write_file(path, &st, (const void *const *)data));
    for (int t = 0; t < n; t++) free(data[t]);
    free(data);
    zoe_safetensors_free(&st);
}

static void partition_reference(zoe_trainer *tr, const char *path) {
    zoe_gpt *g = zoe_trainer_gpt(tr);
    zoe_optimizer *opt = zoe_trainer_optimizer(tr);
    int n = zoe_gpt_num_tensors(g);
    const char *suffix[3] = {"", ".exp_avg", ".exp_avg_sq"};
    zoe_safetensors st;
    zoe_safetensors_init(&st);
    void **data = calloc((size_t)(3 * n), sizeof *data);
    for (int s = 0; s < 3; s++)
        for (int t = 0; t < n; t++) {
            const zoe_tp_param *p = zoe_gpt_tensor(g, t);
            int64_t shape[2] = {rows_of(g, p), p->global_shape[1]};
            size_t first, count, part;
            CHECK_OK(zoe_optimizer_tensor_shard(opt, t, &first, &count, &part));
            data[s * n + t] = malloc(count * sizeof(float));
            CHECK_OK(zoe_optimizer_read_state(opt, (zoe_optimizer_state)s, part, count,
                                              data[s * n + t]));
            char name[128];
            snprintf(name, sizeof name, "%s%s", p->name, suffix[s]);
            CHECK_OK(zoe_safetensors_add(&st, name, ZOE_ST_F32, p->ndim, shape));
        }
    CHECK_OK(zoe_safetensors_write_file(path, &st, (const void *const *)data));
    for (int i = 0; i < 3 * n; i++) free(data[i]);
    free(data);
    zoe_safetensors_free(&st);
}

static void logits_file(ckpt_session *s, const char *path) {
    const zoe_train_config *c = &s->cfg;
    size_t n = (size_t)c->micro_batch * (size_t)c->model.seq_len;
    float *logits = malloc(n * (size_t)c->model.vocab * sizeof(float));
    CHECK_OK(zoe_loader_fetch(s->loader, 1000, 0, s->tokens, s->targets));
    CHECK_OK(zoe_trainer_logits(s->tr, s->tokens, logits));
    zoe_safetensors st;
    zoe_safetensors_init(&st);
    int64_t tshape[2] = {c->micro_batch, c->model.seq_len};
    int64_t lshape[3] = {c->micro_batch, c->model.seq_len, c->model.vocab};
    CHECK_OK(zoe_safetensors_add(&st, "tokens", ZOE_ST_I32, 2, tshape));
    CHECK_OK(zoe_safetensors_add(&st, "logits", ZOE_ST_F32, 3, lshape));
    const void *data[2] = {s->tokens, logits};
    CHECK_OK(zoe_safetensors_write_file(path, &st, data));
    zoe_safetensors_free(&st);
    free(logits);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    if (argc < 3 || test_world_size() != 2) {
        fprintf(stderr, "usage: mpirun -np 2 ckpt_python_helper OUT CORPUS\n");
        return 2;
    }
    char path[1024];
    zoe_train_config c;
    ckpt_session s;
    /* TP=2 on both ranks */
    ckpt_test_config(&c, 2, 1, 1, 0.0f, 0);
    CHECK_OK(ckpt_session_open(&s, MPI_COMM_WORLD, &c, argv[2]));
    CHECK_OK(ckpt_session_steps(&s, STEPS, NULL));
    CHECK_OK(zoe_trainer_flush(s.tr));
    snprintf(path, sizeof path, "%s/tp2", argv[1]);
    CHECK_OK(zoe_trainer_save(s.tr, path, 0, NULL, 0));
    snprintf(path, sizeof path, "%s/tp2-ref.safetensors", argv[1]);
    gathered_reference(s.tr, path);
    ckpt_session_close(&s);
    /* TP=1 on rank 0 */
    if (test_rank() == 0) {
        ckpt_test_config(&c, 1, 1, 1, 0.0f, 0);
        c.micro_batch = 2; /* the batch of the logits */
        CHECK_OK(ckpt_session_open(&s, MPI_COMM_SELF, &c, argv[2]));
        CHECK_OK(ckpt_session_steps(&s, STEPS, NULL));
        CHECK_OK(zoe_trainer_flush(s.tr));
        snprintf(path, sizeof path, "%s/tp1", argv[1]);
        CHECK_OK(zoe_trainer_save(s.tr, path, 0, NULL, 0));
        snprintf(path, sizeof path, "%s/tp1-ref.safetensors", argv[1]);
        partition_reference(s.tr, path);
        snprintf(path, sizeof path, "%s/logits.safetensors", argv[1]);
        logits_file(&s, path);
        ckpt_session_close(&s);
    }
    return test_finish("ckpt_python_helper");
}
