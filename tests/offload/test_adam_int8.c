/* The host Adam over blockwise int8 moments (kernels/adam_state.h, "Blockwise int8 moments"):
 *  - every path (scalar, AVX2, AVX-512, AVX-512-BF16) gives the same bits for every combination
 *    with an int8 moment (master fp32/bf16, m and v fp32/bf16/int8), over a ragged length whose
 *    last block is short, and the bits do not depend on splitting the range at block boundaries,
 *    with blocks whose scales are tiny, a NaN (two payloads) and infinite among them;
 *  - against float64: the step computed in double from the dequantised state; the master within
 *    fp32 rounding of it (1e-5 relative of the update plus 3 ulps, test_adam_kernels' bound); each
 *    m code the nearest code of the float64 m' (within 1e-5 of a code spacing: fp32 against float64
 *    arithmetic); each v code one of the two codes around the float64 v', never 0 where v' > 0;
 *    each scale the power of two with absmax / s in (1/2, 1];
 *  - dequantise then quantise gives back the codes and scales, for m and for v (nearest and
 *    stochastic), which a bit-exact conversion fp32 -> int8 of int8-held state needs;
 *  - v's stochastic rounding is unbiased: the mean of 2^14 draws of one value is the value within
 *    4 standard errors; a block with a 1e6 range keeps every nonzero v nonzero;
 *  - a block's codes are those of the same block times 2^100 (a scale below 2^-100, subnormals);
 *  - each path's block quantisers (kernels/cpu/adam_state_int8_simd.h: a guess from the
 *    approximate reciprocal square root, corrected) give the scalar ones' codes and scales for
 *    y = |x| / s at and within 8 ulps of every code's unit and of every midpoint between two
 *    codes, signed for m, at scale 1 and 2^-120, v with random bits (an offline run compared
 *    every float y in [0, 1] the same way: docs/offload.md);
 *  - the undo (the exact DPU's redo) restores the state before the step within the bound of
 *    kernels/adam_state.h (check_undo), from an fp32 or a bf16 gradient; an int8 master is
 *    refused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/adam_state.h"
#include "kernels/cpu/adam_state_int8_block.h"
#include "adam_state_test.h"
#include "testing.h"
#include "zoe/dtype.h"

enum { N = 777, BLOCKS = (N + ZOE_ADAM_INT8_BLOCK - 1) / ZOE_ADAM_INT8_BLOCK };

/* The state of one run in its dtypes (int8 moments with their scales). */
typedef struct held {
    unsigned char w[N * 4], m[N * 4], v[N * 4], out[N * 4];
    float g[N], m_scale[BLOCKS], v_scale[BLOCKS];
} held;

static zoe_adam_state view(held *h) {
    return (zoe_adam_state){.master = h->w,
                            .exp_avg = h->m,
                            .exp_avg_sq = h->v,
                            .exp_avg_scale = h->m_scale,
                            .exp_avg_sq_scale = h->v_scale};
}

static void hold_moment(const float *x, zoe_dtype dt, int is_v, void *codes, float *scales) {
    if (dt != ZOE_I8)
        CHECK_OK(zoe_convert(codes, dt, x, ZOE_F32, N));
    else if (is_v)
        zoe_adam_int8_quantize_v(x, NULL, N, codes, scales);
    else
        zoe_adam_int8_quantize_m(x, N, codes, scales);
}

static float read_moment(const held *h, zoe_dtype dt, int is_v, size_t i) {
    const void *p = is_v ? h->v : h->m;
    if (dt == ZOE_I8)
        return is_v ? zoe_adam_int8_v_value(((const uint8_t *)p)[i], h->v_scale[i / 256])
                    : zoe_adam_int8_m_value(((const int8_t *)p)[i], h->m_scale[i / 256]);
    return dt == ZOE_BF16 ? zoe_bf16_to_f32(((const zoe_bf16 *)p)[i]) : ((const float *)p)[i];
}

/* A quiet NaN with the given payload bits. */
static float nan_with(uint32_t payload) {
    uint32_t u = 0x7fc00000u | payload;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Random state: weights in [-1, 1], m ~ 0.1 N(0,1), v over four decades, gradients N(0,1).
 * With edges, the blocks the paths' quantisers treat apart: block 1 at 1e-33 of that (m, v
 * and gradient), so that its new scales are below 2^-100 (the quantisers' rescaled
 * reciprocal); block 2 with two NaN gradients of different payloads, the smaller first (the
 * scale is the block's first NaN, not its largest pattern); the short last block with an
 * infinite gradient (an infinite scale). */
static void fill(test_rng *rng, const zoe_adam_state_dtypes *dt, held *h, int edges) {
    float w[N], m[N], v[N];
    for (int i = 0; i < N; i++) {
        float tiny = edges && i / ZOE_ADAM_INT8_BLOCK == 1 ? 1e-33f : 1;
        w[i] = (float)(2 * test_rng_uniform(rng) - 1);
        m[i] = tiny * (float)(0.1 * test_rng_normal(rng));
        v[i] = tiny * (float)(1e-2 * pow(10, -4 * test_rng_uniform(rng)));
        h->g[i] = tiny * (float)test_rng_normal(rng);
    }
    if (edges) h->g[600] = nan_with(1), h->g[610] = nan_with(0xfff), h->g[770] = INFINITY;
    CHECK_OK(zoe_convert(h->w, dt->master, w, ZOE_F32, N));
    hold_moment(m, dt->exp_avg, 0, h->m, h->m_scale);
    hold_moment(v, dt->exp_avg_sq, 1, h->v, h->v_scale);
    memset(h->out, 0xA5, sizeof h->out);
}

static int same(const held *a, const held *b) {
    return memcmp(a->w, b->w, sizeof a->w) == 0 && memcmp(a->m, b->m, sizeof a->m) == 0 &&
           memcmp(a->v, b->v, sizeof a->v) == 0 && memcmp(a->out, b->out, sizeof a->out) == 0 &&
           memcmp(a->m_scale, b->m_scale, sizeof a->m_scale) == 0 &&
           memcmp(a->v_scale, b->v_scale, sizeof a->v_scale) == 0;
}

static void check_paths(const zoe_adam_state_dtypes *dt, zoe_dtype odt, int dec) {
    static held start, ref, got;
    test_rng rng;
    test_rng_seed(&rng, 11);
    memset(&start, 0, sizeof start);
    fill(&rng, dt, &start, 1);
    zoe_adam_consts c = consts_of(dec, 7);
    zoe_adam_rounding r = {.seed = 0x1234567890abcdefULL, .step = 7};
    const uint64_t index0 = ((uint64_t)1 << 32) - 300; /* across a key word, mid-block */
    ref = start;
    zoe_adam_state st = view(&ref);
    CHECK_OK(zoe_adam_state_host_isa(ZOE_CPU_ISA_SCALAR, &c, &r, dt, &st, index0, ref.g, ZOE_F32,
                                     ref.out, odt, N));
    if (dt->exp_avg == ZOE_I8) { /* the edges of fill() reached the quantiser */
        uint32_t first_nan, expected;
        float nan1 = nan_with(1);
        memcpy(&first_nan, &ref.m_scale[2], sizeof first_nan);
        memcpy(&expected, &nan1, sizeof expected);
        /* (With L2 the weight decay term makes block 1's m' large again.) */
        CHECK(ref.m_scale[1] > 0 && (!dec || ref.m_scale[1] < 0x1p-100f) && first_nan == expected &&
                  isinf(ref.m_scale[3]),
              "edge scales %g %08x %g (want below 2^-100 for AdamW, NaN %08x, infinity)",
              ref.m_scale[1], first_nan, ref.m_scale[3], expected);
    }
    for (int p = 1; p < NUM_ISAS; p++) {
        if (!zoe_cpu_isa_supported(isas[p])) continue;
        got = start;
        st = view(&got);
        CHECK_OK(zoe_adam_state_host_isa(isas[p], &c, &r, dt, &st, index0, got.g, ZOE_F32, got.out,
                                         odt, N));
        CHECK(same(&ref, &got), "%s differs from scalar: master %s m %s v %s out %s",
              zoe_cpu_isa_name(isas[p]), zoe_dtype_name(dt->master), zoe_dtype_name(dt->exp_avg),
              zoe_dtype_name(dt->exp_avg_sq), zoe_dtype_name(odt));
    }
    /* Split at a block boundary into two calls. */
    got = start;
    size_t cut = 2 * ZOE_ADAM_INT8_BLOCK, ms = zoe_adam_state_esize(dt->master),
           as = zoe_adam_state_esize(dt->exp_avg), ss = zoe_adam_state_esize(dt->exp_avg_sq);
    st = view(&got);
    CHECK_OK(zoe_adam_state_host(&c, &r, dt, &st, index0, got.g, ZOE_F32, got.out, odt, cut));
    zoe_adam_state rest = {.master = got.w + cut * ms,
                           .exp_avg = got.m + cut * as,
                           .exp_avg_sq = got.v + cut * ss,
                           .exp_avg_scale = got.m_scale + 2,
                           .exp_avg_sq_scale = got.v_scale + 2};
    CHECK_OK(zoe_adam_state_host(&c, &r, dt, &rest, index0 + cut, got.g + cut, ZOE_F32,
                                 got.out + cut * zoe_dtype_size(odt), odt, N - cut));
    CHECK(same(&ref, &got), "split at a block boundary differs (m %s v %s)",
          zoe_dtype_name(dt->exp_avg), zoe_dtype_name(dt->exp_avg_sq));
}

static int is_scale_of(float s, const float *x, size_t n) {
    double absmax = 0;
    for (size_t i = 0; i < n; i++) absmax = fmax(absmax, fabs(x[i]));
    int e;
    return absmax == 0 ? s == 0 : frexpf(s, &e) == 0.5f && absmax / s > 0.5 && absmax / s <= 1;
}

/* The float64 step of element i from the state before it (int8 moments read back): its
 * weight w, gradient term g, and new moments m1 and v1. */
typedef struct step64 {
    double w, g, m1, v1;
} step64;

static step64 step64_of(const held *before, const zoe_adam_consts *c, int dec, size_t i) {
    step64 s = {.w = ((const float *)before->w)[i]};
    double m = read_moment(before, ZOE_I8, 0, i), v = read_moment(before, ZOE_I8, 1, i);
    s.g = (double)before->g[i] * c->grad_scale;
    if (!dec) s.g += (double)c->l2 * s.w;
    s.m1 = c->beta1 * m + (double)c->one_minus_beta1 * s.g;
    s.v1 = c->beta2 * v + (double)c->one_minus_beta2 * s.g * s.g;
    return s;
}

static void check_reference(int dec) {
    const zoe_adam_state_dtypes dt = {ZOE_F32, ZOE_I8, ZOE_I8};
    static held h, before;
    test_rng rng;
    test_rng_seed(&rng, 23 + (uint64_t)dec);
    fill(&rng, &dt, &h, 0);
    before = h;
    zoe_adam_consts c = consts_of(dec, 7);
    zoe_adam_rounding r = {.seed = 5, .step = 7};
    zoe_adam_state st = view(&h);
    CHECK_OK(zoe_adam_state_host(&c, &r, &dt, &st, 0, h.g, ZOE_F32, NULL, ZOE_F32, N));
    float m64f[N], v64f[N];
    int bad_w = 0, bad_m = 0, bad_v = 0, zero_v = 0;
    for (int i = 0; i < N; i++) {
        step64 s = step64_of(&before, &c, dec, (size_t)i);
        double w = s.w, m1 = s.m1, v1 = s.v1;
        double upd = c.step_size * m1 / (sqrt(v1) * c.inv_sqrt_bc2 + c.eps);
        double w1 = (dec ? w * c.decay : w) - upd;
        double wg = ((float *)h.w)[i];
        if (fabs(wg - w1) > 1e-5 * fabs(upd) + 3 * ldexp(fabs(w1), -23)) bad_w++;
        m64f[i] = (float)m1;
        v64f[i] = (float)v1;
        /* m: the nearest code; v: one of the two codes around v1, never 0 */
        double ms = h.m_scale[i / 256], vs = h.v_scale[i / 256];
        int mc = ((int8_t *)h.m)[i], vc = ((uint8_t *)h.v)[i];
        double t = sqrt(fabs(m1) / ms) * 127; /* v1's and m1's place on the code axis */
        double mv = fabs(read_moment(&h, ZOE_I8, 0, (size_t)i));
        double lo_c = floor(t), lo_v = lo_c * lo_c / 16129 * ms,
               hi_v = (lo_c + 1) * (lo_c + 1) / 16129 * ms;
        double spacing = hi_v - lo_v, err = fmin(fabs(mv - lo_v), fabs(mv - hi_v));
        double nearest = fabs(fabs(m1) - lo_v) < fabs(hi_v - fabs(m1)) ? lo_v : hi_v;
        if (err > 1e-5 * spacing ||
            (fabs(mv - nearest) > 1e-5 * spacing &&
             fabs(fabs(fabs(m1) - lo_v) - fabs(hi_v - fabs(m1))) > 1e-5 * spacing) ||
            (mc != 0 && (mc < 0) != (m1 < 0)))
            bad_m++;
        double tv = sqrt(v1 / vs) * 255, cv = vc;
        if (cv < floor(tv) - 1e-6 * 255 - 1e-9 || cv > ceil(tv) + 1e-6 * 255) bad_v++;
        if (vc == 0 && v1 > 0) zero_v++;
    }
    CHECK(bad_w == 0, "%d masters off the float64 step (dec %d)", bad_w, dec);
    CHECK(bad_m == 0, "%d m codes not the nearest to float64 m' (dec %d)", bad_m, dec);
    CHECK(bad_v == 0, "%d v codes not around float64 v' (dec %d)", bad_v, dec);
    CHECK(zero_v == 0, "%d v rounded to zero", zero_v);
    for (int b = 0; b < BLOCKS; b++) {
        size_t lo = (size_t)b * 256, len = N - lo < 256 ? N - lo : 256;
        CHECK(is_scale_of(h.m_scale[b], m64f + lo, len) || h.m_scale[b] == 0,
              "m scale %g of block %d is not the power of two of its absmax", h.m_scale[b], b);
        CHECK(is_scale_of(h.v_scale[b], v64f + lo, len),
              "v scale %g of block %d is not the power of two of its absmax", h.v_scale[b], b);
    }
}

static void check_idempotent(void) {
    test_rng rng;
    test_rng_seed(&rng, 31);
    static float x[N], back[N];
    static int8_t mc[N], mc2[N];
    static uint8_t vc[N], vc2[N];
    static uint16_t bits[N];
    float ms[BLOCKS], ms2[BLOCKS], vs[BLOCKS], vs2[BLOCKS];
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < N; i++) {
            x[i] = (float)(test_rng_normal(&rng) * pow(10, -3 * test_rng_uniform(&rng)));
            bits[i] = (uint16_t)test_rng_next(&rng);
        }
        zoe_adam_int8_quantize_m(x, N, mc, ms);
        zoe_adam_int8_dequantize_m(mc, ms, N, back);
        zoe_adam_int8_quantize_m(back, N, mc2, ms2);
        CHECK(memcmp(mc, mc2, sizeof mc) == 0 && memcmp(ms, ms2, sizeof ms) == 0,
              "m: dequantise -> quantise changed the codes");
        for (int i = 0; i < N; i++) x[i] = x[i] * x[i];
        zoe_adam_int8_quantize_v(x, bits, N, vc, vs);
        zoe_adam_int8_dequantize_v(vc, vs, N, back);
        for (int i = 0; i < N; i++) bits[i] = (uint16_t)test_rng_next(&rng);
        zoe_adam_int8_quantize_v(back, bits, N, vc2, vs2);
        CHECK(memcmp(vc, vc2, sizeof vc) == 0 && memcmp(vs, vs2, sizeof vs) == 0,
              "v: dequantise -> quantise (stochastic) changed the codes");
        zoe_adam_int8_quantize_v(back, NULL, N, vc2, vs2);
        CHECK(memcmp(vc, vc2, sizeof vc) == 0, "v: dequantise -> quantise (nearest) changed");
    }
    /* A block whose largest v sits just above half its scale, rounded down by its random bits
     * and by nearest alike without the rule that keeps it above half: read back, it would find
     * half the scale and other codes. */
    float top[2] = {0.5005f, 0.2f}, top_back[2], s1, s2;
    uint8_t tc[2], tc2[2];
    uint16_t down[2] = {0xffff, 0x1234};
    zoe_adam_int8_quantize_v(top, down, 2, tc, &s1);
    zoe_adam_int8_dequantize_v(tc, &s1, 2, top_back);
    zoe_adam_int8_quantize_v(top_back, down, 2, tc2, &s2);
    CHECK(s1 == s2 && memcmp(tc, tc2, 2) == 0 && top_back[0] > 0.5f,
          "v just above half its scale: read back as %g, scale %g then %g", top_back[0], s1, s2);
}

static void check_v_rounding(void) {
    /* One value between codes, with a block max fixing the scale at 1: the mean of the stored
     * values over 2^14 draws against the value; the spread of one draw is at most half the code
     * spacing, so 4 standard errors are 2 spacing / 128. */
    enum { DRAWS = 1 << 14 };
    float x[2] = {1.0f, 0.01234f}, s, back[2];
    uint8_t codes[2];
    double sum = 0;
    for (uint32_t d = 0; d < DRAWS; d++) {
        uint16_t bits[2] = {0, (uint16_t)(zoe_hash32(d) >> 16)};
        zoe_adam_int8_quantize_v(x, bits, 2, codes, &s);
        zoe_adam_int8_dequantize_v(codes, &s, 2, back);
        sum += back[1];
    }
    double k = floor(sqrt(0.01234) * 255), spacing = ((k + 1) * (k + 1) - k * k) / 65025;
    CHECK(fabs(sum / DRAWS - 0.01234) < 4 * 0.5 * spacing / sqrt(DRAWS),
          "v's stochastic rounding biased: mean %.8f against 0.01234", sum / DRAWS);
    /* A 1e6 range in one block: every nonzero v stays nonzero. */
    float wide[256];
    uint8_t wc[256];
    for (int i = 0; i < 256; i++) wide[i] = i == 0 ? 1.0f : i == 1 ? 0 : 1e-6f * (float)i / 256;
    zoe_adam_int8_quantize_v(wide, NULL, 256, wc, &s);
    int zeros = 0;
    for (int i = 2; i < 256; i++) zeros += wc[i] == 0;
    CHECK(zeros == 0 && wc[1] == 0, "%d tiny v rounded to zero (and zero v code %d)", zeros, wc[1]);
}

/* A block's codes do not depend on its magnitude: subnormal values around 1e-40 (a scale below
 * 2^-127, whose reciprocal is not a float) get the codes of the same values times 2^100, exactly
 * (both are x / s of the same real numbers), and a scale 2^100 smaller. */
static void check_tiny_scale(void) {
    test_rng rng;
    test_rng_seed(&rng, 5);
    float tiny[256], big[256], s_tiny, s_big;
    int8_t mc_tiny[256], mc_big[256];
    uint8_t vc_tiny[256], vc_big[256];
    uint16_t bits[256];
    for (int i = 0; i < 256; i++) {
        tiny[i] = (float)(1e-40 * test_rng_normal(&rng) * pow(10, -4 * test_rng_uniform(&rng)));
        big[i] = tiny[i] * 0x1p100f; /* exact: a power of two, no overflow */
        bits[i] = (uint16_t)(test_rng_uniform(&rng) * 65536);
    }
    zoe_adam_int8_quantize_m(tiny, 256, mc_tiny, &s_tiny);
    zoe_adam_int8_quantize_m(big, 256, mc_big, &s_big);
    CHECK(memcmp(mc_tiny, mc_big, sizeof mc_tiny) == 0 && s_tiny * 0x1p100f == s_big,
          "m codes depend on the block's magnitude (scales %g, %g)", s_tiny, s_big);
    for (int i = 0; i < 256; i++) tiny[i] = fabsf(tiny[i]), big[i] = fabsf(big[i]);
    zoe_adam_int8_quantize_v(tiny, bits, 256, vc_tiny, &s_tiny);
    zoe_adam_int8_quantize_v(big, bits, 256, vc_big, &s_big);
    CHECK(memcmp(vc_tiny, vc_big, sizeof vc_tiny) == 0 && s_tiny * 0x1p100f == s_big,
          "v codes depend on the block's magnitude (scales %g, %g)", s_tiny, s_big);
}

/* y moved by d ulps within [0, 1]. */
static float ulps_from(float y, int d) {
    uint32_t u;
    memcpy(&u, &y, sizeof u);
    int64_t moved = (int64_t)u + d;
    moved = moved < 0 ? 0 : moved > 0x3f800000 ? 0x3f800000 : moved;
    u = (uint32_t)moved;
    memcpy(&y, &u, sizeof y);
    return y;
}

static void check_block_paths(void) {
    enum { ULPS = 8, PER_CODE = 2 * (2 * ULPS + 1), MAX_Y = 256 * PER_CODE };
    static float ys[MAX_Y];
    const zoe_int8_block_fns ref = zoe_int8_block_fns_scalar();
    test_rng rng;
    test_rng_seed(&rng, 41);
    const zoe_int8_block_fns paths[] = {zoe_int8_block_fns_avx2(), zoe_int8_block_fns_avx512()};
    const zoe_cpu_isa levels[] = {ZOE_CPU_ISA_AVX2, ZOE_CPU_ISA_AVX512};
    for (int top = 127; top <= 255; top += 128) {
        float (*unit)(int) = top == 127 ? zoe_adam_int8_m_unit : zoe_adam_int8_v_unit;
        size_t n = 0;
        for (int k = 0; k <= top; k++)
            for (int d = -ULPS; d <= ULPS; d++) {
                ys[n++] = ulps_from(unit(k), d);
                if (k < top) ys[n++] = ulps_from(0.5f * (unit(k) + unit(k + 1)), d);
            }
        for (int p = 0; p < 2; p++) {
            if (!zoe_cpu_isa_supported(levels[p])) continue;
            int bad = 0;
            for (int tiny = 0; tiny < 2; tiny++)
                for (size_t lo = 0; lo < n; lo += ZOE_ADAM_INT8_BLOCK - 1) {
                    /* element 0 fixes the scale; a short block takes the element-wise tail */
                    float s = tiny ? 0x1p-120f : 1.0f, x[ZOE_ADAM_INT8_BLOCK] = {s}, s_ref, s_got;
                    size_t len =
                        n - lo < ZOE_ADAM_INT8_BLOCK - 1 ? n - lo : ZOE_ADAM_INT8_BLOCK - 1;
                    for (size_t i = 0; i < len; i++)
                        x[1 + i] = ys[lo + i] * s * (top == 127 && (i & 1) ? -1.0f : 1.0f);
                    len++;
                    if (top == 127) {
                        int8_t want[ZOE_ADAM_INT8_BLOCK], got[ZOE_ADAM_INT8_BLOCK];
                        ref.quantize_m(x, len, want, &s_ref);
                        paths[p].quantize_m(x, len, got, &s_got);
                        bad += memcmp(want, got, len) != 0 || s_ref != s_got;
                    } else {
                        uint8_t want[ZOE_ADAM_INT8_BLOCK], got[ZOE_ADAM_INT8_BLOCK];
                        uint16_t bits[ZOE_ADAM_INT8_BLOCK];
                        for (size_t i = 0; i < len; i++) bits[i] = (uint16_t)test_rng_next(&rng);
                        ref.quantize_v(x, bits, len, want, &s_ref);
                        paths[p].quantize_v(x, bits, len, got, &s_got);
                        bad += memcmp(want, got, len) != 0 || s_ref != s_got;
                    }
                }
            CHECK(bad == 0,
                  "%s: %d blocks of %s codes around the code boundaries differ from scalar",
                  zoe_cpu_isa_name(levels[p]), bad, top == 127 ? "m" : "v");
        }
    }
}

/* Half the interval between the two codes around |x| in a block of scale s, on the square law
 * of top (127: m, 255: v): s (2c + 1) / (2 top^2), c = floor(top sqrt(|x| / s)). */
static double half_interval(double x, double s, int top) {
    if (!(s > 0)) return 0;
    double c = floor(top * sqrt(fmin(fabs(x) / s, 1.0)));
    return s * (2 * c + 1) / (2.0 * top * top);
}

/* The undo over int8 moments (the exact DPU's redo) against the state before the step: m within
 * the step's rounding (half an interval at the stored m') over beta1 plus the restored value's
 * own (half an interval at the restored m); v the same with a whole interval for the step's
 * stochastic rounding, over beta2; the master within step_size times the shift that quantising
 * m' and v' made in m / (sqrt(v) inv_sqrt_bc2 + eps) (over decay for AdamW), plus 4 fp32 ulps
 * of the larger of w and w';
 * 2^-20 of each bound's scale on top for fp32 arithmetic. The gradient is read in bf16 too (a
 * 2-byte gradient partition). */
static void check_undo(int dec, zoe_dtype gdt) {
    const zoe_adam_state_dtypes dt = {ZOE_F32, ZOE_I8, ZOE_I8};
    static held h, before, stepped;
    test_rng rng;
    test_rng_seed(&rng, 41 + (uint64_t)dec);
    fill(&rng, &dt, &h, 0);
    zoe_bf16 g16[N];
    for (int i = 0; i < N; i++) { /* the same gradient in both dtypes */
        g16[i] = zoe_f32_to_bf16(h.g[i]);
        h.g[i] = zoe_bf16_to_f32(g16[i]);
    }
    const void *grad = gdt == ZOE_BF16 ? (const void *)g16 : (const void *)h.g;
    before = h;
    zoe_adam_consts c = consts_of(dec, 7);
    zoe_adam_rounding r = {.seed = 9, .step = 7};
    zoe_adam_state st = view(&h);
    CHECK_OK(zoe_adam_state_host(&c, &r, &dt, &st, 0, grad, gdt, NULL, ZOE_F32, N));
    stepped = h;
    CHECK_OK(zoe_adam_state_undo_host(&c, &dt, &st, grad, gdt, NULL, ZOE_F32, N));
    int bad_w = 0, bad_m = 0, bad_v = 0;
    double worst_m = 0, worst_v = 0;
    for (int i = 0; i < N; i++) {
        size_t b = (size_t)i / 256;
        step64 s = step64_of(&before, &c, dec, (size_t)i);
        double w0 = s.w, g = s.g, m1 = s.m1, v1 = s.v1;
        double m0 = read_moment(&before, ZOE_I8, 0, (size_t)i),
               v0 = read_moment(&before, ZOE_I8, 1, (size_t)i);
        double m1q = read_moment(&stepped, ZOE_I8, 0, (size_t)i),
               v1q = read_moment(&stepped, ZOE_I8, 1, (size_t)i);
        double mr = read_moment(&h, ZOE_I8, 0, (size_t)i),
               vr = read_moment(&h, ZOE_I8, 1, (size_t)i);
        double bound_m = half_interval(m1q, stepped.m_scale[b], 127) / c.beta1 +
                         half_interval(mr, h.m_scale[b], 127) + 0x1p-20 * stepped.m_scale[b];
        double bound_v = 2 * half_interval(v1q, stepped.v_scale[b], 255) / c.beta2 +
                         half_interval(vr, h.v_scale[b], 255) + 0x1p-20 * stepped.v_scale[b];
        double shift = fabs(m1q / (sqrt(v1q) * c.inv_sqrt_bc2 + c.eps) -
                            m1 / (sqrt(v1) * c.inv_sqrt_bc2 + c.eps)) *
                       c.step_size / (dec ? c.decay : 1);
        /* with L2 the restored weight enters the gradient: m and v move with it */
        double l2_term = dec ? 0 : (double)c.l2 * (shift + 4 * ldexp(fabs(w0), -23));
        /* fp32 roundings: of the step's w', over decay, and of the restored value */
        double ulps = 4 * ldexp(fmax(fabs(w0), fabs(((float *)stepped.w)[i])), -23);
        if (fabs(((float *)h.w)[i] - w0) > shift + ulps) bad_w++;
        if (fabs(mr - m0) > bound_m + l2_term) bad_m++;
        if (fabs(vr - v0) > bound_v + 2 * fabs(g) * l2_term) bad_v++;
        worst_m = fmax(worst_m, fabs(mr - m0) / bound_m);
        worst_v = fmax(worst_v, fabs(vr - v0) / bound_v);
    }
    CHECK(bad_w == 0 && bad_m == 0 && bad_v == 0,
          "undo over int8 moments (dec %d, %s gradient): %d masters, %d m and %d v outside the "
          "bound (worst m %.3f, v %.3f of it)",
          dec, zoe_dtype_name(gdt), bad_w, bad_m, bad_v, worst_m, worst_v);
}

static void check_errors(void) {
    static held h;
    zoe_adam_state st = view(&h);
    zoe_adam_consts c = consts_of(1, 7);
    const zoe_adam_state_dtypes i8 = {ZOE_F32, ZOE_I8, ZOE_I8}, bad = {ZOE_I8, ZOE_F32, ZOE_F32};
    zoe_adam_rounding r = {0};
    CHECK(zoe_adam_state_host(&c, &r, &bad, &st, 0, h.g, ZOE_F32, NULL, ZOE_F32, 4) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "int8 master accepted");
    st.exp_avg_sq_scale = NULL;
    CHECK(zoe_adam_state_host(&c, &r, &i8, &st, 0, h.g, ZOE_F32, NULL, ZOE_F32, 4) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "int8 v without scales accepted");
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    const zoe_dtype md[] = {ZOE_F32, ZOE_BF16}, sd[] = {ZOE_F32, ZOE_BF16, ZOE_I8},
                    od[] = {ZOE_F32, ZOE_BF16};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++)
            for (int q = 0; q < 3; q++) {
                if (sd[b] != ZOE_I8 && sd[q] != ZOE_I8) continue;
                zoe_adam_state_dtypes dt = {md[a], sd[b], sd[q]};
                for (int o = 0; o < 2; o++)
                    for (int dec = 0; dec < 2; dec++) check_paths(&dt, od[o], dec);
            }
    for (int dec = 0; dec < 2; dec++) check_reference(dec);
    check_idempotent();
    check_v_rounding();
    check_tiny_scale();
    check_block_paths();
    for (int dec = 0; dec < 2; dec++) check_undo(dec, ZOE_F32);
    check_undo(1, ZOE_BF16);
    check_errors();
    return test_finish("test_adam_int8");
}
