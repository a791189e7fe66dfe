/* The CPU device: alignment, copies through streams in order, events, memset; the allocation
 * accounting (bytes as requested, peaks, frees in any order, from several threads); the memory
 * limit (refusals that name the allocation, exact to the byte, under threads); and the errors
 * for a CUDA device in a build or machine without one; the pin limit and its fall-back to
 * pageable memory. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
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

/* The memory limit over random sizes: the accounting (held = the sum of the live sizes, peak =
 * the most held at once, both kept here independently of the device) and refusals, which name
 * the allocation and leave nothing allocated; pinned memory does not count; a limit below what
 * is held is refused; 0 is the CPU device's default, no limit. */
enum { LIMIT_SLOTS = 64, LIMIT_ROUNDS = 2000 };

static void check_limit(void) {
    zoe_device *dev = NULL;
    if (!CHECK_OK(zoe_device_create(ZOE_BACKEND_CPU, 0, &dev))) return;
    CHECK(zoe_device_memory_limit(dev) == SIZE_MAX, "the CPU device's default: no limit (%zu)",
          zoe_device_memory_limit(dev));
    test_rng rng;
    test_rng_seed(&rng, 35);
    const size_t limit = (size_t)test_rng_int(&rng, 1 << 20, 3 << 20);
    CHECK_OK(zoe_device_set_memory_limit(dev, limit));
    CHECK(zoe_device_memory_limit(dev) == limit, "limit %zu set", limit);
    void *live[LIMIT_SLOTS] = {0};
    size_t sizes[LIMIT_SLOTS] = {0}, held = 0, peak = 0;
    int refused = 0, bad = 0;
    for (int r = 0; r < LIMIT_ROUNDS && !bad; r++) {
        int s = (int)test_rng_int(&rng, 0, LIMIT_SLOTS - 1);
        if (live[s]) {
            zoe_device_free(dev, live[s]);
            held -= sizes[s];
            live[s] = NULL;
        } else {
            size_t bytes = (size_t)test_rng_int(&rng, 1, (int64_t)limit / 8);
            char what[32];
            snprintf(what, sizeof what, "test buffer %d", r);
            void *p = (void *)&rng; /* a refusal must set it to NULL */
            zoe_status st = zoe_device_alloc_for(dev, bytes, what, &p);
            if (held + bytes <= limit) {
                int ok = st == ZOE_OK && p;
                CHECK(ok, "%zu bytes with %zu of %zu held: %s", bytes, held, limit,
                      zoe_last_error());
                bad |= !ok;
                if (p) memset(p, 0x5a, bytes); /* it is all there */
                live[s] = p, sizes[s] = bytes, held += bytes;
                if (held > peak) peak = held;
            } else {
                refused++;
                int ok = st == ZOE_ERR_OUT_OF_MEMORY && p == NULL &&
                         strstr(zoe_last_error(), "device memory cap") &&
                         strstr(zoe_last_error(), what);
                CHECK(ok, "%zu bytes with %zu of %zu held: status %d, '%s' (want the cap and '%s')",
                      bytes, held, limit, (int)st, zoe_last_error(), what);
                bad |= !ok;
            }
        }
        zoe_memory_stats m;
        CHECK_OK(zoe_device_memory_stats(dev, &m));
        int ok = m.device_bytes == held && m.device_peak == peak;
        CHECK(ok, "round %d: held %zu (want %zu), peak %zu (want %zu)", r, m.device_bytes, held,
              m.device_peak, peak);
        bad |= !ok;
    }
    CHECK(refused > 0 && peak <= limit, "%d refusals, peak %zu of %zu", refused, peak, limit);
    /* exactly up to the limit, not a byte more */
    if (held < limit) {
        void *fill = NULL, *more = NULL;
        CHECK(zoe_device_alloc(dev, limit - held + 1, &more) == ZOE_ERR_OUT_OF_MEMORY,
              "one byte past the limit refused");
        CHECK(strstr(zoe_last_error(), "a device buffer") != NULL,
              "an unnamed allocation is called a device buffer: %s", zoe_last_error());
        CHECK_OK(zoe_device_alloc(dev, limit - held, &fill));
        CHECK(zoe_device_set_memory_limit(dev, limit - 1) == ZOE_ERR_INVALID_ARGUMENT,
              "a limit below what is held refused");
        zoe_device_free(dev, fill);
    }
    void *pinned = NULL;
    CHECK_OK(zoe_host_alloc(dev, 2 * limit, &pinned)); /* host memory: not under the limit */
    zoe_host_free(dev, pinned);
    for (int s = 0; s < LIMIT_SLOTS; s++) zoe_device_free(dev, live[s]);
    CHECK_OK(zoe_device_set_memory_limit(dev, 0));
    CHECK(zoe_device_memory_limit(dev) == SIZE_MAX, "0 restores the default");
    zoe_device_destroy(dev);
}

/* Threads allocating against a tight limit: however they interleave, what is held never passes
 * it (the device counts bytes before it allocates them). */
typedef struct limit_churn {
    zoe_device *dev;
    uint64_t seed;
    int refused;
} limit_churn;

static void *churn_limited(void *arg) {
    limit_churn *c = arg;
    test_rng rng;
    test_rng_seed(&rng, c->seed);
    for (int r = 0; r < ROUNDS; r++) {
        void *a = NULL;
        if (zoe_device_alloc(c->dev, (size_t)test_rng_int(&rng, 1000, 4000), &a) != ZOE_OK)
            c->refused++;
        zoe_device_free(c->dev, a);
    }
    return NULL;
}

static void check_limit_threads(void) {
    zoe_device *dev = NULL;
    if (!CHECK_OK(zoe_device_create(ZOE_BACKEND_CPU, 0, &dev))) return;
    const size_t limit = 6000; /* two of the largest fit, three of the smallest do not */
    CHECK_OK(zoe_device_set_memory_limit(dev, limit));
    limit_churn c[THREADS];
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        c[t] = (limit_churn){.dev = dev, .seed = 100 + (uint64_t)t};
        pthread_create(&th[t], NULL, churn_limited, &c[t]);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    zoe_memory_stats m;
    CHECK_OK(zoe_device_memory_stats(dev, &m));
    CHECK(m.device_bytes == 0 && m.device_peak <= limit && m.device_peak >= 1000,
          "%d threads under a limit of %zu: %zu held at the end, peak %zu", THREADS, limit,
          m.device_bytes, m.device_peak);
    zoe_device_destroy(dev);
}

/* Runs alloc with stderr going to a file, and returns what it wrote there (the caller frees). */
static char *stderr_of(zoe_status (*alloc)(zoe_device *, void **), zoe_device *dev, void **out,
                       zoe_status *st) {
    char path[] = "/tmp/zoe_test_device_XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    fflush(stderr);
    dup2(fd, 2);
    *st = alloc(dev, out);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char *text = calloc(4096, 1);
    lseek(fd, 0, SEEK_SET);
    if (read(fd, text, 4095) < 0) text[0] = 0;
    close(fd);
    unlink(path);
    return text;
}

static zoe_status alloc_snapshot(zoe_device *dev, void **out) {
    return zoe_host_alloc_for(dev, 600, "the test's snapshot", out);
}

/* The pin limit: allocations past it are pageable host memory, with one warning naming the
 * allocation, its size and RLIMIT_MEMLOCK; counted apart; copies run from them as from pinned
 * memory; their free returns them to their own counter. */
static void check_pinned_limit(void) {
    zoe_device *dev = NULL;
    zoe_stream *s = NULL;
    if (!CHECK_OK(zoe_device_create(ZOE_BACKEND_CPU, 0, &dev))) return;
    CHECK_OK(zoe_stream_create(dev, &s));
    CHECK_OK(zoe_device_set_pinned_limit(dev, 1000));
    void *ring = NULL, *snap = NULL, *d = NULL, *exact = NULL, *over = NULL;
    CHECK_OK(zoe_host_alloc_for(dev, 600, "the test's ring", &ring));
    zoe_status st;
    char *log = stderr_of(alloc_snapshot, dev, &snap, &st);
    CHECK(st == ZOE_OK && snap, "the allocation past the pin limit fails: %s", zoe_last_error());
    CHECK(strstr(log, "the test's snapshot") && strstr(log, "(600 bytes)") &&
              strstr(log, "RLIMIT_MEMLOCK") && strstr(log, "pin limit 1000 bytes") &&
              strstr(log, "pageable") && strchr(log, '\n') == strrchr(log, '\n'),
          "the fall-back's one line: '%s'", log);
    free(log);
    zoe_memory_stats m;
    CHECK_OK(zoe_device_memory_stats(dev, &m));
    CHECK(m.pinned_bytes == 600 && m.pageable_bytes == 600 && m.pageable_peak == 600,
          "600 pinned and 600 pageable bytes counted as %zu and %zu", m.pinned_bytes,
          m.pageable_bytes);
    /* the pageable buffer is host memory to the copies, both ways */
    test_rng rng;
    test_rng_seed(&rng, 11);
    float src[150], back[150];
    test_fill_uniform(&rng, src, 150, -1, 1);
    memcpy(snap, src, sizeof src);
    CHECK_OK(zoe_device_alloc(dev, sizeof src, &d));
    CHECK_OK(zoe_memcpy_async(d, snap, sizeof src, ZOE_COPY_HOST_TO_DEVICE, s));
    memset(snap, 0, sizeof src);
    CHECK_OK(zoe_memcpy_async(snap, d, sizeof src, ZOE_COPY_DEVICE_TO_HOST, s));
    memcpy(back, snap, sizeof back);
    CHECK(memcmp(back, src, sizeof src) == 0, "copies through a pageable fall-back buffer");
    CHECK(zoe_memcpy_async(d, snap, sizeof src, ZOE_COPY_DEVICE_TO_HOST, s) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "the pageable buffer taken for device memory");
    zoe_host_free(dev, snap);
    zoe_host_free(dev, ring);
    CHECK_OK(zoe_host_alloc(dev, 1000, &exact)); /* to the byte: pinned */
    CHECK_OK(zoe_device_memory_stats(dev, &m));
    CHECK(m.pinned_bytes == 1000 && m.pageable_bytes == 0 && m.pageable_peak == 600,
          "after the frees and 1000 bytes: %zu pinned, %zu pageable", m.pinned_bytes,
          m.pageable_bytes);
    CHECK_OK(zoe_device_set_pinned_limit(dev, 0)); /* no limit */
    CHECK_OK(zoe_host_alloc(dev, 1 << 20, &over));
    CHECK_OK(zoe_device_memory_stats(dev, &m));
    CHECK(m.pinned_bytes == 1000 + (1 << 20) && m.pageable_bytes == 0,
          "without a limit everything is pinned: %zu pinned, %zu pageable", m.pinned_bytes,
          m.pageable_bytes);
    zoe_host_free(dev, over), zoe_host_free(dev, exact), zoe_device_free(dev, d);
    CHECK_OK(zoe_device_memory_stats(dev, &m));
    CHECK(m.pinned_bytes == 0 && m.pageable_bytes == 0 && m.device_bytes == 0,
          "all freed: %zu pinned, %zu pageable, %zu device", m.pinned_bytes, m.pageable_bytes,
          m.device_bytes);
    CHECK(zoe_device_set_pinned_limit(NULL, 1) == ZOE_ERR_INVALID_ARGUMENT, "NULL device");
    zoe_stream_destroy(s);
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
    check_limit();
    check_limit_threads();
    check_pinned_limit();
    return test_finish("test_device");
}
