/* The CPU device: alignment, copies through streams in order, events, memset; and the
 * errors for a CUDA device in a build or machine without one. */
#include <stdint.h>
#include "testing.h"

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
    return test_finish("test_device");
}
