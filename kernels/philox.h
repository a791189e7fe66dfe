/* Philox-4x32-10 as inline code that host C and CUDA device code share, so that every backend
 * draws the very same numbers (the algorithm and its uses: tensor_parallel/philox.h). Written
 * from the published algorithm: ten rounds of two 32x32->64 multiplies (the "hi" halves XORed
 * with the other counter words and the round key), the key bumped by the Weyl constants
 * between rounds.
 *
 * Explained in docs/tensor_parallel.md, "TP-invariant randomness". */
#ifndef ZOE_KERNELS_PHILOX_H
#define ZOE_KERNELS_PHILOX_H

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

#endif
