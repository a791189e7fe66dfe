/* TP-invariant initialisation: every parameter of a 2-layer GPT and Llama (models/gpt.h; the
 * Llama with 4 query heads over 2 KV heads, so at TP=4 each KV head is replicated on 2 ranks)
 * built at TP = world size, gathered to global layout, equals the TP = 1 model's (built on this
 * rank over MPI_COMM_SELF) bit for bit, in fp32 and bf16; every replica of a KV block holds the
 * same bits. Also: the values are the Philox draws of their
 * global index, the normals have the requested deviation, LayerNorms start at ones and zeros. */
#include <math.h>
#include <stdlib.h>
#include "stack.h"
#include "kernels/philox.h"
#include "testing.h"

static zoe_gpt_config config(zoe_dtype dt) {
    return (zoe_gpt_config){
        .shape = {.vocab = 257, .hidden = 64, .heads = 4, .ffn = 256, .layers = 2, .seq_len = 17},
        .micro_batch = 2,
        .pad_multiple = 128,
        .dtype = dt,
        .seed = 2024};
}

static void compare(zoe_dtype dt, zoe_model_family family) {
    zoe_gpt_config cfg = config(dt);
    if (family == ZOE_MODEL_LLAMA) {
        cfg.shape.family = ZOE_MODEL_LLAMA;
        cfg.shape.kv_heads = 2;
        cfg.shape.ffn = 96;
        cfg.shape.tie_embeddings = 0;
    }
    stack *ref = NULL, *par = NULL;
    if (!CHECK_OK(stack_create(&cfg, MPI_COMM_SELF, &ref)) ||
        !CHECK_OK(stack_create(&cfg, MPI_COMM_WORLD, &par)))
        goto done;
    CHECK(ref->ntensors == par->ntensors, "parameter counts differ");
    for (int i = 0; i < par->ntensors; i++) {
        const zoe_tp_param *p = zoe_gpt_tensor(par->gpt, i);
        size_t n = (size_t)(p->global_shape[0] * p->global_shape[1]);
        double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double));
        CHECK_OK(stack_param_global(par, i, false, a));
        CHECK_OK(stack_param_global(ref, i, false, b));
        CHECK(memcmp(a, b, n * sizeof(double)) == 0, "%s %s: TP=%d init differs from TP=1", p->name,
              zoe_dtype_name(dt), par->tp->size);
        /* this rank's shard is its slice of the global tensor (for a replicated KV block too) */
        size_t bytes = (size_t)p->local_numel * zoe_dtype_size(dt);
        char *raw = malloc(bytes);
        CHECK_OK(zoe_memcpy_async(raw, p->data, bytes, ZOE_COPY_DEVICE_TO_HOST, par->stream));
        CHECK_OK(zoe_stream_synchronize(par->stream));
        size_t bad = 0;
        for (int64_t r = 0; r < p->local_shape[0]; r++)
            for (int64_t c = 0; c < p->local_shape[1]; c++)
                bad += stack_load(dt, raw, (size_t)(r * p->local_shape[1] + c)) !=
                       a[(p->local_offset[0] + r) * p->global_shape[1] + p->local_offset[1] + c];
        CHECK(bad == 0, "%s: %zu elements of the local shard are not their global values", p->name,
              bad);
        free(raw);
        if (p->init == ZOE_TP_INIT_NORMAL && dt == ZOE_F32) {
            /* element (i, j) is draw i * cols + j of the name's stream */
            size_t probe = n - 3;
            float want;
            zoe_philox_normal_fill(&want, 1, p->init_std, cfg.seed,
                                   zoe_philox_stream_of_name(p->name), probe);
            CHECK(b[probe] == (double)want, "%s: element %zu is not its Philox draw", p->name,
                  probe);
            double sq = 0;
            for (size_t j = 0; j < n; j++) sq += b[j] * b[j];
            double sd = sqrt(sq / (double)n);
            /* n >= 4096 draws: the sample deviation is within 10% of the target */
            CHECK(fabs(sd / p->init_std - 1) < 0.1, "%s: std %g, want %g", p->name, sd,
                  (double)p->init_std);
        } else if (p->init != ZOE_TP_INIT_NORMAL) {
            double v = p->init == ZOE_TP_INIT_ONES ? 1.0 : 0.0;
            size_t off = 0;
            for (size_t j = 0; j < n; j++) off += b[j] != v;
            CHECK(off == 0, "%s: %zu elements differ from %g", p->name, off, v);
        }
        free(a), free(b);
    }
done:
    stack_destroy(par);
    stack_destroy(ref);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    compare(ZOE_F32, ZOE_MODEL_GPT);
    compare(ZOE_BF16, ZOE_MODEL_GPT);
    compare(ZOE_F32, ZOE_MODEL_LLAMA);
    compare(ZOE_BF16, ZOE_MODEL_LLAMA);
    return test_finish("test_tp_init");
}
