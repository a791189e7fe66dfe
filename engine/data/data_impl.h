/* Internal to the data files of the engine: the .idx layout, the view of a parsed index, text
 * splitting and read-only file mappings.
 *
 * Explained in docs/data.md. */
#ifndef ZOE_ENGINE_DATA_IMPL_H
#define ZOE_ENGINE_DATA_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include "zoe/data.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the .idx/.bin formats are little-endian and are read in place"
#endif

/* .idx: magic[9] "MMIDIDX\0\0", u64 version = 1, u8 dtype code, u64 sequence count S, u64
 * document-index count D (documents + 1), then i32 sizes[S], i64 pointers[S] (byte offsets
 * into .bin), i64 document_indices[D] (first sequence of each document, then S). All
 * little-endian and packed, so the arrays are not aligned: read them with memcpy. */
#define ZOE_IDX_MAGIC_LEN  9
#define ZOE_IDX_HEADER_LEN 34

/* A validated index, pointing into the bytes it was parsed from. */
typedef struct zoe_index_view {
    zoe_token_dtype dtype;
    size_t token_size;
    int64_t sequences;
    int64_t doc_entries; /* documents + 1 */
    int64_t tokens;      /* sum of sizes: the stream length */
    const unsigned char *sizes, *pointers, *doc_index;
} zoe_index_view;

/* Bytes per token of dtype, 0 when the code is not one zoe reads. */
size_t zoe_token_size(zoe_token_dtype dtype);

/* Checks idx (idx_len bytes) against a .bin of bin_len bytes; messages name `prefix`.idx. */
zoe_status zoe_index_parse(const unsigned char *idx, size_t idx_len, size_t bin_len,
                           const char *prefix, zoe_index_view *out);
/* The .idx image for S sequences with the given sizes, tokens stored back to back, in D
 * documents: doc_ends[d] is the sequence count at the end of document d (an empty document ends
 * where the one before it did, as in Megatron's IndexedDatasetBuilder); doc_ends NULL: one
 * document per sequence (D = S). */
size_t zoe_index_image_size(int64_t sequences, int64_t documents);
void zoe_index_image_write(unsigned char *dst, zoe_token_dtype dtype, const int32_t *sizes,
                           int64_t sequences, const int64_t *doc_ends, int64_t documents);
int64_t zoe_index_load_i64(const unsigned char *array, int64_t i);
int32_t zoe_index_load_i32(const unsigned char *array, int64_t i);

/* Walks the documents of a text buffer. */
typedef struct zoe_text_cursor {
    const char *text;
    size_t len, pos;
    zoe_doc_split split;
} zoe_text_cursor;

/* Next non-blank document: 1 with its bytes in *doc and its length in *doc_len, 0 at the end. */
int zoe_text_next_document(zoe_text_cursor *cur, const char **doc, size_t *doc_len);

/* A whole file mapped read-only (an empty file maps to data = NULL, len = 0). */
typedef struct zoe_mapped_file {
    void *data;
    size_t len;
} zoe_mapped_file;

zoe_status zoe_map_file(const char *path, zoe_mapped_file *out);
void zoe_unmap_file(zoe_mapped_file *f);

/* A dataset is a validated index over its token bytes: PREFIX.idx mapped and PREFIX.bin read
 * with pread (bin_fd), or both built in memory from text (idx_image, bin_image, and bin points
 * into it). The .bin is read, not mapped, so that a file truncated under a running job is a
 * short read with a message, not a SIGBUS in the middle of a copy; training reads nothing of
 * the .idx after it is validated at open. */
struct zoe_dataset {
    char *name;
    /* A subset (zoe_dataset_subset): documents [first_doc, ...) of parent, whose stream it
     * reads from stream_offset on; index holds its dtype and counts but no arrays. */
    const zoe_dataset *parent;
    int64_t first_doc, stream_offset;
    zoe_index_view index;
    const unsigned char *bin;
    int bin_fd;
    size_t bin_len;
    zoe_mapped_file idx_file;
    unsigned char *idx_image, *bin_image;
};

/* An empty dataset named `name`, for the open functions to fill. */
zoe_status zoe_dataset_alloc(const char *name, zoe_dataset **out);

#endif
