/* Philox-4x32-10 against the known-answer vectors of the Random123 distribution
 * (kat_vectors: counter, key -> output), and the properties the TP code relies on: a draw
 * depends only on its element index (any sub-range reproduces the same values), streams
 * differ, and the normals have mean 0 and the requested deviation. */
#include <math.h>
#include <stdlib.h>
#include "kernels/philox.h"
#include "testing.h"

static void known_answers(void) {
    static const uint32_t kat[3][10] = {
        /* counter[4], key[2], expected[4] */
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int v = 0; v < 3; v++) {
        uint32_t out[4] = {0};
        zoe_philox4x32_10(kat[v], kat[v] + 4, out);
        for (int i = 0; i < 4; i++)
            CHECK(out[i] == kat[v][6 + i], "KAT %d word %d: %08x, want %08x", v, i, out[i],
                  kat[v][6 + i]);
    }
    /* the (seed, stream, block) packing: low words first */
    uint32_t a[4], b[4];
    zoe_philox_block(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull, a);
    zoe_philox4x32_10(kat[2], kat[2] + 4, b);
    for (int i = 0; i < 4; i++) CHECK(a[i] == b[i], "block packing word %d", i);
}

static void subranges(void) {
    enum { N = 1000 };
    float all[N], part[N];
    uint32_t bits[N], bpart[N];
    uint64_t stream = zoe_philox_stream_of_name("h.0.attn.linear_qkv.weight");
    zoe_philox_normal_fill(all, N, 0.5f, 42, stream, 0);
    zoe_philox_bits24_fill(bits, N, 42, stream, 0);
    /* odd starts and lengths cross block boundaries in every lane */
    const size_t starts[] = {1, 3, 5, 6, 7, 250, 997};
    for (size_t s = 0; s < sizeof starts / sizeof starts[0]; s++) {
        size_t first = starts[s], n = N - first;
        for (size_t i = 0; i < N; i++) part[i] = NAN, bpart[i] = 0xffffffffu;
        zoe_philox_normal_fill(part, n, 0.5f, 42, stream, first);
        zoe_philox_bits24_fill(bpart, n, 42, stream, first);
        int same = 1;
        for (size_t i = 0; i < n; i++)
            same &= memcmp(&part[i], &all[first + i], sizeof(float)) == 0 &&
                    bpart[i] == bits[first + i] && bpart[i] < (1u << 24);
        CHECK(same, "range from %zu differs from the same elements drawn from 0", first);
    }
    float other[N];
    zoe_philox_normal_fill(other, N, 0.5f, 42, stream + 1, 0);
    int equal = 0;
    for (size_t i = 0; i < N; i++) equal += other[i] == all[i];
    CHECK(equal == 0, "streams s and s+1 share %d values", equal);
    CHECK(zoe_philox_stream_at_step(stream, 0) != stream &&
              zoe_philox_stream_at_step(stream, 0) != zoe_philox_stream_at_step(stream, 1),
          "dropout steps must get their own streams");
}

/* 2^18 normals with std 2: the sample mean is within 5 sigma (5 * 2 / 512) of 0 and the
 * sample variance within 5 sigma (5 * 4 * sqrt(2 / n)) of 4. */
static void moments(void) {
    size_t n = (size_t)1 << 18;
    float *z = malloc(n * sizeof(float));
    zoe_philox_normal_fill(z, n, 2.0f, 7, 99, 0);
    double sum = 0, sq = 0;
    for (size_t i = 0; i < n; i++) sum += z[i], sq += (double)z[i] * z[i];
    double mean = sum / (double)n, var = sq / (double)n - mean * mean;
    CHECK(fabs(mean) < 5 * 2.0 / 512, "normal mean %g", mean);
    CHECK(fabs(var - 4.0) < 5 * 4.0 * sqrt(2.0 / (double)n), "normal variance %g, want 4", var);
    uint32_t *u = (uint32_t *)z;
    zoe_philox_bits24_fill(u, n, 7, 99, 0);
    double below = 0;
    for (size_t i = 0; i < n; i++) below += u[i] < (1u << 24) / 10;
    /* keep-rate of a p = 0.1 dropout: binomial, 5 sigma = 5 * sqrt(0.09 / n) */
    CHECK(fabs(below / (double)n - 0.1) < 5 * sqrt(0.09 / (double)n), "dropout rate %g",
          below / (double)n);
    free(z);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    known_answers();
    subranges();
    moments();
    return test_finish("test_kernels_philox");
}
