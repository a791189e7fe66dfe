/* The Megatron .idx/.bin reader on arbitrary bytes. An input is a little-endian u32 n, then n
 * bytes of .idx, then the .bin. The index is parsed in memory; when it is accepted, what the
 * parser promises is checked (sequences back to back inside the .bin, document indices
 * non-decreasing up to the sequence count), and small accepted pairs are also written to files
 * and read back through the public reader (mmap, zoe_dataset_read, zoe_dataset_document). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "engine/data/data_impl.h"

static void check_view(const zoe_index_view *v, size_t bin_len) {
    int64_t at = 0;
    for (int64_t s = 0; s < v->sequences; s++) {
        int32_t size = zoe_index_load_i32(v->sizes, s);
        int64_t ptr = zoe_index_load_i64(v->pointers, s);
        if (size < 0 || ptr != at * (int64_t)v->token_size) abort();
        at += size;
    }
    if ((uint64_t)at * v->token_size != bin_len || at != v->tokens) abort();
    int64_t prev = 0;
    for (int64_t d = 0; d < v->doc_entries; d++) {
        int64_t x = zoe_index_load_i64(v->doc_index, d);
        if (x < prev || x > v->sequences) abort();
        prev = x;
    }
}

static void write_file(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(p, 1, n, f) != n) abort();
    fclose(f);
}

/* Through the files, as zoe-train opens a dataset. */
static void read_back(const uint8_t *idx, size_t idx_len, const uint8_t *bin, size_t bin_len) {
    char dir[] = "/tmp/zoe_fuzz_idx_XXXXXX";
    if (!mkdtemp(dir)) return;
    char prefix[64], idx_path[80], bin_path[80];
    snprintf(prefix, sizeof prefix, "%s/d", dir);
    snprintf(idx_path, sizeof idx_path, "%s.idx", prefix);
    snprintf(bin_path, sizeof bin_path, "%s.bin", prefix);
    write_file(idx_path, idx, idx_len);
    write_file(bin_path, bin, bin_len);
    zoe_dataset *ds = NULL;
    if (zoe_dataset_open(prefix, &ds) != ZOE_OK) abort(); /* the same bytes parsed in memory */
    int64_t tokens = zoe_dataset_tokens(ds);
    int32_t *out = malloc(((size_t)tokens + 1) * sizeof *out);
    if (!out || zoe_dataset_read(ds, 0, tokens, out) != ZOE_OK) abort();
    if (zoe_dataset_read(ds, 1, tokens, out) == ZOE_OK) abort(); /* one past the end */
    for (int64_t d = 0; d < zoe_dataset_documents(ds); d++) {
        int64_t off, len;
        if (zoe_dataset_document(ds, d, &off, &len) != ZOE_OK) abort();
        if (off < 0 || len < 0 || off + len > tokens) abort();
    }
    free(out);
    zoe_dataset_destroy(ds);
    unlink(idx_path), unlink(bin_path), rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4) return 0;
    uint32_t n;
    memcpy(&n, data, 4);
    if (n > size - 4) return 0;
    const uint8_t *idx = data + 4, *bin = idx + n;
    size_t bin_len = size - 4 - n;
    /* The parser reads the index in place: give it a buffer of exactly n bytes, so that any
     * read past them is an AddressSanitizer report. */
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy) return 0;
    memcpy(copy, idx, n);
    zoe_index_view v;
    if (zoe_index_parse(copy, n, bin_len, "fuzz", &v) == ZOE_OK) {
        check_view(&v, bin_len);
        if (n + bin_len <= 4096) read_back(copy, n, bin, bin_len);
    } else if (!zoe_last_error()[0]) {
        abort(); /* a refusal that names nothing */
    }
    free(copy);
    return 0;
}
