/* engine/safetensors: a table of random tensors written and read back (names, dtypes, shapes,
 * offsets, metadata, bytes), a header parsed from hand-written JSON as another writer would
 * produce it (unsorted keys, no padding), and every malformed header the parser must refuse,
 * each with its message. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "engine/formats/safetensors.h"
#include "testing.h"

static void roundtrip(const char *dir, test_rng *rng) {
    zoe_safetensors st;
    zoe_safetensors_init(&st);
    const zoe_st_dtype kinds[] = {ZOE_ST_F32, ZOE_ST_BF16, ZOE_ST_F16, ZOE_ST_I64, ZOE_ST_U8};
    enum { N = 12 };
    void *data[N];
    char name[64];
    for (int i = 0; i < N; i++) {
        int64_t shape[3] = {test_rng_int(rng, 1, 40), test_rng_int(rng, 1, 9), 3};
        int ndim = (int)test_rng_int(rng, 0, 3);
        zoe_st_dtype dt = kinds[test_rng_int(rng, 0, 4)];
        snprintf(name, sizeof name, "h.%d.attn \"q\\k\".weight", i);
        CHECK_OK(zoe_safetensors_add(&st, name, dt, ndim, shape));
        size_t bytes = (size_t)(st.tensors[i].end - st.tensors[i].begin);
        data[i] = malloc(bytes + 1);
        for (size_t b = 0; b < bytes; b++)
            ((unsigned char *)data[i])[b] = (unsigned char)test_rng_next(rng);
    }
    CHECK(zoe_safetensors_add(&st, "h.3.attn \"q\\k\".weight", ZOE_ST_F32, 0, NULL) != ZOE_OK,
          "a duplicate name is refused");
    CHECK_OK(zoe_safetensors_set_meta(&st, "format", "pt"));
    CHECK_OK(zoe_safetensors_set_meta(&st, "zoe", "line\nbreak"));
    char path[512];
    snprintf(path, sizeof path, "%s/t.safetensors", dir);
    CHECK_OK(zoe_safetensors_write_file(path, &st, (const void *const *)data));
    CHECK(st.data_offset % ZOE_ST_ALIGN == 0, "data offset %llu aligned",
          (unsigned long long)st.data_offset);
    zoe_safetensors back;
    CHECK_OK(zoe_safetensors_read_header(path, &back));
    CHECK(back.count == N && back.data_offset == st.data_offset && back.data_size == st.data_size,
          "table read back: %d tensors", back.count);
    CHECK(back.meta_count == 2 && strcmp(zoe_safetensors_meta(&back, "zoe"), "line\nbreak") == 0,
          "metadata read back");
    for (int i = 0; i < N && back.count == N; i++) {
        const zoe_st_tensor *a = &st.tensors[i], *b = zoe_safetensors_find(&back, a->name);
        CHECK(b && b->dtype == a->dtype && b->ndim == a->ndim && b->begin == a->begin &&
                  b->end == a->end,
              "tensor %d read back", i);
        for (int d = 0; b && d < a->ndim; d++) CHECK(b->shape[d] == a->shape[d], "shape %d", d);
        size_t bytes = (size_t)(a->end - a->begin);
        unsigned char *got = malloc(bytes + 1);
        CHECK_OK(zoe_safetensors_read_data(path, &back, b, 0, bytes, got));
        CHECK(memcmp(got, data[i], bytes) == 0, "bytes of tensor %d", i);
        free(got);
    }
    zoe_safetensors_free(&back);
    zoe_safetensors_free(&st);
    for (int i = 0; i < N; i++) free(data[i]);
}

/* A file of an 8-byte prefix, the JSON as given and data_bytes bytes of data. */
static zoe_status parse_text(const char *json, uint64_t data_bytes, zoe_safetensors *out) {
    size_t n = strlen(json);
    unsigned char *buf = calloc(8 + n, 1);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(((uint64_t)n >> (8 * i)) & 0xff);
    memcpy(buf + 8, json, n);
    zoe_status st = zoe_safetensors_parse(buf, 8 + n, 8 + n + data_bytes, "x.safetensors", out);
    free(buf);
    return st;
}

static void expect_bad(const char *json, uint64_t data_bytes, const char *fragment) {
    zoe_safetensors st;
    zoe_status s = parse_text(json, data_bytes, &st);
    CHECK(s == ZOE_ERR_INVALID_ARGUMENT, "'%s' should be refused", json);
    CHECK(strstr(zoe_last_error(), fragment) && strstr(zoe_last_error(), "x.safetensors"),
          "'%s': message '%s' lacks '%s' or the file name", json, zoe_last_error(), fragment);
    if (s == ZOE_OK) zoe_safetensors_free(&st);
}

static void parse_cases(void) {
    zoe_safetensors st;
    /* another writer's style: keys unsorted by offset, metadata last, no padding */
    CHECK_OK(parse_text("{\"b\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[8,20]},"
                        "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"__metadata__\":{\"format\":\"pt\"}}",
                        20, &st));
    CHECK(st.count == 2 && strcmp(st.tensors[0].name, "a") == 0 && st.tensors[1].ndim == 2 &&
              st.tensors[1].dtype == ZOE_ST_BF16 && st.data_size == 20,
          "parsed a hand-written header");
    zoe_safetensors_free(&st);
    CHECK_OK(parse_text("{\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]}}", 8, &st));
    CHECK(st.count == 1 && st.tensors[0].ndim == 0, "a scalar");
    zoe_safetensors_free(&st);
    expect_bad("[1]", 0, "start with");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, "valid JSON");
    expect_bad("{\"a\":{\"dtype\":\"F99\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "F99");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "span 8");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
               "dimension 0");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
               "data_offsets");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12,
               "truncated or padded");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               12, "tensor b begins");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
               16, "twice");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8,
               "unknown key");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x", 8,
               "after the header");
    expect_bad("{\"__metadata__\":{\"k\":1}}", 0, "not a string");
    /* a length prefix larger than the file */
    unsigned char bad[16] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}'};
    CHECK(zoe_safetensors_parse(bad, sizeof bad, sizeof bad, "x.safetensors", &st) ==
                  ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "header length"),
          "length prefix beyond the file: %s", zoe_last_error());
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    char dir[] = "/tmp/zoe_st_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    test_rng rng;
    test_rng_seed(&rng, 7);
    roundtrip(dir, &rng);
    parse_cases();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
    return test_finish("test_safetensors");
}
