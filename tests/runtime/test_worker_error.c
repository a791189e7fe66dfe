/* A failure inside an OpenMP worker reaches the caller's thread with its own message, and the
 * first failure wins over later ones. */
#include <omp.h>
#include <string.h>
#include "runtime/error.h"
#include "testing.h"

static zoe_status work(int i, int bad) {
    if (i == bad) return zoe_fail(ZOE_ERR_IO, "tile %d could not be read", i);
    return ZOE_OK;
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    test_rng rng;
    test_rng_seed(&rng, 7);
    for (int trial = 0; trial < 8; trial++) {
        int bad = (int)test_rng_int(&rng, 0, 255);
        zoe_worker_error err = {ZOE_OK, ""};
        int on_worker = 0;
#pragma omp parallel for num_threads(4) schedule(static) reduction(| : on_worker)
        for (int i = 0; i < 256; i++) {
            zoe_worker_error_record(&err, work(i, bad));
            if (i == bad) on_worker = omp_get_thread_num() != 0;
        }
        zoe_clear_error();
        zoe_status st = zoe_worker_error_raise(&err, "reading tiles");
        char want[128];
        snprintf(want, sizeof want, "reading tiles: tile %d could not be read", bad);
        CHECK(st == ZOE_ERR_IO, "status %d, want ZOE_ERR_IO", (int)st);
        CHECK(strcmp(zoe_last_error(), want) == 0, "message '%s', want '%s' (on a worker: %d)",
              zoe_last_error(), want, on_worker);
    }
    /* Two failures: one of them is reported, whole; no failure: ZOE_OK and no message. */
    zoe_worker_error err = {ZOE_OK, ""};
#pragma omp parallel for num_threads(4)
    for (int i = 0; i < 64; i++) zoe_worker_error_record(&err, work(i, i == 5 || i == 50 ? i : -1));
    CHECK(zoe_worker_error_raise(&err, "x") == ZOE_ERR_IO, "two failures: status");
    CHECK(strstr(zoe_last_error(), "tile 5 ") || strstr(zoe_last_error(), "tile 50 "),
          "two failures: message '%s'", zoe_last_error());
    zoe_worker_error none = {ZOE_OK, ""};
    zoe_clear_error();
    CHECK(zoe_worker_error_raise(&none, "x") == ZOE_OK && !zoe_last_error()[0], "no failure");
    return test_finish("test_worker_error");
}
