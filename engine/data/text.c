/* Text into documents, and a text file as an in-memory dataset: the same .idx and .bin images
 * zoe-data would write, parsed by the same code as a file.
 *
 * Explained in docs/data.md, "Plain text, byte-level". */
#include <stdlib.h>
#include <string.h>
#include "engine/data/data_impl.h"
#include "runtime/error.h"

/* Whitespace only (a CRLF file's empty lines hold a lone '\r'; '\n' matters for whole files). */
static int is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!memchr(" \t\r\n\f\v", s[i], 6)) return 0;
    return 1;
}

/* The line starting at *pos (without its newline); advances *pos past the newline. */
static size_t next_line(const zoe_text_cursor *cur, size_t *pos, size_t *start) {
    const char *nl = memchr(cur->text + *pos, '\n', cur->len - *pos);
    size_t end = nl ? (size_t)(nl - cur->text) : cur->len;
    *start = *pos;
    *pos = nl ? end + 1 : end;
    return end - *start;
}

int zoe_text_next_document(zoe_text_cursor *cur, const char **doc, size_t *doc_len) {
    while (cur->pos < cur->len) {
        size_t start, n;
        if (cur->split == ZOE_SPLIT_FILE) {
            start = cur->pos, n = cur->len - cur->pos;
            cur->pos = cur->len;
        } else {
            n = next_line(cur, &cur->pos, &start);
            if (is_blank(cur->text + start, n)) continue;
            /* A paragraph runs on to the last non-blank line before a blank line or the end. */
            while (cur->split == ZOE_SPLIT_BLANK_LINE && cur->pos < cur->len) {
                size_t pos = cur->pos, line_start;
                size_t line_len = next_line(cur, &pos, &line_start);
                if (is_blank(cur->text + line_start, line_len)) break;
                n = line_start + line_len - start;
                cur->pos = pos;
            }
        }
        if (is_blank(cur->text + start, n)) continue;
        *doc = cur->text + start;
        *doc_len = n;
        return 1;
    }
    return 0;
}

/* Tokenises every document into bin (uint16, EOD after each) and its size into sizes. */
static void tokenise_documents(zoe_text_cursor cur, uint16_t *bin, int32_t *sizes) {
    const char *doc;
    size_t n;
    int64_t d = 0;
    while (zoe_text_next_document(&cur, &doc, &n)) {
        for (size_t i = 0; i < n; i++) *bin++ = (unsigned char)doc[i];
        *bin++ = ZOE_BYTE_EOD;
        sizes[d++] = (int32_t)(n + 1);
    }
}

static zoe_status build_images(zoe_dataset *ds, const char *text, size_t len, zoe_doc_split split) {
    zoe_text_cursor cur = {.text = text, .len = len, .split = split};
    const char *doc;
    size_t n, tokens = 0;
    int64_t docs = 0;
    while (zoe_text_next_document(&cur, &doc, &n)) {
        if (n + 1 > INT32_MAX)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "'%s': document %lld has %zu bytes, over the int32 size limit of the "
                            "index",
                            ds->name, (long long)docs, n);
        tokens += n + 1;
        docs++;
    }
    size_t idx_len = zoe_index_image_size(docs, docs), bin_len = tokens * sizeof(uint16_t);
    int32_t *sizes = malloc(docs ? (size_t)docs * sizeof *sizes : 1);
    ds->idx_image = malloc(idx_len);
    ds->bin_image = malloc(bin_len ? bin_len : 1);
    if (!sizes || !ds->idx_image || !ds->bin_image) {
        free(sizes);
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "'%s': %zu tokens in memory", ds->name, tokens);
    }
    cur.pos = 0;
    tokenise_documents(cur, (uint16_t *)(void *)ds->bin_image, sizes);
    zoe_index_image_write(ds->idx_image, ZOE_TOKENS_UINT16, sizes, docs, NULL, docs);
    free(sizes);
    ds->bin = ds->bin_image;
    return zoe_index_parse(ds->idx_image, idx_len, bin_len, ds->name, &ds->index);
}

zoe_status zoe_dataset_open_text(const char *path, zoe_doc_split split, zoe_dataset **out) {
    if (!path || !out)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_dataset_open_text: NULL argument");
    *out = NULL;
    if (split != ZOE_SPLIT_BLANK_LINE && split != ZOE_SPLIT_LINE && split != ZOE_SPLIT_FILE)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "'%s': document split %d unknown", path,
                        (int)split);
    zoe_mapped_file text;
    ZOE_TRY(zoe_map_file(path, &text));
    zoe_dataset *ds = NULL;
    zoe_status st = zoe_dataset_alloc(path, &ds);
    if (st == ZOE_OK) st = build_images(ds, text.data, text.len, split);
    zoe_unmap_file(&text);
    if (st != ZOE_OK) {
        zoe_dataset_destroy(ds);
        return st;
    }
    *out = ds;
    return ZOE_OK;
}

zoe_status zoe_dataset_writer_add_text(zoe_dataset_writer *w, const zoe_tokenizer *tok,
                                       const char *text, size_t len, zoe_doc_split split) {
    zoe_input_options opt = {.split = split, .append_eod = 1};
    return zoe_dataset_writer_add_input(w, tok, text, len, "text", &opt);
}

zoe_status zoe_dataset_writer_add_text_file(zoe_dataset_writer *w, const zoe_tokenizer *tok,
                                            const char *path, zoe_doc_split split) {
    zoe_input_options opt = {.split = split, .append_eod = 1};
    return zoe_dataset_writer_add_file(w, tok, path, &opt);
}
