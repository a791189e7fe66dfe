/* Philox-4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3",
 * SC11), the counter-based generator behind zoe's TP-invariant randomness: the rounds as inline
 * code that host C and CUDA device code share, so that every backend draws the very same
 * numbers, and the draws built on them (kernels/philox.c) that the layers above use for
 * initialisation, dropout and sampling.
 *
 * A draw is a pure function of (seed, stream, element index): the key is the 64-bit seed, the
 * 128-bit counter is (block index, stream), and one block gives four 32-bit words, i.e. the
 * values of four consecutive elements. Element e of a stream therefore uses block e / 4, lane
 * e % 4, whoever computes it: a TP rank generates exactly its shard of the tensor a TP=1 run
 * would draw, without materialising the rest. Streams name what is drawn (a parameter, one
 * dropout site at one step) so that different tensors never share numbers.
 *
 * Written from the published algorithm: ten rounds of two 32x32->64 multiplies (the "hi" halves
 * XORed with the other counter words and the round key), the key bumped by the Weyl constants
 * between rounds.
 *
 * Explained in docs/tensor_parallel.md, "TP-invariant randomness". */
#ifndef ZOE_KERNELS_PHILOX_H
#define ZOE_KERNELS_PHILOX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define ZOE_PHILOX_FN static inline __host__ __device__
#else
#define ZOE_PHILOX_FN static inline
#endif

ZOE_PHILOX_FN void zoe_philox_round(uint32_t c[4], const uint32_t k[2]) {
    const uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
    const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    const uint32_t c1 = c[1], c3 = c[3];
    c[0] = hi1 ^ c1 ^ k[0];
    c[1] = lo1;
    c[2] = hi0 ^ c3 ^ k[1];
    c[3] = lo0;
}

/* out = Philox4x32-10(counter, key). */
ZOE_PHILOX_FN void zoe_philox4x32_10_inline(const uint32_t counter[4], const uint32_t key[2],
                                            uint32_t out[4]) {
    uint32_t c[4] = {counter[0], counter[1], counter[2], counter[3]};
    uint32_t k[2] = {key[0], key[1]};
    for (int round = 0; round < 10; round++) {
        if (round > 0) k[0] += 0x9E3779B9u, k[1] += 0xBB67AE85u;
        zoe_philox_round(c, k);
    }
    for (int i = 0; i < 4; i++) out[i] = c[i];
}

/* The four words of block `block` of `stream` under `seed`: counter (block, stream), key seed. */
ZOE_PHILOX_FN void zoe_philox_block_inline(uint64_t seed, uint64_t stream, uint64_t block,
                                           uint32_t out[4]) {
    const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream,
                             (uint32_t)(stream >> 32)};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    zoe_philox4x32_10_inline(ctr, key, out);
}

/* Dropout keeps element e when the top 24 bits of its word reach this threshold. */
ZOE_PHILOX_FN uint32_t zoe_dropout_keeps(uint32_t word, uint32_t threshold) {
    return (word >> 8) >= threshold;
}

/* The draws, compiled once in kernels/philox.c. */
#ifdef __cplusplus
extern "C" {
#endif

/* The raw bijection: out = Philox4x32-10(counter, key). */
void zoe_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);

/* The four words of block `block` of `stream` under `seed`. */
void zoe_philox_block(uint64_t seed, uint64_t stream, uint64_t block, uint32_t out[4]);

/* A stable 64-bit stream id for a name (FNV-1a), e.g. a parameter's full name. */
uint64_t zoe_philox_stream_of_name(const char *name);
/* The stream of one use of a site (dropout layer) at one step: a mix of both, never the site
 * itself, so step 0 does not reuse a parameter's numbers. */
uint64_t zoe_philox_stream_at_step(uint64_t site, uint64_t step);

/* Elements [first, first + n) of the stream as N(0, std^2) floats (Box-Muller in double on
 * word pairs (0,1) and (2,3) of each block: lane 0/2 take the cosine, 1/3 the sine). */
void zoe_philox_normal_fill(float *out, size_t n, float std, uint64_t seed, uint64_t stream,
                            uint64_t first);
/* Elements [first, first + n) as the top 24 bits of their word: integers in [0, 2^24), so a
 * dropout keeps element e when bits >= round(p * 2^24), exactly on every backend. */
void zoe_philox_bits24_fill(uint32_t *out, size_t n, uint64_t seed, uint64_t stream,
                            uint64_t first);

#ifdef __cplusplus
}
#endif

#endif
