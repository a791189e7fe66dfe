/* The host Adam kernels, every path this CPU runs (scalar, AVX2, AVX-512, AVX512_BF16), every
 * gradient dtype (fp32, bf16, fp16) and output dtype (fp32, bf16, fp16, none):
 *  - each SIMD path equals the scalar path bit for bit (same operations in the same order,
 *    the same fused multiply-adds, correctly rounded sqrt and division: kernels/adam.h), over
 *    pieces of lengths 1, 8, 29, ... at offsets that misalign the output (peeling) and leave
 *    vector tails, including the compute-dtype output, with NaN weights in vector lanes (their
 *    rounding);
 *  - the scalar path against a float64 Adam step: within 1e-5 relative of the update
 *    magnitude (~10 fp32 roundings of 2^-24 each in computing it) plus 3 roundings of the
 *    weight itself (the decay constant, w * decay, w - update);
 *  - the in-place forms of the layout (kernels/adam.h, zoe_adam_host_to) equal the separate
 *    buffers bit for bit on every path: the new fp32 weights over an fp32 gradient, read from
 *    weights left untouched, and the new compute-dtype weights over a compute-dtype gradient;
 *  - the DPU snapshot (fp32 times a scale, rounded to fp32, bf16, fp16) equals the scalar
 *    definition, zoe_f32_to_bf16 / _f16 of the fp32 product, bit for bit on every path;
 *  - the gradient accumulation (assign and add, scaled, each source dtype) equals the scalar
 *    definition bit for bit on every path, and its sum of squares is within 1e-6 relative of a
 *    float64 sum (fp32 lane sums, flushed to double).
 * Denormal weights and snapshot values are in vector lanes: the AVX512_BF16 path's instruction
 * flushes them, so that path must round them by the integer code.
 * Paths this CPU lacks are reported as skipped, and must fail with ZOE_ERR_UNSUPPORTED. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/adam.h"
#include "testing.h"
#include "zoe/dtype.h"

enum { N = 1000 + 13 };

static void fill_state(test_rng *rng, float *w, float *m, float *v, float *g) {
    for (int i = 0; i < N; i++) {
        w[i] = (float)(2 * test_rng_uniform(rng) - 1);
        m[i] = (float)(0.1 * test_rng_normal(rng));
        v[i] = (float)(0.01 * test_rng_uniform(rng) + 1e-6);
        g[i] = (float)test_rng_normal(rng);
    }
}

static void to_dtype(zoe_dtype dt, const float *src, void *dst) {
    CHECK_OK(zoe_convert(dst, dt, src, ZOE_F32, N));
}

static void check_paths_bitwise(const zoe_adam_consts *c, zoe_dtype gdt, zoe_dtype odt, int out) {
    test_rng rng;
    test_rng_seed(&rng, 11 + gdt * 5 + odt);
    float w0[N], m0[N], v0[N], g32[N];
    fill_state(&rng, w0, m0, v0, g32);
    /* NaN weights in vector lanes, with payloads that rounding would carry into the exponent or
     * the sign: the outputs must be quiet NaNs of their own high bits on every path. */
    for (int i = 40; i < N; i += 97) {
        const uint32_t bits = i % 2 ? 0x7fc0ffffu : 0xffffffffu;
        memcpy(&w0[i], &bits, sizeof bits);
    }
    /* Denormal weights with nothing to update them (zero gradient and moments): with decoupled
     * decay they stay denormal, which the AVX512_BF16 instruction would flush to zero where
     * zoe_f32_to_bf16 rounds; their pairs of vectors must take the integer rounding. */
    for (int i = 300; i < 400; i += 7) {
        w0[i] = (i % 2 ? 1 : -1) * 0x1p-127f * (float)(1 + i % 5), m0[i] = v0[i] = g32[i] = 0;
        w0[i + 1] = 0x1p-149f; /* the smallest, next to a zero gradient of the one before */
    }
    uint16_t g16[N];
    const void *g = g32;
    if (gdt != ZOE_F32) to_dtype(gdt, g32, g16), g = g16;
    float w[ZOE_CPU_ISA_COUNT][N], m[ZOE_CPU_ISA_COUNT][N], v[ZOE_CPU_ISA_COUNT][N];
    size_t osz = zoe_dtype_size(odt);
    unsigned char o[ZOE_CPU_ISA_COUNT][N * 4];
    for (int isa = 0; isa < ZOE_CPU_ISA_COUNT; isa++) {
        memcpy(w[isa], w0, sizeof w0), memcpy(m[isa], m0, sizeof m0);
        memcpy(v[isa], v0, sizeof v0);
        memset(o[isa], 0xA5, sizeof o[isa]); /* poison */
        /* In pieces starting at odd offsets: the vector paths peel to align the output. */
        zoe_status st = ZOE_OK;
        size_t gsz = zoe_dtype_size(gdt);
        for (size_t lo = 0, len = 1; lo < N && st == ZOE_OK; lo += len, len = len * 3 + 5) {
            if (lo + len > N) len = N - lo;
            st = zoe_adam_host_isa((zoe_cpu_isa)isa, c, w[isa] + lo, m[isa] + lo, v[isa] + lo,
                                   (const char *)g + lo * gsz, gdt, out ? o[isa] + lo * osz : NULL,
                                   odt, len);
        }
        if (!zoe_cpu_isa_supported((zoe_cpu_isa)isa)) {
            CHECK(st == ZOE_ERR_UNSUPPORTED, "%s path on a CPU without it returned %d",
                  zoe_cpu_isa_name((zoe_cpu_isa)isa), (int)st);
            continue;
        }
        CHECK_OK(st);
        if (isa == ZOE_CPU_ISA_SCALAR) continue;
        size_t out_bytes = out ? N * osz : 0;
        CHECK(memcmp(w[isa], w[0], sizeof w0) == 0 && memcmp(m[isa], m[0], sizeof m0) == 0 &&
                  memcmp(v[isa], v[0], sizeof v0) == 0 && memcmp(o[isa], o[0], out_bytes) == 0,
              "%s path differs from scalar: grad %s out %s", zoe_cpu_isa_name((zoe_cpu_isa)isa),
              zoe_dtype_name(gdt), out ? zoe_dtype_name(odt) : "none");
    }
    /* The output is the new master weight rounded to the output dtype, bit for bit (NaNs too). */
    if (out)
        for (int i = 0; i < N; i++) {
            uint32_t want, got = 0;
            memcpy(&want, &w[0][i], 4);
            if (odt == ZOE_F32)
                memcpy(&got, o[0] + 4 * i, 4);
            else
                got = ((uint16_t *)o[0])[i],
                want = odt == ZOE_BF16 ? zoe_f32_to_bf16(w[0][i]) : zoe_f32_to_f16(w[0][i]);
            if (got != want) {
                CHECK(0, "output %s [%d] = 0x%x, the master rounds to 0x%x", zoe_dtype_name(odt), i,
                      got, want);
                break;
            }
        }
}

/* The scalar path against Adam in float64, from the same fp32 inputs. */
static void check_against_double(const zoe_adam_hparams *h) {
    zoe_adam_consts c;
    zoe_adam_consts_init(&c, h);
    test_rng rng;
    test_rng_seed(&rng, 3);
    float w[N], m[N], v[N], g[N];
    fill_state(&rng, w, m, v, g);
    double want[N], got[N], step[N];
    double bc1 = 1 - pow(h->beta1, (double)h->step), bc2 = 1 - pow(h->beta2, (double)h->step);
    for (int i = 0; i < N; i++) {
        double gi = (double)g[i] * h->grad_scale + (h->decoupled ? 0 : h->weight_decay * w[i]);
        double mi = h->beta1 * (double)m[i] + (1 - h->beta1) * gi;
        double vi = h->beta2 * (double)v[i] + (1 - h->beta2) * gi * gi;
        double wi = w[i] * (h->decoupled ? 1 - h->lr * h->weight_decay : 1.0);
        step[i] = h->lr / bc1 * mi / (sqrt(vi) / sqrt(bc2) + h->eps);
        want[i] = wi - step[i];
    }
    CHECK_OK(zoe_adam_host_isa(ZOE_CPU_ISA_SCALAR, &c, w, m, v, g, ZOE_F32, NULL, ZOE_F32, N));
    for (int i = 0; i < N; i++) got[i] = w[i];
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double e = fabs(got[i] - want[i]) - 1e-5 * fabs(step[i]) - 3 * 0x1p-24 * fabs(want[i]);
        if (e > worst) worst = e;
    }
    CHECK(worst <= 0, "scalar Adam (decoupled=%d) vs float64: excess error %g", h->decoupled,
          worst);
}

static void check_accumulate(zoe_dtype sdt, int assign) {
    test_rng rng;
    test_rng_seed(&rng, 21 + sdt);
    float src32[N], dst0[N], ref[N], got[N];
    uint16_t src16[N];
    test_fill_uniform(&rng, src32, N, -3, 3);
    test_fill_uniform(&rng, dst0, N, -1, 1);
    const void *src = src32;
    if (sdt != ZOE_F32) to_dtype(sdt, src32, src16), src = src16;
    const float scale = 0.25f;
    double want_sumsq = 0;
    for (int i = 0; i < N; i++) {
        float x = (sdt == ZOE_BF16  ? zoe_bf16_to_f32(src16[i])
                   : sdt == ZOE_F16 ? zoe_f16_to_f32(src16[i])
                                    : src32[i]) *
                  scale;
        ref[i] = assign ? x : dst0[i] + x;
        want_sumsq += (double)ref[i] * ref[i];
    }
    memcpy(got, dst0, sizeof got);
    double sumsq = -1;
    CHECK_OK(zoe_grad_accumulate_host(got, src, sdt, scale, assign, N, &sumsq));
    CHECK(memcmp(got, ref, sizeof ref) == 0, "accumulate %s assign=%d differs from definition",
          zoe_dtype_name(sdt), assign);
    CHECK(fabs(sumsq - want_sumsq) <= 1e-6 * want_sumsq, "accumulate sumsq %.9g, want %.9g", sumsq,
          want_sumsq);
}

/* The in-place forms against separate buffers, on every path this CPU runs. */
static void check_in_place(const zoe_adam_consts *c, zoe_dtype half) {
    test_rng rng;
    test_rng_seed(&rng, 29 + half);
    float w0[N], m0[N], v0[N], g0[N];
    fill_state(&rng, w0, m0, v0, g0);
    uint16_t gh0[N];
    to_dtype(half, g0, gh0);
    for (int p = 0; p < ZOE_CPU_ISA_COUNT; p++) {
        const zoe_cpu_isa isa = (zoe_cpu_isa)p;
        if (!zoe_cpu_isa_supported(isa)) continue;
        float w[N], m[N], v[N], g[N], wo[N], rm[N], rv[N];
        /* fp32: w_out over the gradient, the weights only read. */
        memcpy(w, w0, sizeof w), memcpy(m, m0, sizeof m), memcpy(v, v0, sizeof v);
        memcpy(g, g0, sizeof g), memcpy(rm, m0, sizeof m), memcpy(rv, v0, sizeof v);
        CHECK_OK(zoe_adam_host_to_isa(isa, c, w0, wo, rm, rv, g0, ZOE_F32, NULL, ZOE_F32, N));
        CHECK_OK(zoe_adam_host_to_isa(isa, c, w, g, m, v, g, ZOE_F32, NULL, ZOE_F32, N));
        CHECK(!memcmp(g, wo, sizeof g) && !memcmp(m, rm, sizeof m) && !memcmp(v, rv, sizeof v) &&
                  !memcmp(w, w0, sizeof w),
              "%s: new weights over the fp32 gradient differ from separate buffers",
              zoe_cpu_isa_name(isa));
        /* Compute dtype: the new weights over the compute-dtype gradient (odd offset: peeling). */
        uint16_t gh[N], out[N];
        memcpy(w, w0, sizeof w), memcpy(m, m0, sizeof m), memcpy(v, v0, sizeof v);
        memcpy(wo, w0, sizeof w), memcpy(rm, m0, sizeof m), memcpy(rv, v0, sizeof v);
        memcpy(gh, gh0, sizeof gh);
        CHECK_OK(zoe_adam_host_to_isa(isa, c, wo + 3, wo + 3, rm + 3, rv + 3, gh0 + 3, half,
                                      out + 3, half, N - 3));
        CHECK_OK(zoe_adam_host_to_isa(isa, c, w + 3, w + 3, m + 3, v + 3, gh + 3, half, gh + 3,
                                      half, N - 3));
        CHECK(!memcmp(gh + 3, out + 3, (N - 3) * 2) && !memcmp(w, wo, sizeof w) &&
                  !memcmp(m, rm, sizeof m),
              "%s: new %s weights over the %s gradient differ from separate buffers",
              zoe_cpu_isa_name(isa), zoe_dtype_name(half), zoe_dtype_name(half));
    }
}

/* The snapshot kernel against its scalar definition, on every path this CPU runs. */
static void check_snapshot(zoe_dtype dt) {
    test_rng rng;
    test_rng_seed(&rng, 41 + dt);
    float g[N], want32[N], got32[N];
    uint16_t want[N], got[N];
    for (int i = 0; i < N; i++) g[i] = (float)(1e3 * test_rng_normal(&rng));
    g[7] = NAN, g[8] = INFINITY;
    /* NaNs throughout (most inside the vector loop), with payloads that rounding would carry
     * into the exponent or the sign: each must come out a quiet NaN of its own high bits. */
    const uint32_t nans[] = {0x7fc0ffffu, 0x7fffffffu, 0xffc08001u, 0x7f80ffffu};
    for (int i = 37, k = 0; i < N; i += 61, k++) {
        uint32_t bits = nans[k % 4];
        memcpy(&g[i], &bits, sizeof bits);
    }
    /* Products that are denormal (rounded by zoe_f32_to_bf16, flushed by the bf16 instruction),
     * and zeros around them. */
    for (int i = 500; i < 600; i += 9)
        g[i] = (i % 2 ? 1e-38f : -3e-39f) * (float)(i % 4), g[i + 1] = 0;
    const float scale = 1.0f / 3.0f;
    for (int i = 0; i < N; i++) {
        want32[i] = g[i] * scale;
        want[i] = dt == ZOE_BF16 ? zoe_f32_to_bf16(want32[i]) : zoe_f32_to_f16(want32[i]);
    }
    int off = 5; /* misaligned: the peel */
    for (int p = 0; p < ZOE_CPU_ISA_COUNT; p++) {
        const zoe_cpu_isa isa = (zoe_cpu_isa)p;
        memset(got, 0xA5, sizeof got), memset(got32, 0xA5, sizeof got32);
        zoe_status st = zoe_grad_snapshot_host_isa(isa, got + off, dt, g + off, scale, N - off);
        if (!zoe_cpu_isa_supported(isa)) {
            CHECK(st == ZOE_ERR_UNSUPPORTED, "%s snapshot on a CPU without it returned %d",
                  zoe_cpu_isa_name(isa), (int)st);
            continue;
        }
        CHECK_OK(st);
        CHECK_OK(zoe_grad_snapshot_host_isa(isa, got32 + off, ZOE_F32, g + off, scale, N - off));
        CHECK(!memcmp(got + off, want + off, (N - off) * 2) &&
                  !memcmp(got32 + off, want32 + off, (N - off) * 4),
              "%s %s snapshot differs from the scalar rounding", zoe_cpu_isa_name(isa),
              zoe_dtype_name(dt));
    }
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    if (test_rank() == 0) {
        printf("paths on this CPU:");
        for (int p = 0; p < ZOE_CPU_ISA_COUNT; p++) {
            const char *name = zoe_cpu_isa_name((zoe_cpu_isa)p);
            printf(zoe_cpu_isa_supported((zoe_cpu_isa)p) ? " %s" : " [%s skipped]", name);
        }
        printf(" (best %s)\n", zoe_cpu_isa_name(zoe_cpu_isa_best()));
    }
    const zoe_dtype dts[] = {ZOE_F32, ZOE_BF16, ZOE_F16};
    for (int decoupled = 0; decoupled < 2; decoupled++) {
        zoe_adam_hparams h = {.lr = 1e-3f,
                              .beta1 = 0.9f,
                              .beta2 = 0.95f,
                              .eps = 1e-8f,
                              .weight_decay = 0.1f,
                              .decoupled = decoupled,
                              .grad_scale = 0.37f,
                              .step = 7};
        zoe_adam_consts c;
        zoe_adam_consts_init(&c, &h);
        for (int gi = 0; gi < 3; gi++)
            for (int oi = 0; oi < 4; oi++)
                check_paths_bitwise(&c, dts[gi], oi < 3 ? dts[oi] : ZOE_F32, oi < 3);
        check_against_double(&h);
        check_in_place(&c, ZOE_BF16);
        check_in_place(&c, ZOE_F16);
    }
    check_snapshot(ZOE_BF16);
    check_snapshot(ZOE_F16);
    for (int si = 0; si < 3; si++)
        for (int assign = 0; assign < 2; assign++) check_accumulate(dts[si], assign);
    /* Bad dtypes are refused before anything is written. */
    float w = 1, m = 0, v = 0, g = 1;
    zoe_adam_consts c = {0};
    CHECK(zoe_adam_host(&c, &w, &m, &v, &g, ZOE_I32, NULL, ZOE_F32, 1) ==
                  ZOE_ERR_INVALID_ARGUMENT &&
              w == 1,
          "int32 gradient accepted");
    CHECK(strstr(zoe_last_error(), "int32") != NULL, "message '%s' names the dtype",
          zoe_last_error());
    return test_finish("test_adam_kernels");
}
