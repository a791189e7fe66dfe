/* adam_torch_helper IN OUT: runs zoe's host Adam over the steps that IN describes, for
 * tests/python/test_adam_torch.py, which runs torch.optim.AdamW / Adam over the same ones.
 *
 * IN, little-endian: a header (adam_torch_header below), then the initial weights (n fp32), then
 * each step's gradient (steps x n fp32). The gradient goes to zoe in the header's dtype (fp32, or
 * bf16 rounded to nearest even, which the script rounds alike for torch), times 1 / grad_scale,
 * so that the step's grad_scale brings it back exactly when grad_scale is a power of two.
 * With state_bf16 the state is held in bf16 by kernels/adam_state.h's step (stochastic rounding,
 * keyed by the header's seed, the step and the element index), and OUT has its widened values.
 * OUT: the final weights, m and v (3 x n fp32), from the best path this CPU runs. Every other path
 * it runs must give the same bits, or the helper exits 1. Bad input exits 2. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/adam.h"
#include "kernels/adam_state.h"
#include "zoe/dtype.h"

typedef struct adam_torch_header {
    char magic[4]; /* "ZADM" */
    uint32_t steps;
    uint64_t n;
    uint32_t decoupled; /* 1: AdamW, 0: Adam with the L2 term */
    uint32_t grad_bf16; /* 0: fp32 gradient, 1: bf16 */
    float lr, beta1, beta2, eps, weight_decay, grad_scale;
    uint32_t state_bf16; /* 1: master, m and v held in bf16 (kernels/adam_state.h) */
    uint32_t reserved;   /* 0 */
    uint64_t seed;       /* the stochastic rounding's (element index i, step t + 1) */
} adam_torch_header;

typedef struct adam_state {
    float *w, *m, *v;
    zoe_bf16 *w16, *m16, *v16; /* the state as held with state_bf16 */
} adam_state;

static int read_all(FILE *f, void *dst, size_t bytes) {
    return fread(dst, 1, bytes, f) == bytes;
}

/* The run on one path, from the initial weights: m and v start at zero, as torch's do. */
static int run_path(zoe_cpu_isa isa, const adam_torch_header *h, const float *w0,
                    const float *grads, adam_state *s) {
    const size_t n = h->n;
    memcpy(s->w, w0, n * sizeof(float));
    memset(s->m, 0, n * sizeof(float)), memset(s->v, 0, n * sizeof(float));
    zoe_convert_f32_to_bf16(s->w16, w0, n); /* bf16 state starts from w0 rounded to nearest */
    memset(s->m16, 0, n * sizeof(zoe_bf16)), memset(s->v16, 0, n * sizeof(zoe_bf16));
    float *g32 = malloc(n * sizeof(float));
    zoe_bf16 *g16 = malloc(n * sizeof(zoe_bf16));
    int ok = g32 && g16;
    for (uint32_t t = 0; ok && t < h->steps; t++) {
        for (size_t i = 0; i < n; i++) g32[i] = grads[(size_t)t * n + i] / h->grad_scale;
        zoe_adam_consts c;
        zoe_adam_consts_init(&c, &(zoe_adam_hparams){.lr = h->lr,
                                                     .beta1 = h->beta1,
                                                     .beta2 = h->beta2,
                                                     .eps = h->eps,
                                                     .weight_decay = h->weight_decay,
                                                     .decoupled = (int)h->decoupled,
                                                     .grad_scale = h->grad_scale,
                                                     .step = (long)t + 1});
        zoe_status st;
        if (h->state_bf16) {
            const zoe_adam_state_dtypes dt = {ZOE_BF16, ZOE_BF16, ZOE_BF16};
            const zoe_adam_rounding r = {.seed = h->seed, .step = (uint64_t)t + 1};
            const zoe_adam_state held = {.master = s->w16, .exp_avg = s->m16, .exp_avg_sq = s->v16};
            if (h->grad_bf16) zoe_convert_f32_to_bf16(g16, g32, n);
            st = zoe_adam_state_host_isa(isa, &c, &r, &dt, &held, 0,
                                         h->grad_bf16 ? (const void *)g16 : (const void *)g32,
                                         h->grad_bf16 ? ZOE_BF16 : ZOE_F32, NULL, ZOE_F32, n);
        } else if (h->grad_bf16) {
            zoe_convert_f32_to_bf16(g16, g32, n);
            st = zoe_adam_host_isa(isa, &c, s->w, s->m, s->v, g16, ZOE_BF16, NULL, ZOE_F32, n);
        } else {
            st = zoe_adam_host_isa(isa, &c, s->w, s->m, s->v, g32, ZOE_F32, NULL, ZOE_F32, n);
        }
        ok = st == ZOE_OK;
    }
    free(g32), free(g16);
    if (ok && h->state_bf16) { /* the widened bf16 state is the result */
        zoe_convert_bf16_to_f32(s->w, s->w16, n);
        zoe_convert_bf16_to_f32(s->m, s->m16, n);
        zoe_convert_bf16_to_f32(s->v, s->v16, n);
    }
    return ok;
}

static int alloc_state(adam_state *s, size_t n) {
    s->w = malloc(n * sizeof(float)), s->m = malloc(n * sizeof(float));
    s->v = malloc(n * sizeof(float));
    s->w16 = malloc(n * sizeof(zoe_bf16)), s->m16 = malloc(n * sizeof(zoe_bf16));
    s->v16 = malloc(n * sizeof(zoe_bf16));
    return s->w && s->m && s->v && s->w16 && s->m16 && s->v16;
}

static void free_state(adam_state *s) {
    free(s->w), free(s->m), free(s->v), free(s->w16), free(s->m16), free(s->v16);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: adam_torch_helper IN OUT\n");
        return 2;
    }
    FILE *in = fopen(argv[1], "rb");
    adam_torch_header h;
    if (!in || !read_all(in, &h, sizeof h) || memcmp(h.magic, "ZADM", 4) != 0 || h.n == 0 ||
        h.steps == 0 || !(h.grad_scale > 0) || h.n > ((size_t)1 << 28) || h.state_bf16 > 1 ||
        h.reserved != 0) {
        fprintf(stderr, "adam_torch_helper: %s is not an Adam run description\n", argv[1]);
        if (in) fclose(in);
        return 2;
    }
    const size_t n = h.n;
    float *w0 = malloc(n * sizeof(float)), *grads = malloc(n * h.steps * sizeof(float));
    adam_state best = {0}, other = {0};
    int rc = 1;
    if (!w0 || !grads || !alloc_state(&best, n) || !alloc_state(&other, n)) goto done;
    if (!read_all(in, w0, n * sizeof(float)) || !read_all(in, grads, n * h.steps * sizeof(float))) {
        fprintf(stderr, "adam_torch_helper: %s is shorter than its header says\n", argv[1]);
        rc = 2;
        goto done;
    }
    const zoe_cpu_isa top = zoe_cpu_isa_best();
    if (!run_path(top, &h, w0, grads, &best)) goto done;
    for (int isa = 0; isa < (int)top; isa++) {
        if (!run_path((zoe_cpu_isa)isa, &h, w0, grads, &other)) goto done;
        if (memcmp(best.w, other.w, n * 4) || memcmp(best.m, other.m, n * 4) ||
            memcmp(best.v, other.v, n * 4)) {
            fprintf(stderr, "adam_torch_helper: the %s path differs from the %s path\n",
                    zoe_cpu_isa_name((zoe_cpu_isa)isa), zoe_cpu_isa_name(top));
            goto done;
        }
    }
    FILE *out = fopen(argv[2], "wb");
    if (out && fwrite(best.w, 4, n, out) == n && fwrite(best.m, 4, n, out) == n &&
        fwrite(best.v, 4, n, out) == n)
        rc = 0;
    if (out && fclose(out) != 0) rc = 1;
    printf("adam_torch_helper: %zu parameters, %u steps, paths scalar..%s alike\n", n, h.steps,
           zoe_cpu_isa_name(top));
done:
    if (in) fclose(in);
    free(w0), free(grads), free_state(&best), free_state(&other);
    return rc;
}
