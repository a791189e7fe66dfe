/* The Megatron .idx layout (parse with validation, and encode) and the names of token dtypes
 * and document splits.
 *
 * Explained in docs/data.md. */
#include <string.h>
#include "engine/data/data_impl.h"
#include "runtime/error.h"

static const unsigned char idx_magic[ZOE_IDX_MAGIC_LEN] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};

size_t zoe_token_size(zoe_token_dtype dtype) {
    switch (dtype) {
    case ZOE_TOKENS_UINT16:
        return 2;
    case ZOE_TOKENS_INT32:
        return 4;
    }
    return 0;
}

const char *zoe_token_dtype_name(zoe_token_dtype dtype) {
    switch (dtype) {
    case ZOE_TOKENS_UINT16:
        return "uint16";
    case ZOE_TOKENS_INT32:
        return "int32";
    }
    return "unknown";
}

zoe_status zoe_token_dtype_parse(const char *name, zoe_token_dtype *out) {
    if (name && strcmp(name, "uint16") == 0)
        *out = ZOE_TOKENS_UINT16;
    else if (name && strcmp(name, "int32") == 0)
        *out = ZOE_TOKENS_INT32;
    else
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "token dtype '%s' unknown (expected uint16 or int32)",
                        name ? name : "(null)");
    return ZOE_OK;
}

const char *zoe_doc_split_name(zoe_doc_split split) {
    switch (split) {
    case ZOE_SPLIT_BLANK_LINE:
        return "blank-line";
    case ZOE_SPLIT_LINE:
        return "line";
    case ZOE_SPLIT_FILE:
        return "file";
    }
    return "unknown";
}

zoe_status zoe_doc_split_parse(const char *name, zoe_doc_split *out) {
    for (int s = ZOE_SPLIT_BLANK_LINE; s <= ZOE_SPLIT_FILE; s++) {
        if (name && strcmp(name, zoe_doc_split_name((zoe_doc_split)s)) == 0) {
            *out = (zoe_doc_split)s;
            return ZOE_OK;
        }
    }
    return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                    "document split '%s' unknown (expected blank-line, line or file)",
                    name ? name : "(null)");
}

static uint64_t load_u64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

int64_t zoe_index_load_i64(const unsigned char *array, int64_t i) {
    int64_t v;
    memcpy(&v, array + (size_t)i * sizeof v, sizeof v);
    return v;
}

int32_t zoe_index_load_i32(const unsigned char *array, int64_t i) {
    int32_t v;
    memcpy(&v, array + (size_t)i * sizeof v, sizeof v);
    return v;
}

/* document_indices: starts at 0, never decreases, ends at the sequence count. */
static zoe_status check_doc_index(const zoe_index_view *v, const char *prefix) {
    int64_t prev = 0;
    for (int64_t d = 0; d < v->doc_entries; d++) {
        int64_t x = zoe_index_load_i64(v->doc_index, d);
        if ((d == 0 && x != 0) || x < prev || x > v->sequences)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "'%s.idx': document_indices[%lld] = %lld (must start at 0, never "
                            "decrease and stay <= the sequence count %lld)",
                            prefix, (long long)d, (long long)x, (long long)v->sequences);
        prev = x;
    }
    if (prev != v->sequences)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "'%s.idx': last document_indices entry is %lld, expected the sequence "
                        "count %lld",
                        prefix, (long long)prev, (long long)v->sequences);
    return ZOE_OK;
}

/* sizes are non-negative, pointers place the sequences back to back from byte 0, and the
 * .bin holds exactly their tokens. */
static zoe_status check_sequences(zoe_index_view *v, size_t bin_len, const char *prefix) {
    int64_t tokens = 0, bin_tokens = (int64_t)(bin_len / v->token_size);
    for (int64_t s = 0; s < v->sequences; s++) {
        int32_t size = zoe_index_load_i32(v->sizes, s);
        int64_t ptr = zoe_index_load_i64(v->pointers, s);
        if (size < 0)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "'%s.idx': sizes[%lld] = %d is negative",
                            prefix, (long long)s, size);
        if (ptr != tokens * (int64_t)v->token_size)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "'%s.idx': pointers[%lld] = %lld, expected %lld (sequences must lie "
                            "back to back in the .bin, as Megatron writes them)",
                            prefix, (long long)s, (long long)ptr,
                            (long long)(tokens * (int64_t)v->token_size));
        if (size > bin_tokens - tokens)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "'%s.bin': %zu bytes, too short for sequence %lld of '%s.idx' "
                            "(pointer %lld, size %d)",
                            prefix, bin_len, (long long)s, prefix, (long long)ptr, size);
        tokens += size;
    }
    if ((uint64_t)tokens * v->token_size != bin_len)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "'%s.bin': %zu bytes, but '%s.idx' describes %lld tokens of %zu bytes "
                        "(%lld bytes)",
                        prefix, bin_len, prefix, (long long)tokens, v->token_size,
                        (long long)(tokens * (int64_t)v->token_size));
    v->tokens = tokens;
    return ZOE_OK;
}

/* 34 + 12 S + 8 D, saturating at UINT64_MAX (a corrupt header may hold any counts). */
static uint64_t idx_bytes_needed(uint64_t seqs, uint64_t docs) {
    uint64_t a, b, n;
    if (__builtin_mul_overflow(seqs, 12, &a) || __builtin_mul_overflow(docs, 8, &b) ||
        __builtin_add_overflow(a, b, &n) || __builtin_add_overflow(n, ZOE_IDX_HEADER_LEN, &n))
        return UINT64_MAX;
    return n;
}

zoe_status zoe_index_parse(const unsigned char *idx, size_t idx_len, size_t bin_len,
                           const char *prefix, zoe_index_view *out) {
    if (idx_len < ZOE_IDX_HEADER_LEN)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "'%s.idx': %zu bytes, shorter than the %d-byte header", prefix, idx_len,
                        ZOE_IDX_HEADER_LEN);
    if (memcmp(idx, idx_magic, ZOE_IDX_MAGIC_LEN) != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "'%s.idx': bad magic (not a Megatron MMIDIDX index)", prefix);
    uint64_t version = load_u64(idx + 9);
    if (version != 1)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "'%s.idx': version %llu, expected 1", prefix,
                        (unsigned long long)version);
    zoe_index_view v = {.dtype = (zoe_token_dtype)idx[17]};
    v.token_size = zoe_token_size(v.dtype);
    if (v.token_size == 0)
        return zoe_fail(ZOE_ERR_UNSUPPORTED,
                        "'%s.idx': token dtype code %d unsupported (expected 8 = uint16 or 4 = "
                        "int32)",
                        prefix, idx[17]);
    uint64_t seqs = load_u64(idx + 18), docs = load_u64(idx + 26);
    uint64_t need = idx_bytes_needed(seqs, docs);
    /* Multimodal Megatron indexes append one int8 mode per sequence; zoe ignores them. */
    if (need > idx_len || (idx_len != need && idx_len - need != seqs))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "'%s.idx': %zu bytes, but its header (sequence count %llu, document "
                        "count %llu) needs %llu",
                        prefix, idx_len, (unsigned long long)seqs, (unsigned long long)docs,
                        (unsigned long long)need);
    if (docs == 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "'%s.idx': document count 0 (document_indices needs at least its "
                        "leading 0)",
                        prefix);
    v.sequences = (int64_t)seqs;
    v.doc_entries = (int64_t)docs;
    v.sizes = idx + ZOE_IDX_HEADER_LEN;
    v.pointers = v.sizes + (size_t)seqs * 4;
    v.doc_index = v.pointers + (size_t)seqs * 8;
    ZOE_TRY(check_doc_index(&v, prefix));
    ZOE_TRY(check_sequences(&v, bin_len, prefix));
    *out = v;
    return ZOE_OK;
}

size_t zoe_index_image_size(int64_t sequences, int64_t documents) {
    return ZOE_IDX_HEADER_LEN + (size_t)sequences * 12 + ((size_t)documents + 1) * 8;
}

void zoe_index_image_write(unsigned char *dst, zoe_token_dtype dtype, const int32_t *sizes,
                           int64_t sequences, const int64_t *doc_ends, int64_t documents) {
    uint64_t version = 1, seqs = (uint64_t)sequences, docs = (uint64_t)documents + 1;
    memcpy(dst, idx_magic, ZOE_IDX_MAGIC_LEN);
    memcpy(dst + 9, &version, 8);
    dst[17] = (unsigned char)dtype;
    memcpy(dst + 18, &seqs, 8);
    memcpy(dst + 26, &docs, 8);
    unsigned char *p = dst + ZOE_IDX_HEADER_LEN;
    if (sequences > 0) memcpy(p, sizes, (size_t)sequences * 4); /* an empty dataset: no sizes */
    p += (size_t)sequences * 4;
    int64_t byte = 0;
    for (int64_t s = 0; s < sequences; s++, p += 8) {
        memcpy(p, &byte, 8);
        byte += (int64_t)sizes[s] * (int64_t)zoe_token_size(dtype);
    }
    int64_t zero = 0;
    memcpy(p, &zero, 8);
    p += 8;
    for (int64_t d = 0; d < documents; d++, p += 8) {
        int64_t end = doc_ends ? doc_ends[d] : d + 1;
        memcpy(p, &end, 8);
    }
}
