/* The Megatron indexed format. A dataset written byte by byte here as Megatron lays it out (two
 * sequences in one document, int32 ids above 65535, a trailing multimodal mode array) reads
 * back exactly; each corrupted field is rejected with the file and the field named; the writer
 * round-trips random documents in both dtypes and leaves nothing behind when not finished;
 * text opens with the three document splits; zoe_dataset_open picks the right kind. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <unistd.h>
#include "data_util.h"
#include "zoe/data.h"

typedef struct bytes {
    unsigned char data[1024];
    size_t len;
} bytes;

static void put(bytes *b, const void *p, size_t n) {
    memcpy(b->data + b->len, p, n);
    b->len += n;
}
static void put_u64(bytes *b, uint64_t v) {
    put(b, &v, 8);
}
static void put_i64(bytes *b, int64_t v) {
    put(b, &v, 8);
}
static void put_i32(bytes *b, int32_t v) {
    put(b, &v, 4);
}

/* The reference dataset: documents {[5 6 7], [8]}, {[big 1 2 3]}, {[42]} as 4 sequences. */
enum { SEQS = 4, DOC_ENTRIES = 4, TOKENS = 9 };
static const int32_t sizes[SEQS] = {3, 1, 4, 1};
static const int64_t doc_index[DOC_ENTRIES] = {0, 2, 3, 4};

static void stream(int32_t big, int32_t *out) {
    int32_t s[TOKENS] = {5, 6, 7, 8, big, 1, 2, 3, 42};
    memcpy(out, s, sizeof s);
}

/* The .idx exactly as Megatron's _IndexWriter writes it (version 1, packed little-endian). */
static bytes megatron_idx(uint8_t code, size_t token_size, int modes) {
    bytes b = {.len = 0};
    put(&b, "MMIDIDX\0\0", 9);
    put_u64(&b, 1);
    put(&b, &code, 1);
    put_u64(&b, SEQS);
    put_u64(&b, DOC_ENTRIES);
    for (int i = 0; i < SEQS; i++) put_i32(&b, sizes[i]);
    int64_t ptr = 0;
    for (int i = 0; i < SEQS; i++, ptr += sizes[i - 1] * (int64_t)token_size) put_i64(&b, ptr);
    for (int i = 0; i < DOC_ENTRIES; i++) put_i64(&b, doc_index[i]);
    for (int i = 0; modes && i < SEQS; i++) b.data[b.len++] = 0;
    return b;
}

static bytes megatron_bin(int32_t big, size_t token_size) {
    bytes b = {.len = 0};
    int32_t s[TOKENS];
    stream(big, s);
    for (int i = 0; i < TOKENS; i++) {
        uint16_t h = (uint16_t)s[i];
        if (token_size == 2)
            put(&b, &h, 2);
        else
            put_i32(&b, s[i]);
    }
    return b;
}

static void write_pair(const char *prefix, const bytes *idx, const bytes *bin) {
    char path[512];
    snprintf(path, sizeof path, "%s.idx", prefix);
    write_file(path, idx->data, idx->len);
    snprintf(path, sizeof path, "%s.bin", prefix);
    write_file(path, bin->data, bin->len);
}

static void check_reference(const char *prefix, int32_t big, zoe_token_dtype dtype) {
    zoe_dataset *ds;
    if (!CHECK_OK(zoe_dataset_open_indexed(prefix, &ds))) return;
    CHECK(zoe_dataset_dtype(ds) == dtype, "dtype %d", (int)zoe_dataset_dtype(ds));
    CHECK(zoe_dataset_tokens(ds) == TOKENS && zoe_dataset_documents(ds) == 3 &&
              zoe_dataset_sequences(ds) == SEQS,
          "%s: tokens %lld documents %lld sequences %lld", prefix,
          (long long)zoe_dataset_tokens(ds), (long long)zoe_dataset_documents(ds),
          (long long)zoe_dataset_sequences(ds));
    int32_t got[TOKENS], want[TOKENS];
    stream(big, want);
    for (int i = 0; i < TOKENS; i++) got[i] = -99;
    CHECK_OK(zoe_dataset_read(ds, 0, TOKENS, got));
    CHECK(memcmp(got, want, sizeof got) == 0, "%s: token stream differs", prefix);
    CHECK_OK(zoe_dataset_read(ds, 3, 3, got));
    CHECK(got[0] == 8 && got[1] == big && got[2] == 1, "%s: read at offset 3", prefix);
    int64_t off[3] = {0, 4, 8}, len[3] = {4, 4, 1};
    for (int d = 0; d < 3; d++) {
        int64_t o = -1, n = -1;
        CHECK_OK(zoe_dataset_document(ds, d, &o, &n));
        CHECK(o == off[d] && n == len[d], "%s: document %d at %lld+%lld", prefix, d, (long long)o,
              (long long)n);
    }
    CHECK(zoe_dataset_read(ds, 5, 5, got) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "[5, 10)") != NULL,
          "read past the end: '%s'", zoe_last_error());
    CHECK(zoe_dataset_document(ds, 3, &off[0], &len[0]) == ZOE_ERR_INVALID_ARGUMENT,
          "document 3 of 3 rejected");
    zoe_dataset_destroy(ds);
}

/* One corruption: edit the reference idx/bin, expect the open to fail naming file and field. */
static void expect_rejected(const char *prefix, bytes idx, bytes bin, const char *file,
                            const char *field) {
    write_pair(prefix, &idx, &bin);
    zoe_dataset *ds = (zoe_dataset *)0x1;
    zoe_status st = zoe_dataset_open_indexed(prefix, &ds);
    char want_file[512];
    snprintf(want_file, sizeof want_file, "%s%s'", prefix, file);
    CHECK(st != ZOE_OK && ds == NULL, "corrupt '%s' accepted", field);
    CHECK(strstr(zoe_last_error(), want_file) && strstr(zoe_last_error(), field),
          "message '%s' should name %s and '%s'", zoe_last_error(), want_file, field);
    if (st == ZOE_OK) zoe_dataset_destroy(ds);
}

static void patch_u64(bytes *b, size_t at, uint64_t v) {
    memcpy(b->data + at, &v, 8);
}

static void corruptions(const char *dir) {
    char prefix[512];
    snprintf(prefix, sizeof prefix, "%s/bad", dir);
    bytes idx = megatron_idx(4, 4, 0), bin = megatron_bin(70000, 4), b;
    size_t sizes_at = 34, ptrs_at = 34 + 4 * SEQS, docs_at = ptrs_at + 8 * SEQS;

    b = idx, b.data[3] = 'X';
    expect_rejected(prefix, b, bin, ".idx", "bad magic");
    b = idx, patch_u64(&b, 9, 2);
    expect_rejected(prefix, b, bin, ".idx", "version 2");
    b = idx, b.data[17] = 7; /* float32 */
    expect_rejected(prefix, b, bin, ".idx", "dtype code 7");
    b = idx, b.len -= 1;
    expect_rejected(prefix, b, bin, ".idx", "sequence count 4");
    b = idx, b.len = 20;
    expect_rejected(prefix, b, bin, ".idx", "shorter than the 34-byte header");
    b = idx, patch_u64(&b, 18, 5);
    expect_rejected(prefix, b, bin, ".idx", "sequence count 5");
    b = idx, patch_u64(&b, 18, UINT64_MAX / 2);
    expect_rejected(prefix, b, bin, ".idx", "sequence count 9223372036854775807");
    b = idx, patch_u64(&b, docs_at + 8 * 3, 3);
    expect_rejected(prefix, b, bin, ".idx", "last document_indices entry is 3");
    b = idx, patch_u64(&b, docs_at, 1);
    expect_rejected(prefix, b, bin, ".idx", "document_indices[0] = 1");
    b = idx, patch_u64(&b, docs_at + 8 * 2, 1);
    expect_rejected(prefix, b, bin, ".idx", "document_indices[2] = 1");
    b = idx, patch_u64(&b, ptrs_at + 8, 8);
    expect_rejected(prefix, b, bin, ".idx", "pointers[1] = 8, expected 12");
    b = idx, b.data[sizes_at + 8] = 0xff, b.data[sizes_at + 9] = 0xff, b.data[sizes_at + 10] = 0xff,
    b.data[sizes_at + 11] = 0xff;
    expect_rejected(prefix, b, bin, ".idx", "sizes[2] = -1");
    b = bin, b.len -= 4;
    expect_rejected(prefix, idx, b, ".bin", "too short for sequence 3");
    b = bin, b.len += 4;
    expect_rejected(prefix, idx, b, ".bin", "describes 9 tokens");

    /* A missing .bin names the file it could not open. */
    char path[600];
    write_pair(prefix, &idx, &bin);
    snprintf(path, sizeof path, "%s.bin", prefix);
    remove(path);
    zoe_dataset *ds;
    CHECK(zoe_dataset_open_indexed(prefix, &ds) == ZOE_ERR_IO && strstr(zoe_last_error(), path),
          "missing .bin: '%s'", zoe_last_error());
}

/* Random documents through the writer and back, in both dtypes. */
static void writer_round_trip(zoe_token_dtype dtype, test_rng *rng) {
    char dir[256], prefix[512];
    tmpdir_create(dir);
    snprintf(prefix, sizeof prefix, "%s/w_%s", dir, zoe_token_dtype_name(dtype));
    zoe_dataset_writer *w;
    if (!CHECK_OK(zoe_dataset_writer_create(prefix, dtype, &w))) return;
    enum { DOCS = 40, MAXLEN = 300 };
    int32_t max = dtype == ZOE_TOKENS_UINT16 ? 65535 : 2000000000;
    int32_t *all = malloc(DOCS * MAXLEN * sizeof *all);
    int64_t lens[DOCS], total = 0;
    for (int d = 0; d < DOCS; d++) {
        lens[d] = d == 7 ? 0 : test_rng_int(rng, 1, MAXLEN); /* one empty document */
        for (int64_t i = 0; i < lens[d]; i++) all[total + i] = (int32_t)test_rng_int(rng, 0, max);
        CHECK_OK(zoe_dataset_writer_add_document(w, all + total, lens[d]));
        total += lens[d];
    }
    int32_t too_big = dtype == ZOE_TOKENS_UINT16 ? 65536 : -1;
    CHECK(zoe_dataset_writer_add_document(w, &too_big, 1) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), dtype == ZOE_TOKENS_UINT16 ? "token 65536" : "token -1"),
          "out-of-range token rejected: '%s'", zoe_last_error());
    CHECK(zoe_dataset_writer_documents(w) == DOCS && zoe_dataset_writer_tokens(w) == total,
          "writer counts");
    char list[256];
    CHECK(dir_entries(dir, list, sizeof list) == 1, "before finish only the temp .bin: %s", list);
    CHECK_OK(zoe_dataset_writer_finish(w));
    zoe_dataset_writer_destroy(w);
    CHECK(dir_entries(dir, list, sizeof list) == 2, "after finish .bin and .idx only: %s", list);

    zoe_dataset *ds;
    if (CHECK_OK(zoe_dataset_open_indexed(prefix, &ds))) {
        int32_t *got = malloc((size_t)total * sizeof *got);
        for (int64_t i = 0; i < total; i++) got[i] = -5;
        CHECK(zoe_dataset_tokens(ds) == total && zoe_dataset_documents(ds) == DOCS,
              "%s: %lld tokens %lld docs", prefix, (long long)zoe_dataset_tokens(ds),
              (long long)zoe_dataset_documents(ds));
        CHECK_OK(zoe_dataset_read(ds, 0, total, got));
        CHECK(memcmp(got, all, (size_t)total * sizeof *got) == 0, "%s: stream differs", prefix);
        int64_t expect_off = 0;
        for (int d = 0; d < DOCS; d++) {
            int64_t o, n;
            CHECK_OK(zoe_dataset_document(ds, d, &o, &n));
            CHECK(o == expect_off && n == lens[d], "%s: doc %d", prefix, d);
            expect_off += lens[d];
        }
        free(got);
        zoe_dataset_destroy(ds);
    }
    free(all);
    tmpdir_remove(dir);
}

/* A writer destroyed before finish (a failed conversion) leaves no file at all. */
static void writer_abandoned(void) {
    char dir[256], prefix[512], list[256];
    tmpdir_create(dir);
    snprintf(prefix, sizeof prefix, "%s/abandoned", dir);
    zoe_dataset_writer *w;
    int32_t t[3] = {1, 2, 3};
    if (CHECK_OK(zoe_dataset_writer_create(prefix, ZOE_TOKENS_INT32, &w))) {
        CHECK_OK(zoe_dataset_writer_add_document(w, t, 3));
        zoe_dataset_writer_destroy(w);
    }
    CHECK(dir_entries(dir, list, sizeof list) == 0, "abandoned writer left: %s", list);
    snprintf(prefix, sizeof prefix, "%s/no-such-dir/x", dir);
    CHECK(zoe_dataset_writer_create(prefix, ZOE_TOKENS_UINT16, &w) == ZOE_ERR_IO &&
              strstr(zoe_last_error(), "no-such-dir/x.bin"),
          "unwritable prefix: '%s'", zoe_last_error());
    tmpdir_remove(dir);
}

/* A document longer than the writer may take is refused from its length, before it is encoded
 * (a byte-level encoding of a 2 GiB document would size its buffer at 8 GiB of int32 and fail
 * only after): the message names the document and its length, and no file is left. The lines
 * are drawn at random lengths around the limit. */
static void writer_document_too_long(test_rng *rng) {
    char dir[256], prefix[512], list[256];
    tmpdir_create(dir);
    snprintf(prefix, sizeof prefix, "%s/long", dir);
    zoe_tokenizer *tok = NULL;
    zoe_dataset_writer *w = NULL;
    enum { LIMIT = 64 };
    size_t fits = (size_t)test_rng_int(rng, 1, LIMIT),
           over = (size_t)test_rng_int(rng, LIMIT + 1, 4 * LIMIT);
    char text[8 * LIMIT];
    size_t len = 0;
    for (size_t i = 0; i < fits; i++) text[len++] = (char)('a' + test_rng_int(rng, 0, 25));
    text[len++] = '\n';
    for (size_t i = 0; i < over; i++) text[len++] = (char)('a' + test_rng_int(rng, 0, 25));
    text[len++] = '\n';
    if (CHECK_OK(zoe_tokenizer_create_bytes(&tok)) &&
        CHECK_OK(zoe_dataset_writer_create(prefix, ZOE_TOKENS_UINT16, &w))) {
        zoe_input_options opt = {.split = ZOE_SPLIT_LINE, .max_document_bytes = LIMIT};
        char want[128];
        snprintf(want, sizeof want, "document 1: %zu bytes, more than the %d", over, LIMIT);
        CHECK(zoe_dataset_writer_add_input(w, tok, text, len, "lines", &opt) ==
                      ZOE_ERR_INVALID_ARGUMENT &&
                  strstr(zoe_last_error(), want),
              "a %zu-byte document over a %d-byte limit: '%s'", over, LIMIT, zoe_last_error());
        zoe_dataset_writer_destroy(w);
        CHECK(dir_entries(dir, list, sizeof list) == 0, "refused input left: %s", list);
        /* at the limit it is taken */
        if (CHECK_OK(zoe_dataset_writer_create(prefix, ZOE_TOKENS_UINT16, &w))) {
            opt.max_document_bytes = over;
            CHECK_OK(zoe_dataset_writer_add_input(w, tok, text, len, "lines", &opt));
            CHECK(zoe_dataset_writer_tokens(w) == (int64_t)(fits + over), "%lld tokens",
                  (long long)zoe_dataset_writer_tokens(w));
            zoe_dataset_writer_destroy(w);
        }
    }
    zoe_tokenizer_destroy(tok);
    tmpdir_remove(dir);
}

/* A writer finished with no document writes the empty dataset, which reads back as such. */
static void writer_empty(void) {
    char dir[256], prefix[512];
    tmpdir_create(dir);
    snprintf(prefix, sizeof prefix, "%s/empty", dir);
    zoe_dataset_writer *w;
    if (CHECK_OK(zoe_dataset_writer_create(prefix, ZOE_TOKENS_UINT16, &w))) {
        CHECK_OK(zoe_dataset_writer_finish(w));
        zoe_dataset_writer_destroy(w);
    }
    zoe_dataset *ds = NULL;
    if (CHECK_OK(zoe_dataset_open_indexed(prefix, &ds)))
        CHECK(zoe_dataset_documents(ds) == 0 && zoe_dataset_tokens(ds) == 0 &&
                  zoe_dataset_sequences(ds) == 0,
              "empty dataset: %lld documents", (long long)zoe_dataset_documents(ds));
    zoe_dataset_destroy(ds);
    CHECK(zoe_dataset_writer_create("", ZOE_TOKENS_UINT16, &w) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "empty"),
          "empty prefix: '%s'", zoe_last_error());
    CHECK(zoe_dataset_writer_create(dir, ZOE_TOKENS_UINT16, &w) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "is a directory"),
          "directory prefix: '%s'", zoe_last_error());
    char path[600];
    snprintf(path, sizeof path, "%s.bin", prefix), unlink(path);
    snprintf(path, sizeof path, "%s.idx", prefix), unlink(path);
    tmpdir_remove(dir);
}

/* The documents of open_text(text, split), each checked to end in EOD. */
static void check_split(const char *dir, const char *text, zoe_doc_split split,
                        const char *const *want, int n_want) {
    char path[512];
    snprintf(path, sizeof path, "%s/split.txt", dir);
    write_file(path, text, strlen(text));
    zoe_dataset *ds;
    if (!CHECK_OK(zoe_dataset_open_text(path, split, &ds))) return;
    const char *mode = zoe_doc_split_name(split);
    CHECK(zoe_dataset_documents(ds) == n_want && zoe_dataset_dtype(ds) == ZOE_TOKENS_UINT16,
          "%s: %lld documents, want %d", mode, (long long)zoe_dataset_documents(ds), n_want);
    for (int d = 0; d < n_want && d < zoe_dataset_documents(ds); d++) {
        int64_t off, len;
        int32_t t[256];
        CHECK_OK(zoe_dataset_document(ds, d, &off, &len));
        size_t wl = strlen(want[d]);
        CHECK(len == (int64_t)wl + 1, "%s doc %d: %lld tokens, want %zu + EOD", mode, d,
              (long long)len, wl);
        if (len != (int64_t)wl + 1) continue;
        CHECK_OK(zoe_dataset_read(ds, off, len, t));
        int same = t[wl] == ZOE_BYTE_EOD;
        for (size_t i = 0; i < wl; i++) same &= t[i] == (unsigned char)want[d][i];
        CHECK(same, "%s doc %d should be '%s' + EOD", mode, d, want[d]);
    }
    zoe_dataset_destroy(ds);
}

static void text_splits(const char *dir) {
    const char *text = "alpha\nbeta\n\n \t\ngamma \xc3\xa9\r\n\r\ndelta\n\n\n";
    const char *para[] = {"alpha\nbeta", "gamma \xc3\xa9\r", "delta"};
    const char *lines[] = {"alpha", "beta", "gamma \xc3\xa9\r", "delta"};
    const char *whole[] = {text};
    check_split(dir, text, ZOE_SPLIT_BLANK_LINE, para, 3);
    check_split(dir, text, ZOE_SPLIT_LINE, lines, 4);
    check_split(dir, text, ZOE_SPLIT_FILE, whole, 1);
    const char *no_newline[] = {"one", "two"};
    check_split(dir, "\n\none\n\ntwo", ZOE_SPLIT_BLANK_LINE, no_newline, 2);
    check_split(dir, " \n\t\n", ZOE_SPLIT_FILE, whole, 0);
}

/* zoe_dataset_open: a prefix with .idx, a .idx/.bin path, or a text file. */
static void open_dispatch(const char *dir) {
    char prefix[512], path[600];
    snprintf(prefix, sizeof prefix, "%s/ref", dir);
    zoe_dataset *ds;
    const char *suffixes[] = {"", ".idx", ".bin"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s%s", prefix, suffixes[i]);
        if (CHECK_OK(zoe_dataset_open(path, &ds))) {
            CHECK(zoe_dataset_tokens(ds) == TOKENS && strcmp(zoe_dataset_name(ds), prefix) == 0,
                  "open('%s') is the indexed dataset '%s'", path, zoe_dataset_name(ds));
            zoe_dataset_destroy(ds);
        }
    }
    snprintf(path, sizeof path, "%s/split.txt", dir);
    write_file(path, "a\n\nb\n", 5);
    if (CHECK_OK(zoe_dataset_open(path, &ds))) {
        CHECK(zoe_dataset_documents(ds) == 2 && zoe_dataset_tokens(ds) == 4, "open(text)");
        zoe_dataset_destroy(ds);
    }
    snprintf(path, sizeof path, "%s/missing", dir);
    CHECK(zoe_dataset_open(path, &ds) == ZOE_ERR_IO && strstr(zoe_last_error(), path),
          "missing path named: '%s'", zoe_last_error());
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    char dir[256], prefix[512];
    tmpdir_create(dir);
    /* Megatron's own layout, int32 with an id above 65535, then uint16 with the largest id. */
    snprintf(prefix, sizeof prefix, "%s/ref", dir);
    bytes idx = megatron_idx(4, 4, 0), bin = megatron_bin(70000, 4);
    CHECK(idx.len == 34 + 12 * SEQS + 8 * DOC_ENTRIES, "hand-made idx is %zu bytes", idx.len);
    write_pair(prefix, &idx, &bin);
    check_reference(prefix, 70000, ZOE_TOKENS_INT32);
    snprintf(prefix, sizeof prefix, "%s/ref16", dir);
    idx = megatron_idx(8, 2, 0), bin = megatron_bin(65535, 2);
    write_pair(prefix, &idx, &bin);
    check_reference(prefix, 65535, ZOE_TOKENS_UINT16);
    snprintf(prefix, sizeof prefix, "%s/multimodal", dir);
    idx = megatron_idx(8, 2, 1);
    write_pair(prefix, &idx, &bin);
    check_reference(prefix, 65535, ZOE_TOKENS_UINT16);
    snprintf(prefix, sizeof prefix, "%s/ref", dir);
    idx = megatron_idx(4, 4, 0), bin = megatron_bin(70000, 4);
    write_pair(prefix, &idx, &bin);

    corruptions(dir);
    test_rng rng;
    test_rng_seed(&rng, 6);
    writer_round_trip(ZOE_TOKENS_UINT16, &rng);
    writer_empty();
    writer_round_trip(ZOE_TOKENS_INT32, &rng);
    writer_abandoned();
    writer_document_too_long(&rng);
    text_splits(dir);
    open_dispatch(dir);

    zoe_token_dtype dt;
    CHECK(zoe_token_dtype_parse("int8", &dt) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "'int8'"),
          "dtype int8 rejected: '%s'", zoe_last_error());
    zoe_doc_split sp;
    CHECK(zoe_doc_split_parse("para", &sp) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "'para'"),
          "split para rejected: '%s'", zoe_last_error());
    tmpdir_remove(dir);
    return test_finish("test_indexed");
}
