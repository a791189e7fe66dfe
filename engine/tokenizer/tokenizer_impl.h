/* Internal to the tokenizer files of the engine: the tokenizer's tables, the Unicode classes
 * of the pre-tokenizer patterns, and the pieces of one encode.
 *
 * Explained in docs/data.md. */
#ifndef ZOE_ENGINE_TOKENIZER_IMPL_H
#define ZOE_ENGINE_TOKENIZER_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include "zoe/tokenizer.h"

/* ---- Unicode classes (engine/tokenizer/unicode_tables.c is generated) ---- */

typedef struct zoe_unicode_range {
    uint32_t first, last; /* inclusive */
} zoe_unicode_range;

typedef struct zoe_unicode_table {
    const zoe_unicode_range *ranges;
    size_t count;
} zoe_unicode_table;

/* \p{L}, \p{N} and \s as the regex engine of `tokenizers` matches them. */
enum { ZOE_UCLASS_LETTER, ZOE_UCLASS_NUMBER, ZOE_UCLASS_SPACE, ZOE_UCLASS_COUNT };
extern const zoe_unicode_table zoe_unicode_classes[ZOE_UCLASS_COUNT];

/* Class bits of a code point. */
enum { ZOE_CP_LETTER = 1, ZOE_CP_NUMBER = 2, ZOE_CP_SPACE = 4 };

/* ---- hash map of byte strings (vocabulary, word cache) and of id pairs (merges) ---- */

typedef struct zoe_str_map {
    uint32_t *slots; /* entry index + 1; 0 is empty */
    size_t mask;
    /* entry e: key bytes [key_off[e], key_off[e] + key_len[e]) of keys, value values[e] */
    size_t *key_off;
    uint32_t *key_len;
    int32_t *values;
    char *keys;
    size_t count, capacity, keys_len, keys_cap;
} zoe_str_map;

void zoe_str_map_free(zoe_str_map *m);
void zoe_str_map_clear(zoe_str_map *m);
/* Inserts or replaces; returns nonzero on allocation failure. */
int zoe_str_map_put(zoe_str_map *m, const char *key, size_t len, int32_t value);
/* The value of key, or -1. */
int32_t zoe_str_map_get(const zoe_str_map *m, const char *key, size_t len);

typedef struct zoe_merge {
    uint64_t pair; /* left id << 32 | right id; 0 marks an empty slot's pair with rank -1 */
    int32_t rank, merged;
} zoe_merge;

typedef struct zoe_merge_map {
    zoe_merge *slots;
    size_t mask;
} zoe_merge_map;

/* ---- the tokenizer ---- */

typedef enum zoe_split_pattern {
    ZOE_PATTERN_GPT2,   /* GPT-2's: the ByteLevel pre-tokenizer's regex */
    ZOE_PATTERN_LLAMA3, /* Llama-3's (numbers in runs of up to three digits) */
    ZOE_PATTERN_QWEN2,  /* Llama-3's with single digits (Qwen2, DeepSeek-V3 ...) */
} zoe_split_pattern;

typedef enum zoe_pretok_kind { ZOE_PRETOK_SPLIT, ZOE_PRETOK_PREFIX_SPACE } zoe_pretok_kind;

typedef struct zoe_pretok_step {
    zoe_pretok_kind kind;
    zoe_split_pattern pattern;
    int remove; /* Split behavior Removed (else Isolated) */
} zoe_pretok_step;

enum { ZOE_PRETOK_MAX_STEPS = 8 };

typedef struct zoe_added_token {
    char *content;
    size_t len;
    int32_t id;
    int special, normalized, lstrip, rstrip;
} zoe_added_token;

enum { ZOE_TOKENIZER_BYTES, ZOE_TOKENIZER_BPE };

struct zoe_tokenizer {
    int kind;
    int32_t vocab_size, eod;
    /* BPE */
    int byte_level;            /* symbols are bytes (ByteLevel); otherwise UTF-8 characters */
    int decode_bytes;          /* the ByteLevel decoder maps token characters back to bytes */
    int decode_join;           /* no decoder: tokens are joined with spaces, as `tokenizers` does */
    int ignore_merges;         /* a word that is itself in the vocabulary is one token */
    int byte_fallback;         /* a character not in the vocabulary becomes <0xXX> tokens */
    int fuse_unk;              /* consecutive unknown characters are one unk token */
    int32_t unk;               /* the unk token, or -1 */
    int32_t byte_ids[256];     /* single-byte symbols (byte_level), -1 when absent */
    int32_t fallback_ids[256]; /* <0xXX> tokens (byte_fallback), -1 when absent */
    zoe_pretok_step steps[ZOE_PRETOK_MAX_STEPS];
    int n_steps;
    zoe_str_map vocab; /* model bytes -> id */
    zoe_merge_map merges;
    /* decoding: bytes of id i are decoded[decoded_off[i] .. decoded_off[i + 1]) */
    size_t *decoded_off;
    char *decoded;
    unsigned char *is_special; /* per id */
    zoe_added_token *added;
    int n_added;
    unsigned char added_first[256]; /* a byte some added token starts with */
    uint8_t *bmp_class;             /* class bits of U+0000 .. U+FFFF */
};

/* Class bits of code point c (the table holds the BMP, the rest is searched). */
int zoe_cp_class_astral(uint32_t c);
static inline int zoe_cp_class(const zoe_tokenizer *tok, uint32_t c) {
    return c < 0x10000 ? tok->bmp_class[c] : zoe_cp_class_astral(c);
}
/* Fills tok->bmp_class; nonzero on allocation failure. */
int zoe_unicode_init(zoe_tokenizer *tok);

/* Decodes the code point at s[*i] of valid UTF-8 and advances *i. */
uint32_t zoe_utf8_next(const unsigned char *s, size_t *i);
/* The length of the longest valid-UTF-8 prefix of s. */
size_t zoe_utf8_valid_prefix(const unsigned char *s, size_t len);
/* Writes s with every maximal invalid subpart replaced by U+FFFD (as Python's
 * decode(errors="replace")) into out, which holds at least 3 * len bytes; returns the length. */
size_t zoe_utf8_sanitize(const unsigned char *s, size_t len, unsigned char *out);

/* The end of the match of pattern p at s[pos] (pos < len): always > pos, since every
 * character matches one alternative of the patterns zoe knows. */
size_t zoe_pattern_match(const zoe_tokenizer *tok, zoe_split_pattern p, const unsigned char *s,
                         size_t len, size_t pos);
/* The pattern text in a tokenizer.json, or -1 when zoe does not know it. */
int zoe_pattern_from_regex(const char *regex);

/* BPE of one pre-tokenized word (byte-level bytes or UTF-8 text), appending its tokens to
 * out (room for 3 * len + 1). Returns the count, or -1 on allocation failure. scratch is the
 * encoder's. */
typedef struct zoe_bpe_symbol {
    int32_t id, prev, next; /* id -1: merged into its left neighbour */
} zoe_bpe_symbol;
typedef struct zoe_bpe_candidate {
    int32_t rank, pos, merged;
} zoe_bpe_candidate;
typedef struct zoe_bpe_scratch {
    zoe_bpe_symbol *sym;
    zoe_bpe_candidate *heap;
    size_t cap, heap_cap, heap_len;
} zoe_bpe_scratch;
long zoe_bpe_word(const zoe_tokenizer *tok, zoe_bpe_scratch *sc, const unsigned char *word,
                  size_t len, int32_t *out);
void zoe_bpe_scratch_free(zoe_bpe_scratch *sc);
/* The merge of (left, right), or NULL. */
const zoe_merge *zoe_merge_find(const zoe_merge_map *m, int32_t left, int32_t right);
/* Sizes the merge table for n merges; nonzero on allocation failure. */
int zoe_merge_map_init(zoe_merge_map *m, size_t n);
/* Adds or replaces the merge of a pair (a later duplicate wins, as in `tokenizers`' map). */
void zoe_merge_map_put(zoe_merge_map *m, int32_t left, int32_t right, int32_t rank, int32_t merged);

/* ---- one encode's pieces ---- */

typedef struct zoe_piece {
    const unsigned char *s;
    size_t len;
    int32_t added; /* the added token it is, or -1 */
} zoe_piece;

/* The pieces BPE sees (after repair, added tokens and pre-tokenizer), valid until the
 * encoder's next call. Tests compare them with `tokenizers`' pre-tokenizer. */
zoe_status zoe_encoder_pieces(zoe_encoder *enc, const char *text, size_t len,
                              const zoe_piece **pieces, size_t *n_pieces);

#endif
