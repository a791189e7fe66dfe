/* Internal: the host Adam loops written once, instantiated per instruction set.
 *
 * adam_element() is the definition of one element's update (kernels/adam.h); the scalar path is
 * a loop over it and the vector paths run it on their tails, so a SIMD body that performs the
 * same operations lane-wise is bit-identical to it.
 *
 * A file that instantiates the vector loops defines, before including this header:
 *   VF, W              the vector type and its lane count
 *   V_SET1(x) V_ADD(a,b) V_MUL(a,b) V_DIV(a,b) V_SQRT(a)
 *   V_FMA(a,b,c)       a * b + c rounded once (fmaf lane-wise)
 *   V_LOAD_F32(p) V_STORE_F32(p,x) V_LOAD_BF16(p) V_LOAD_F16(p)
 *   V_STREAM_F32(p,x)  non-temporal store of one vector (p aligned to W * 4 bytes)
 *   V_STREAM2_BF16(p,a,b) V_STREAM2_F16(p,a,b)  two vectors rounded to 2W 16-bit values, one
 *                      non-temporal store (p aligned to W * 4 bytes)
 *   V_FENCE()          orders the non-temporal stores before later stores (sfence)
 *   V_HSUM(x)          the sum of the lanes, as a double
 *   ADAM_FN(name)      the name of an instantiated function (e.g. name##_avx2)
 * and is compiled whole for its instruction set (kernels/CMakeLists.txt).
 *
 * Explained in docs/offload.md, "Host Adam speed". */
#ifndef ZOE_KERNELS_CPU_ADAM_SIMD_H
#define ZOE_KERNELS_CPU_ADAM_SIMD_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "kernels/adam.h"
#include "zoe/dtype.h"

/* Gradient and output encodings the loops specialise on (no per-element branches). */
enum { ADAM_OUT_NONE = ZOE_DTYPE_COUNT };

static inline float adam_load_scalar(const void *p, size_t i, int dtype) {
    if (dtype == ZOE_BF16) return zoe_bf16_to_f32(((const zoe_bf16 *)p)[i]);
    if (dtype == ZOE_F16) return zoe_f16_to_f32(((const zoe_f16 *)p)[i]);
    return ((const float *)p)[i];
}

static inline void adam_store_scalar(void *p, size_t i, int dtype, float x) {
    if (dtype == ZOE_BF16)
        ((zoe_bf16 *)p)[i] = zoe_f32_to_bf16(x);
    else if (dtype == ZOE_F16)
        ((zoe_f16 *)p)[i] = zoe_f32_to_f16(x);
    else if (dtype == ZOE_F32)
        ((float *)p)[i] = x;
}

/* dec (AdamW) is a constant at every call site, so each mode compiles without the other's
 * operations. */
static inline float adam_element(const zoe_adam_consts *c, int dec, float grad, float w, float *m,
                                 float *v) {
    float g = grad * c->grad_scale;
    if (!dec) g = fmaf(c->l2, w, g);
    float mm = fmaf(c->beta1, *m, c->one_minus_beta1 * g);
    float vv = fmaf(c->beta2, *v, c->one_minus_beta2 * (g * g));
    float ww = dec ? w * c->decay : w;
    ww = fmaf(-c->step_size, mm / fmaf(sqrtf(vv), c->inv_sqrt_bc2, c->eps), ww);
    *m = mm, *v = vv;
    return ww;
}

/* Element i is read (gradient, weight, moments) before anything of it is written, so w_out may
 * be w_in or, for an fp32 gradient, the gradient itself, and out may be the gradient when both
 * have the same dtype (the in-place forms of kernels/adam.h). */
static inline void adam_scalar_range(const zoe_adam_consts *c, int dec, const float *w_in,
                                     float *w_out, float *m, float *v, const void *grad, int gdt,
                                     void *out, int odt, size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; i++) {
        float w = adam_element(c, dec, adam_load_scalar(grad, i, gdt), w_in[i], &m[i], &v[i]);
        w_out[i] = w;
        adam_store_scalar(out, i, odt, w);
    }
}

/* dst[i] = dtype(src[i] * scale): the DPU snapshot of a finished gradient. */
static inline void snapshot_scalar_range(void *dst, int ddt, const float *src, float scale,
                                         size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; i++) adam_store_scalar(dst, i, ddt, src[i] * scale);
}

static inline double accumulate_scalar_range(float *dst, const void *src, int sdt, float scale,
                                             int assign, size_t lo, size_t hi) {
    double sumsq = 0;
    for (size_t i = lo; i < hi; i++) {
        float x = adam_load_scalar(src, i, sdt) * scale;
        float d = assign ? x : dst[i] + x;
        dst[i] = d;
        sumsq += (double)(d * d);
    }
    return sumsq;
}

/* The address bytes past p, by integer arithmetic: the prefetches below reach past the range the
 * loop was given (harmless, a prefetch never faults), where pointer arithmetic would not be
 * defined. */
static inline const void *adam_address_ahead(const void *p, size_t bytes) {
    return (const void *)((uintptr_t)p + bytes);
}

/* The vector instantiations (adam_avx2.c, adam_avx512.c, adam_avx512_bf16.c); odt ADAM_OUT_NONE
 * means no output. */
void zoe_adam_avx2(const zoe_adam_consts *c, const float *w_in, float *w_out, float *m, float *v,
                   const void *grad, int gdt, void *out, int odt, size_t n);
double zoe_accumulate_avx2(float *dst, const void *src, int sdt, float scale, int assign, size_t n);
void zoe_snapshot_avx2(void *dst, int ddt, const float *src, float scale, size_t n);
void zoe_adam_avx512(const zoe_adam_consts *c, const float *w_in, float *w_out, float *m, float *v,
                     const void *grad, int gdt, void *out, int odt, size_t n);
double zoe_accumulate_avx512(float *dst, const void *src, int sdt, float scale, int assign,
                             size_t n);
void zoe_snapshot_avx512(void *dst, int ddt, const float *src, float scale, size_t n);
void zoe_adam_avx512_bf16(const zoe_adam_consts *c, const float *w_in, float *w_out, float *m,
                          float *v, const void *grad, int gdt, void *out, int odt, size_t n);
double zoe_accumulate_avx512_bf16(float *dst, const void *src, int sdt, float scale, int assign,
                                  size_t n);
void zoe_snapshot_avx512_bf16(void *dst, int ddt, const float *src, float scale, size_t n);

#endif /* ZOE_KERNELS_CPU_ADAM_SIMD_H */

#ifdef ADAM_FN
/* ---- the vector loops, instantiated once per including file ---- */

static inline __attribute__((always_inline)) VF ADAM_FN(load)(const void *p, size_t i, int dt) {
    if (dt == ZOE_BF16) return V_LOAD_BF16((const zoe_bf16 *)p + i);
    if (dt == ZOE_F16) return V_LOAD_F16((const zoe_f16 *)p + i);
    return V_LOAD_F32((const float *)p + i);
}

/* Two vectors of output at i with non-temporal stores: the compute-dtype weights go to a
 * pinned buffer that only the copy engine reads, so they should neither displace the state in
 * the cache nor cost a read-for-ownership (2 or 4 bytes per parameter of memory traffic). */
static inline __attribute__((always_inline)) void ADAM_FN(stream2)(void *p, size_t i, int dt, VF a,
                                                                   VF b) {
    if (dt == ZOE_BF16)
        V_STREAM2_BF16((zoe_bf16 *)p + i, a, b);
    else if (dt == ZOE_F16)
        V_STREAM2_F16((zoe_f16 *)p + i, a, b);
    else if (dt == ZOE_F32)
        V_STREAM_F32((float *)p + i, a), V_STREAM_F32((float *)p + i + W, b);
}

/* Elements before the output is aligned for the streaming stores (done by the scalar code;
 * the result does not depend on the split). The output is aligned to its element size. */
static inline size_t ADAM_FN(peel)(const void *out, int odt, size_t n) {
    if (odt == ADAM_OUT_NONE) return 0;
    size_t esz = odt == ZOE_F32 ? 4 : 2, align = W * 4, mis = (uintptr_t)out % align;
    size_t p = mis ? (align - mis) / esz : 0;
    return p < n ? p : n;
}

typedef struct ADAM_FN(vconsts) {
    VF gs, l2, b1, omb1, b2, omb2, decay, neg_step, isb2, eps;
} ADAM_FN(vconsts);

/* adam_element() on W lanes at i: updates master, m and v and returns the new weights. */
static inline __attribute__((always_inline)) VF
ADAM_FN(update)(const ADAM_FN(vconsts) * k, int dec, const float *w_in, float *w_out, float *m,
                float *v, const void *grad, int gdt, size_t i) {
    VF w = V_LOAD_F32(w_in + i);
    VF g = V_MUL(ADAM_FN(load)(grad, i, gdt), k->gs);
    if (!dec) g = V_FMA(k->l2, w, g);
    VF mm = V_FMA(k->b1, V_LOAD_F32(m + i), V_MUL(k->omb1, g));
    VF vv = V_FMA(k->b2, V_LOAD_F32(v + i), V_MUL(k->omb2, V_MUL(g, g)));
    if (dec) w = V_MUL(w, k->decay);
    w = V_FMA(k->neg_step, V_DIV(mm, V_FMA(V_SQRT(vv), k->isb2, k->eps)), w);
    V_STORE_F32(w_out + i, w);
    V_STORE_F32(m + i, mm);
    V_STORE_F32(v + i, vv);
    return w;
}

/* The lines of element i + ZOE_ADAM_PREFETCH_AHEAD (kernels/adam.h) into the cache: one prefetch
 * per 64-byte line of each fp32 input; the 16-bit gradient at the same element distance (every
 * iteration, so on the AVX2 path each of its lines twice). */
static inline __attribute__((always_inline)) void ADAM_FN(prefetch)(const float *w_in,
                                                                    const float *m, const float *v,
                                                                    const void *grad, int gdt,
                                                                    size_t i) {
    for (size_t q = 0; q < 2 * W; q += 16) {
        const size_t bytes = (ZOE_ADAM_PREFETCH_AHEAD + q) * sizeof(float);
        __builtin_prefetch(adam_address_ahead(w_in + i, bytes));
        __builtin_prefetch(adam_address_ahead(m + i, bytes));
        __builtin_prefetch(adam_address_ahead(v + i, bytes));
        if (gdt == ZOE_F32) __builtin_prefetch(adam_address_ahead((const float *)grad + i, bytes));
    }
    if (gdt != ZOE_F32)
        __builtin_prefetch(adam_address_ahead((const uint16_t *)grad + i,
                                              ZOE_ADAM_PREFETCH_AHEAD * sizeof(uint16_t)));
}

/* gdt and odt are constants at every call site below, so each combination compiles to its own
 * branch-free loop. Two vectors per iteration: independent work for the out-of-order core, and
 * one full-width store of 16-bit output. */
static inline __attribute__((always_inline)) void
ADAM_FN(adam_body)(const zoe_adam_consts *c, int dec, const float *w_in, float *w_out, float *m,
                   float *v, const void *grad, int gdt, void *out, int odt, size_t n) {
    const ADAM_FN(vconsts) k = {V_SET1(c->grad_scale),   V_SET1(c->l2),
                                V_SET1(c->beta1),        V_SET1(c->one_minus_beta1),
                                V_SET1(c->beta2),        V_SET1(c->one_minus_beta2),
                                V_SET1(c->decay),        V_SET1(-c->step_size),
                                V_SET1(c->inv_sqrt_bc2), V_SET1(c->eps)};
    size_t i = ADAM_FN(peel)(out, odt, n);
    adam_scalar_range(c, dec, w_in, w_out, m, v, grad, gdt, out, odt, 0, i);
    for (; i + 2 * W <= n; i += 2 * W) {
        ADAM_FN(prefetch)(w_in, m, v, grad, gdt, i);
        VF a = ADAM_FN(update)(&k, dec, w_in, w_out, m, v, grad, gdt, i);
        VF b = ADAM_FN(update)(&k, dec, w_in, w_out, m, v, grad, gdt, i + W);
        ADAM_FN(stream2)(out, i, odt, a, b);
    }
    if (odt != ADAM_OUT_NONE) V_FENCE();
    adam_scalar_range(c, dec, w_in, w_out, m, v, grad, gdt, out, odt, i, n);
}

/* Every (AdamW or not, gradient dtype, output dtype) gets its own loop. */
#define ADAM_BODY(dec, gdt, odt)                                                                   \
    ADAM_FN(adam_body)(c, dec, w_in, w_out, m, v, grad, gdt, out, odt, n)
#define ADAM_OUT_CASES(dec, gdt)                                                                   \
    switch (odt) {                                                                                 \
    case ZOE_F32:                                                                                  \
        ADAM_BODY(dec, gdt, ZOE_F32);                                                              \
        break;                                                                                     \
    case ZOE_BF16:                                                                                 \
        ADAM_BODY(dec, gdt, ZOE_BF16);                                                             \
        break;                                                                                     \
    case ZOE_F16:                                                                                  \
        ADAM_BODY(dec, gdt, ZOE_F16);                                                              \
        break;                                                                                     \
    default:                                                                                       \
        ADAM_BODY(dec, gdt, ADAM_OUT_NONE);                                                        \
        break;                                                                                     \
    }
#define ADAM_GRAD_CASES(dec)                                                                       \
    switch (gdt) {                                                                                 \
    case ZOE_BF16:                                                                                 \
        ADAM_OUT_CASES(dec, ZOE_BF16);                                                             \
        break;                                                                                     \
    case ZOE_F16:                                                                                  \
        ADAM_OUT_CASES(dec, ZOE_F16);                                                              \
        break;                                                                                     \
    default:                                                                                       \
        ADAM_OUT_CASES(dec, ZOE_F32);                                                              \
        break;                                                                                     \
    }

/* odt is ADAM_OUT_NONE when there is no output; dtypes were validated by the caller. */
static void ADAM_FN(adam)(const zoe_adam_consts *c, const float *w_in, float *w_out, float *m,
                          float *v, const void *grad, int gdt, void *out, int odt, size_t n) {
    if (c->decoupled)
        ADAM_GRAD_CASES(1)
    else
        ADAM_GRAD_CASES(0)
}
#undef ADAM_GRAD_CASES
#undef ADAM_OUT_CASES
#undef ADAM_BODY

static inline __attribute__((always_inline)) double
ADAM_FN(accumulate_body)(float *dst, const void *src, int sdt, float scale, int assign, size_t n) {
    const VF s = V_SET1(scale);
    VF acc = V_SET1(0.0f);
    double sumsq = 0;
    size_t i = 0;
    for (; i + W <= n; i += W) {
        VF x = V_MUL(ADAM_FN(load)(src, i, sdt), s);
        VF d = assign ? x : V_ADD(V_LOAD_F32(dst + i), x);
        V_STORE_F32(dst + i, d);
        acc = V_ADD(acc, V_MUL(d, d));
        /* Flush the fp32 lane sums into double every 1024 vectors: bounded rounding growth. */
        if ((i / W) % 1024 == 1023) sumsq += V_HSUM(acc), acc = V_SET1(0.0f);
    }
    sumsq += V_HSUM(acc);
    return sumsq + accumulate_scalar_range(dst, src, sdt, scale, assign, i, n);
}

static inline __attribute__((always_inline)) void
ADAM_FN(snapshot_body)(void *dst, int ddt, const float *src, float scale, size_t n) {
    const VF s = V_SET1(scale);
    size_t i = ADAM_FN(peel)(dst, ddt, n);
    snapshot_scalar_range(dst, ddt, src, scale, 0, i);
    for (; i + 2 * W <= n; i += 2 * W) {
        VF a = V_MUL(V_LOAD_F32(src + i), s), b = V_MUL(V_LOAD_F32(src + i + W), s);
        ADAM_FN(stream2)(dst, i, ddt, a, b);
    }
    V_FENCE();
    snapshot_scalar_range(dst, ddt, src, scale, i, n);
}

static void ADAM_FN(snapshot)(void *dst, int ddt, const float *src, float scale, size_t n) {
    switch (ddt) {
    case ZOE_BF16:
        ADAM_FN(snapshot_body)(dst, ZOE_BF16, src, scale, n);
        break;
    case ZOE_F16:
        ADAM_FN(snapshot_body)(dst, ZOE_F16, src, scale, n);
        break;
    default:
        ADAM_FN(snapshot_body)(dst, ZOE_F32, src, scale, n);
        break;
    }
}

static double ADAM_FN(accumulate)(float *dst, const void *src, int sdt, float scale, int assign,
                                  size_t n) {
    switch (sdt) {
    case ZOE_BF16:
        return ADAM_FN(accumulate_body)(dst, src, ZOE_BF16, scale, assign, n);
    case ZOE_F16:
        return ADAM_FN(accumulate_body)(dst, src, ZOE_F16, scale, assign, n);
    default:
        return ADAM_FN(accumulate_body)(dst, src, ZOE_F32, scale, assign, n);
    }
}
#endif /* ADAM_FN */
