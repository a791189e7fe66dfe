/* Philox-4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3",
 * SC11), the counter-based generator behind zoe's TP-invariant randomness.
 *
 * A draw is a pure function of (seed, stream, element index): the key is the 64-bit seed, the
 * 128-bit counter is (block index, stream), and one block gives four 32-bit words, i.e. the
 * values of four consecutive elements. Element e of a stream therefore uses block e / 4, lane
 * e % 4, whoever computes it: a TP rank generates exactly its shard of the tensor a TP=1 run
 * would draw, without materialising the rest. Streams name what is drawn (a parameter, one
 * dropout site at one step) so that different tensors never share numbers.
 *
 * Explained in docs/tensor_parallel.md, "TP-invariant randomness". */
#ifndef ZOE_TP_PHILOX_H
#define ZOE_TP_PHILOX_H

#include <stddef.h>
#include <stdint.h>

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

#endif
