/* A dataset whose .bin shrinks while it is open (another job rewrites it) fails the read that
 * reaches past the new end with a message naming the file, instead of SIGBUS: the .bin is read
 * with pread. Reads before the cut still return the written tokens. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "data_util.h"
#include "zoe/data.h"

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    char dir[] = "/tmp/zoe_truncated_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "temporary directory");
    char prefix[64], bin[80];
    snprintf(prefix, sizeof prefix, "%s/ds", dir);
    snprintf(bin, sizeof bin, "%s.bin", prefix);
    enum { N = 50000 };
    int32_t *tokens = malloc(N * sizeof *tokens), *back = malloc(N * sizeof *back);
    test_rng rng;
    test_rng_seed(&rng, 17);
    for (int i = 0; i < N; i++) tokens[i] = (int32_t)(test_rng_uniform(&rng) * 60000);
    for (int dtype = 0; dtype < 2; dtype++) {
        zoe_token_dtype d = dtype ? ZOE_TOKENS_INT32 : ZOE_TOKENS_UINT16;
        zoe_dataset_writer *w;
        CHECK_OK(zoe_dataset_writer_create(prefix, d, &w));
        CHECK_OK(zoe_dataset_writer_add_document(w, tokens, N));
        CHECK_OK(zoe_dataset_writer_finish(w));
        zoe_dataset_writer_destroy(w);
        zoe_dataset *ds;
        if (!CHECK_OK(zoe_dataset_open_indexed(prefix, &ds))) break;
        CHECK(truncate(bin, (off_t)(N / 2) * (dtype ? 4 : 2)) == 0, "truncate the .bin");
        memset(back, 0x5a, N * sizeof *back);
        CHECK_OK(zoe_dataset_read(ds, 100, 1000, back));
        CHECK(memcmp(back, tokens + 100, 1000 * sizeof *back) == 0, "tokens before the cut");
        zoe_status st = zoe_dataset_read(ds, N / 2 - 10, 20, back);
        CHECK(st == ZOE_ERR_IO && strstr(zoe_last_error(), "truncated or replaced while in use") &&
                  strstr(zoe_last_error(), bin),
              "%s: read past the cut: status %d '%s'", zoe_token_dtype_name(d), (int)st,
              zoe_last_error());
        zoe_dataset_destroy(ds);
    }
    unlink(bin);
    snprintf(bin, sizeof bin, "%s.idx", prefix);
    unlink(bin);
    rmdir(dir);
    free(tokens), free(back);
    return test_finish("test_truncated");
}
