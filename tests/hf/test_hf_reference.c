/* Hugging Face models in, against transformers itself: for each reference directory that
 * make_reference.py wrote (GPT-2; Llama with GQA, Llama 3 RoPE scaling and an untied head;
 * Llama with a tied head), zoe loads config.json and model.safetensors at TP = world size
 * (each rank reading its own shard) and reproduces transformers' logits and loss on the same
 * tokens, and the gradients of that loss match torch's autograd, tensor by tensor through the
 * name and layout mapping (engine/hf/hf.h).
 *
 * Tolerances: both compute in fp32 but in other orders (BLAS blocking, the online softmax
 * against torch's two-pass one, zoe's polynomial exp in GELU, SiLU and softmax, RoPE angles
 * through libm's cos against torch's), a few ulps per op through 2 layers. Logits and the loss
 * are O(1): atol 2e-5 + rtol 2e-5 (about 150 fp32 ulps). Gradients: 2e-4 of the tensor's
 * largest magnitude (they pass through the backward chain once more). A misplaced weight, a
 * wrong RoPE pairing or a KV head given to the wrong queries moves logits by O(0.1).
 * usage: test_hf_reference DIR... */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../tp/stack.h"
#include "engine/hf/hf.h"
#include "engine/formats/safetensors.h"
#include "testing.h"

/* A reference tensor as float64 (F32 or I32 in the file). */
static double *read_ref(const char *path, const zoe_safetensors *st, const char *name, size_t *n) {
    const zoe_st_tensor *t = zoe_safetensors_find(st, name);
    CHECK(t != NULL, "%s: no %s", path, name);
    if (!t) return NULL;
    *n = (size_t)zoe_st_tensor_numel(t);
    void *raw = malloc(t->end - t->begin);
    double *out = malloc(*n * sizeof(double));
    CHECK_OK(zoe_safetensors_read_data(path, st, t, 0, t->end - t->begin, raw));
    for (size_t i = 0; i < *n; i++)
        out[i] = t->dtype == ZOE_ST_I32 ? (double)((int32_t *)raw)[i] : (double)((float *)raw)[i];
    free(raw);
    return out;
}

static double max_abs(const double *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* Every gradient of the model against torch's, element (i, j) of each zoe tensor taken from
 * its HF origin. */
static void compare_grads(stack *s, const zoe_model_config *m, const char *ref_path,
                          const zoe_safetensors *ref) {
    double worst = 0;
    for (int t = 0; t < s->ntensors; t++) {
        const zoe_tp_param *p = zoe_gpt_tensor(s->gpt, t);
        const int64_t rows = p->global_shape[0], cols = p->global_shape[1];
        double *got = malloc((size_t)(rows * cols) * sizeof(double));
        CHECK_OK(stack_param_global(s, t, true, got));
        zoe_hf_source src;
        CHECK_OK(zoe_hf_source_of(m, p->name, rows, cols, &src));
        double *want[2] = {NULL, NULL};
        size_t n[2] = {0, 0};
        for (int k = 0; k < src.count; k++) {
            char name[160];
            snprintf(name, sizeof name, "grad.%s", src.hf[k]);
            want[k] = read_ref(ref_path, ref, name, &n[k]);
        }
        double *expect = calloc((size_t)(rows * cols), sizeof(double));
        for (int64_t i = 0; want[0] && i < rows; i++) {
            int which, transposed;
            int64_t index;
            zoe_hf_row_origin(m, &src, i, &which, &index, &transposed);
            const int64_t hcols = src.shape[which][1];
            for (int64_t j = 0; index >= 0 && j < cols; j++)
                expect[i * cols + j] =
                    want[which][transposed ? j * hcols + index : index * hcols + j];
        }
        const double scale = max_abs(expect, (size_t)(rows * cols));
        char what[1400];
        snprintf(what, sizeof what, "%s grad of %s", ref_path, p->name);
        CHECK_CLOSE(got, expect, (size_t)(rows * cols), 2e-4 * scale, 0, what);
        for (int64_t i = 0; i < rows * cols; i++)
            worst = fmax(worst, fabs(got[i] - expect[i]) / fmax(scale, 1e-30));
        free(got), free(expect), free(want[0]), free(want[1]);
    }
    if (test_rank() == 0) printf("  gradients: worst %.2e of each tensor's scale\n", worst);
}

static void run(const char *dir) {
    zoe_model_config m;
    if (!CHECK_OK(zoe_hf_read_config(dir, &m))) return;
    char ref_path[1200];
    snprintf(ref_path, sizeof ref_path, "%s/reference.safetensors", dir);
    zoe_safetensors ref;
    zoe_safetensors_init(&ref);
    if (!CHECK_OK(zoe_safetensors_read_header(ref_path, &ref))) return;
    const zoe_st_tensor *tt = zoe_safetensors_find(&ref, "tokens");
    CHECK(tt && tt->ndim == 2, "%s: tokens [B, T]", ref_path);
    const int64_t B = tt->shape[0], T = tt->shape[1], N = B * T;
    m.seq_len = (int)T;
    zoe_gpt_config cfg = {.shape = m, .micro_batch = B, .dtype = ZOE_F32, .seed = 5};
    stack *s = NULL;
    size_t n;
    double *tok = read_ref(ref_path, &ref, "tokens", &n);
    double *logits = read_ref(ref_path, &ref, "logits", &n);
    double *loss = read_ref(ref_path, &ref, "loss", &n);
    int32_t *tokens = malloc((size_t)N * sizeof(int32_t)), *targets = malloc((size_t)N * 4);
    for (int64_t i = 0; i < N; i++) {
        tokens[i] = (int32_t)tok[i];
        /* next-token targets within each sequence, as transformers shifts its labels */
        targets[i] = i % T == T - 1 ? ZOE_GPT_IGNORE_INDEX : (int32_t)tok[i + 1];
    }
    if (CHECK_OK(stack_create(&cfg, MPI_COMM_WORLD, &s)) && CHECK_OK(zoe_hf_load(s->gpt, dir))) {
        CHECK_OK(stack_forward(s, tokens, targets));
        CHECK(fabs(s->loss - loss[0]) <= 2e-5 * (1 + fabs(loss[0])), "%s: loss %.9g, torch %.9g",
              dir, (double)s->loss, loss[0]);
        const int64_t padded = zoe_gpt_embedding(s->gpt)->vocab.padded;
        double *all = malloc((size_t)(N * padded) * sizeof(double));
        double *got = malloc((size_t)(N * m.vocab) * sizeof(double));
        CHECK_OK(stack_logits(s, all));
        for (int64_t i = 0; i < N; i++)
            for (int64_t v = 0; v < m.vocab; v++) got[i * m.vocab + v] = all[i * padded + v];
        char what[1300];
        snprintf(what, sizeof what, "%s logits at TP=%d", dir, s->tp->size);
        CHECK_CLOSE(got, logits, (size_t)(N * m.vocab), 2e-5, 2e-5, what);
        double worst = 0;
        for (int64_t i = 0; i < N * m.vocab; i++) worst = fmax(worst, fabs(got[i] - logits[i]));
        if (test_rank() == 0)
            printf("%s at TP=%d: loss %.7f (torch %.7f), logits worst |diff| %.2e\n", dir,
                   s->tp->size, (double)s->loss, loss[0], worst);
        CHECK_OK(stack_backward(s));
        compare_grads(s, &m, ref_path, &ref);
        free(all), free(got);
    }
    stack_destroy(s);
    zoe_safetensors_free(&ref);
    free(tok), free(logits), free(loss), free(tokens), free(targets);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: test_hf_reference DIR...\n");
        return 2;
    }
    for (int i = 1; i < argc; i++) run(argv[i]);
    return test_finish("test_hf_reference");
}
