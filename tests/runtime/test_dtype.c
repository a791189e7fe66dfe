/* Conversions against hand-checked bit patterns: ties to even, NaN, inf, subnormals, overflow;
 * the bulk (SIMD) paths against the scalar ones on random data with every tail length; and bf16
 * -> fp16 on every bf16 pattern against a float64 reference. */
#include <math.h>
#include <stdlib.h>
#include "testing.h"

static void check_bf16(float f, uint16_t want) {
    uint16_t got = zoe_f32_to_bf16(f);
    CHECK(got == want, "bf16(%a) = 0x%04x, want 0x%04x", (double)f, got, want);
}

static void check_f16(float f, uint16_t want) {
    uint16_t got = zoe_f32_to_f16(f);
    CHECK(got == want, "f16(%a) = 0x%04x, want 0x%04x", (double)f, got, want);
}

static float from_bits(uint32_t u) {
    return zoe_f32_from_bits(u);
}

/* A 16-bit IEEE-style pattern's value in float64, from the format's definition (1 sign bit,
 * exp_bits exponent bits biased by 2^(exp_bits-1) - 1, the rest fraction bits), not through any
 * zoe conversion. NaN for a NaN pattern. bf16: 8 exponent bits; fp16: 5. */
static double half_value(uint16_t bits, int exp_bits) {
    const int frac_bits = 15 - exp_bits, bias = (1 << (exp_bits - 1)) - 1;
    const int emax = (1 << exp_bits) - 1;
    int sign = bits >> 15, e = (bits >> frac_bits) & emax, f = bits & ((1 << frac_bits) - 1);
    double mag = e == emax ? (f ? NAN : INFINITY)
                 : e == 0  ? ldexp(f, 1 - bias - frac_bits)
                           : ldexp((1 << frac_bits) + f, e - bias - frac_bits);
    return sign ? -mag : mag;
}

/* x rounded to fp16 in float64 arithmetic: to the nearest multiple of fp16's spacing at x's
 * binade (2^-24 below 2^-14, the subnormals), ties to even (rint in the default rounding mode),
 * infinite from 65520 = 65504 + half its spacing of 32. Every step is exact in float64. */
static double f16_nearest(double x) {
    double a = fabs(x);
    if (a >= 65520) return copysign(INFINITY, x);
    int e;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    int step = a < ldexp(1, -14) ? -24 : e - 1 - 10;
    return copysign(ldexp(rint(ldexp(a, -step)), step), x);
}

/* bf16 -> fp16, the conversion streamed fp16 weights go through (zoe_convert, in place as the
 * weight stream runs it), for every one of the 65536 bf16 patterns against the float64
 * reference: exact in fp16's normal range, rounded among the subnormals, infinite beyond 65504,
 * the sign of zero kept, NaN kept NaN. */
static void check_bf16_to_f16(void) {
    enum { N = 1 << 16 };
    uint16_t *buf = malloc(N * sizeof *buf);
    for (int i = 0; i < N; i++) buf[i] = (uint16_t)i;
    CHECK_OK(zoe_convert(buf, ZOE_F16, buf, ZOE_BF16, N));
    int bad = 0, exact = 0, rounded = 0, overflow = 0;
    for (int i = 0; i < N; i++) {
        double x = half_value((uint16_t)i, 8), got = half_value(buf[i], 5), want = f16_nearest(x);
        int ok = isnan(x) ? isnan(got) : got == want && signbit(got) == signbit(x) && !isnan(got);
        if (!ok && bad++ < 5)
            CHECK(0, "bf16 0x%04x (%a) -> fp16 0x%04x (%a), want %a", i, x, buf[i], got, want);
        if (isnan(x)) continue;
        double a = fabs(x);
        exact += a >= ldexp(1, -14) && a <= 65504 && got == x;
        rounded += a < ldexp(1, -14) && got != x;
        overflow += a > 65504 && isinf(got) && !isinf(x);
    }
    CHECK(bad == 0, "bf16 -> fp16: %d of %d patterns differ from the float64 reference", bad, N);
    /* fp16's normal range [2^-14, 65504] holds bf16 exponents -14..15 with every fraction: 30
     * binades x 128 x 2 signs, all exact; below them bf16 has more precision than fp16's
     * subnormals, above them nothing fits */
    CHECK(exact == 30 * 128 * 2, "bf16 -> fp16: %d exact in the normal range, want %d", exact,
          30 * 128 * 2);
    CHECK(rounded > 0 && overflow > 0, "bf16 -> fp16: %d rounded subnormals, %d overflows", rounded,
          overflow);
    free(buf);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    check_bf16_to_f16();
    /* bf16: 1.0, -2.0, ties: 0x3f808000 is halfway between 0x3f80 and 0x3f81 -> even 0x3f80;
     * 0x3f818000 halfway between 0x3f81 and 0x3f82 -> even 0x3f82; just above halfway rounds up. */
    check_bf16(1.0f, 0x3f80);
    check_bf16(-2.0f, 0xc000);
    check_bf16(from_bits(0x3f808000u), 0x3f80);
    check_bf16(from_bits(0x3f818000u), 0x3f82);
    check_bf16(from_bits(0x3f808001u), 0x3f81);
    check_bf16(INFINITY, 0x7f80);
    check_bf16(-INFINITY, 0xff80);
    check_bf16(from_bits(0x7f7fffffu), 0x7f80); /* FLT_MAX rounds up to inf */
    check_bf16(from_bits(0x00000001u), 0x0000); /* smallest fp32 subnormal rounds to 0 */
    check_bf16(from_bits(0x00018000u), 0x0002); /* subnormal tie -> even */
    uint16_t qn = zoe_f32_to_bf16(NAN), sn = zoe_f32_to_bf16(from_bits(0x7f800001u));
    CHECK((qn & 0x7f80) == 0x7f80 && (qn & 0x7f), "bf16(NaN) = 0x%04x is not NaN", qn);
    CHECK((sn & 0x7f80) == 0x7f80 && (sn & 0x7f), "bf16(sNaN 0x7f800001) = 0x%04x is not NaN", sn);
    CHECK(zoe_bf16_to_f32(0x3fc0) == 1.5f, "bf16 0x3fc0 -> 1.5");
    CHECK(isnan(zoe_bf16_to_f32(0x7fc1)), "bf16 NaN -> NaN");

    /* fp16: 1.0 = 0x3c00, 65504 max, 65520 -> inf (tie to even up), 2^-24 smallest subnormal,
     * 2^-25 ties to 0, 3*2^-25 ties to 2*2^-24; 1+2^-11 ties to 1.0; 1+3*2^-11 ties up. */
    check_f16(1.0f, 0x3c00);
    check_f16(-0.5f, 0xb800);
    check_f16(65504.0f, 0x7bff);
    check_f16(65519.0f, 0x7bff);
    check_f16(65520.0f, 0x7c00);
    check_f16(1e9f, 0x7c00);
    check_f16(-INFINITY, 0xfc00);
    check_f16(0x1p-24f, 0x0001);
    check_f16(0x1p-25f, 0x0000);
    check_f16(0x3p-25f, 0x0002);
    check_f16(0x1.8p-24f, 0x0002);
    check_f16(0x1p-14f, 0x0400);     /* smallest normal */
    check_f16(0x1.ffcp-15f, 0x0400); /* largest subnormal + half ulp ties up into normal */
    check_f16(1.0f + 0x1p-11f, 0x3c00);
    check_f16(1.0f + 0x3p-11f, 0x3c02);
    check_f16(-0.0f, 0x8000);
    uint16_t hn = zoe_f32_to_f16(NAN);
    CHECK((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff), "f16(NaN) = 0x%04x is not NaN", hn);
    CHECK(zoe_f16_to_f32(0x0001) == 0x1p-24f, "f16 0x0001 -> 2^-24");
    CHECK(zoe_f16_to_f32(0x03ff) == 0x3ffp-24f, "f16 0x03ff -> largest subnormal");
    CHECK(zoe_f16_to_f32(0x7bff) == 65504.0f, "f16 max");
    CHECK(isinf(zoe_f16_to_f32(0xfc00)) && zoe_f16_to_f32(0xfc00) < 0, "f16 -inf");
    CHECK(isnan(zoe_f16_to_f32(0x7e00)), "f16 NaN");
    /* Every fp16 value round-trips exactly through fp32. */
    int roundtrip_bad = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;
        if (zoe_f32_to_f16(zoe_f16_to_f32((uint16_t)h)) != h) roundtrip_bad++;
    }
    CHECK(roundtrip_bad == 0, "%d fp16 values do not round-trip", roundtrip_bad);

    /* Bulk paths equal the scalar ones for lengths 0..67 and a large random buffer, with
     * specials mixed in. */
    test_rng rng;
    test_rng_seed(&rng, 42);
    enum { N = 4099 };
    float *src = malloc(N * sizeof(float)), *back = malloc(N * sizeof(float));
    uint16_t *h = malloc(N * sizeof(uint16_t));
    for (int i = 0; i < N; i++)
        src[i] = (float)(test_rng_normal(&rng) * pow(10, test_rng_int(&rng, -9, 6)));
    src[3] = NAN, src[17] = INFINITY, src[40] = -INFINITY, src[41] = 1e-41f, src[99] = 70000.0f;
    for (int n = 0; n <= N; n = n < 67 ? n + 1 : N) {
        zoe_convert_f32_to_bf16(h, src, (size_t)n);
        int bad = 0;
        for (int i = 0; i < n; i++) bad += h[i] != zoe_f32_to_bf16(src[i]);
        zoe_convert_bf16_to_f32(back, h, (size_t)n);
        for (int i = 0; i < n; i++)
            bad += zoe_f32_bits(back[i]) != zoe_f32_bits(zoe_bf16_to_f32(h[i]));
        zoe_convert_f32_to_f16(h, src, (size_t)n);
        for (int i = 0; i < n; i++) {
            uint16_t want = zoe_f32_to_f16(src[i]);
            int both_nan = isnan(src[i]) && (h[i] & 0x7c00) == 0x7c00 && (h[i] & 0x3ff);
            bad += h[i] != want && !both_nan;
        }
        zoe_convert_f16_to_f32(back, h, (size_t)n);
        for (int i = 0; i < n; i++) {
            float want = zoe_f16_to_f32(h[i]);
            bad += !(back[i] == want || (isnan(back[i]) && isnan(want)));
        }
        CHECK(bad == 0, "bulk conversions of length %d: %d mismatches", n, bad);
        if (n == N) break;
    }
    zoe_dtype d;
    CHECK(zoe_dtype_parse("bf16", &d) == ZOE_OK && d == ZOE_BF16, "parse bf16");
    CHECK(zoe_dtype_parse("fp64", &d) == ZOE_ERR_INVALID_ARGUMENT, "fp64 rejected");
    CHECK(strstr(zoe_last_error(), "fp64") != NULL, "message names the bad dtype: %s",
          zoe_last_error());
    CHECK(zoe_dtype_size((zoe_dtype)99) == 0, "unknown dtype has size 0");
    CHECK(zoe_convert(h, (zoe_dtype)99, src, ZOE_F32, 4) == ZOE_ERR_INVALID_ARGUMENT,
          "convert to unknown dtype");
    free(src), free(back), free(h);
    return test_finish("test_dtype");
}
