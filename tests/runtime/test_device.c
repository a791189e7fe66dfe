/* The CPU device: alignment, copies through streams in order, events, memset; the allocation
 * accounting (bytes as requested, peaks, frees in any order, from several threads); and the
 * errors for a CUDA device in a build or machine without one. */
#include <pthread.h>
#include <stdint.h>
#include "testing.h"

enum { THREADS = 4, ROUNDS = 500 };

static void *churn(void *arg) {
    zoe_device *dev = arg;
    for (int r = 0; r < ROUNDS; r++) {
        void *a = NULL, *b = NULL;
        if (zoe_device_alloc(dev, 100 + (size_t)r, &a) != ZOE_OK) return NULL;
        if (zoe_host_alloc(dev, 7, &b) != ZOE_OK) return NULL;
        zoe_device_free(dev, a);
        zoe_host_free(dev, b);
    }
    return dev;
}

static void check_accounting(void) {
    zoe_device *dev = NULL;
    if (!CHECK_OK(zoe_device_create(ZOE_BACKEND_CPU, 0, &dev))) return;
    zoe_memory_stats m;
    void *a = NULL, *b = NULL, *p = NULL;
    CHECK_OK(zoe_device_alloc(dev, 1000, &a));
    CHECK_OK(zoe_device_alloc(dev, 24, &b));
    CHECK_OK(zoe_host_alloc(dev, 333, &p));
    CHECK_OK(zoe_device_memory_stats(dev, &m));
    CHECK(m.device_bytes == 1024 && m.device_peak == 1024 && m.pinned_bytes == 333 &&
              m.pinned_peak == 333,
          "accounting after 1000 + 24 device and 333 pinned bytes: %zu (peak %zu), %zu (%zu)",
          m.device_bytes, m.device_peak, m.pinned_bytes, m.pinned_peak);
    zoe_device_free(dev, a); /* not the last one allocated */
    zoe_host_free(dev, p);
    CHECK_OK(zoe_device_alloc(dev, 10, &a));
    CHECK_OK(zoe_device_memory_stats(dev, &m));
    CHECK(m.device_bytes == 34 && m.device_peak == 1024 && m.pinned_bytes == 0 &&
              m.pinned_peak == 333,
          "accounting after frees: %zu (peak %zu), %zu (%zu)", m.device_bytes, m.device_peak,
          m.pinned_bytes, m.pinned_peak);
    zoe_device_free(dev, a), zoe_device_free(dev, b);
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, churn, dev);
    int ok = 1;
    for (int t = 0; t < THREADS; t++) {
        void *r = NULL;
        pthread_join(th[t], &r);
        ok &= r == dev;
    }
    CHECK_OK(zoe_device_memory_stats(dev, &m));
    CHECK(ok && m.device_bytes == 0 && m.pinned_bytes == 0 &&
              m.device_peak <= 1024 + THREADS * (100 + ROUNDS),
          "%d threads allocating and freeing: %zu device, %zu pinned bytes left, peak %zu", THREADS,
          m.device_bytes, m.pinned_bytes, m.device_peak);
    CHECK(zoe_device_memory_stats(dev, NULL) == ZOE_ERR_INVALID_ARGUMENT, "NULL stats refused");
    zoe_device_destroy(dev);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    zoe_device *dev = NULL;
    zoe_stream *s = NULL;
    zoe_event *e = NULL;
    CHECK_OK(zoe_device_create(ZOE_BACKEND_CPU, 0, &dev));
    CHECK_OK(zoe_stream_create(dev, &s));
    CHECK_OK(zoe_event_create(dev, &e));
    float *d = NULL, *h = NULL;
    CHECK_OK(zoe_device_alloc(dev, 1000 * sizeof(float), (void **)&d));
    CHECK_OK(zoe_host_alloc(dev, 1000 * sizeof(float), (void **)&h));
    CHECK(((uintptr_t)d & 63) == 0 && ((uintptr_t)h & 63) == 0, "64-byte alignment");
    test_rng rng;
    test_rng_seed(&rng, 3);
    test_fill_uniform(&rng, h, 1000, -1, 1);
    CHECK_OK(zoe_memcpy_async(d, h, 1000 * sizeof(float), ZOE_COPY_HOST_TO_DEVICE, s));
    CHECK_OK(zoe_event_record(e, s));
    CHECK_OK(zoe_stream_wait_event(s, e));
    CHECK_OK(zoe_event_synchronize(e));
    CHECK(memcmp(d, h, 1000 * sizeof(float)) == 0, "copy host to device");
    CHECK_OK(zoe_memset_async(d, 0, 10 * sizeof(float), s));
    CHECK_OK(zoe_stream_synchronize(s));
    CHECK(d[0] == 0 && d[9] == 0 && d[10] == h[10], "memset 10 floats");
    CHECK(zoe_memcpy_async(NULL, h, 4, ZOE_COPY_HOST_TO_DEVICE, s) == ZOE_ERR_INVALID_ARGUMENT,
          "NULL copy");
    zoe_device_free(dev, d);
    zoe_host_free(dev, h);
    zoe_event_destroy(e);
    zoe_stream_destroy(s);
    zoe_device_destroy(dev);
    zoe_backend b;
    CHECK(zoe_backend_parse("tpu", &b) == ZOE_ERR_INVALID_ARGUMENT, "unknown backend");
    CHECK(strstr(zoe_last_error(), "tpu") != NULL, "message names tpu");
    zoe_device *gpu = NULL;
    zoe_status st = zoe_device_create(ZOE_BACKEND_CUDA, 0, &gpu);
    if (zoe_cuda_device_count() == 0)
        CHECK(st != ZOE_OK && gpu == NULL, "CUDA device without a GPU fails cleanly");
    zoe_device_destroy(gpu);
    check_accounting();
    return test_finish("test_device");
}
