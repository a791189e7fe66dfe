/* The Philox draws that the layers above use (initialisation, dropout references, sampling),
 * compiled once over the rounds of kernels/philox.h.
 *
 * Explained in docs/tensor_parallel.md, "TP-invariant randomness". */
#include "kernels/philox.h"
#include <math.h>

void zoe_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    zoe_philox4x32_10_inline(counter, key, out);
}

void zoe_philox_block(uint64_t seed, uint64_t stream, uint64_t block, uint32_t out[4]) {
    zoe_philox_block_inline(seed, stream, block, out);
}

uint64_t zoe_philox_stream_of_name(const char *name) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* splitmix64's finaliser: a bijection that scatters nearby inputs. */
static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t zoe_philox_stream_at_step(uint64_t site, uint64_t step) {
    return mix64(site ^ mix64(step + 0x9e3779b97f4a7c15ull));
}

/* (w + 0.5) / 2^32: strictly inside (0, 1), so the logarithm is finite. */
static double unit_open(uint32_t w) {
    return ((double)w + 0.5) * 0x1p-32;
}

void zoe_philox_normal_fill(float *out, size_t n, float std, uint64_t seed, uint64_t stream,
                            uint64_t first) {
    const double two_pi = 6.283185307179586476925;
    size_t i = 0;
    while (i < n) {
        uint64_t e = first + i, block = e / 4;
        uint32_t w[4];
        zoe_philox_block(seed, stream, block, w);
        double z[4];
        for (int pair = 0; pair < 2; pair++) {
            double r = sqrt(-2.0 * log(unit_open(w[2 * pair])));
            double theta = two_pi * unit_open(w[2 * pair + 1]);
            z[2 * pair] = r * cos(theta);
            z[2 * pair + 1] = r * sin(theta);
        }
        for (unsigned lane = (unsigned)(e % 4); lane < 4 && i < n; lane++, i++)
            out[i] = (float)(z[lane] * std);
    }
}

void zoe_philox_bits24_fill(uint32_t *out, size_t n, uint64_t seed, uint64_t stream,
                            uint64_t first) {
    size_t i = 0;
    while (i < n) {
        uint64_t e = first + i;
        uint32_t w[4];
        zoe_philox_block(seed, stream, e / 4, w);
        for (unsigned lane = (unsigned)(e % 4); lane < 4 && i < n; lane++, i++)
            out[i] = w[lane] >> 8;
    }
}
