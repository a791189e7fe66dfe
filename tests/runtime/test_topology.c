/* Placement on synthetic machines: a DGX-2-like host (2 sockets x 24 cores, 16 GPUs, 8 per
 * socket), a 2-NUMA host without GPUs, a small 1-socket host with more ranks than cores; and
 * binding on this host. */
#include <stdio.h>
#include "testing.h"

static void expect(const zoe_topology *t, int lr, int ls, int gpu, int first, int count, int numa,
                   const char *what) {
    zoe_placement p;
    if (!CHECK_OK(zoe_topology_place(t, lr, ls, gpu, &p))) return;
    CHECK(p.num_cores == count && (count == 0 || p.cores[0] == first) && p.numa_node == numa,
          "%s: local rank %d/%d gpu %d -> first core %d, %d cores, numa %d; want %d, %d, %d", what,
          lr, ls, gpu, p.num_cores ? p.cores[0] : -1, p.num_cores, p.numa_node, first, count, numa);
    for (int i = 1; i < p.num_cores; i++)
        CHECK(p.cores[i] == p.cores[i - 1] + 1, "%s: cores contiguous", what);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    /* DGX-2-like: GPUs 0-7 on socket 0, 8-15 on socket 1. 16 ranks: each socket's 24 cores
     * split among its 8 ranks, 3 each. */
    int gpu_numa[16];
    for (int i = 0; i < 16; i++) gpu_numa[i] = i / 8;
    zoe_topology *dgx = NULL;
    CHECK_OK(zoe_topology_load_synthetic("pack:2 [numa] core:24 pu:1", gpu_numa, 16, &dgx));
    if (dgx) {
        CHECK(zoe_topology_num_cores(dgx) == 48 && zoe_topology_num_numa(dgx) == 2 &&
                  zoe_topology_num_gpus(dgx) == 16,
              "dgx: %d cores %d numa %d gpus", zoe_topology_num_cores(dgx),
              zoe_topology_num_numa(dgx), zoe_topology_num_gpus(dgx));
        for (int r = 0; r < 16; r++)
            expect(dgx, r, 16, r, (r / 8) * 24 + (r % 8) * 3, 3, r / 8, "dgx 16 ranks");
        /* 2 ranks drive GPUs 0 and 1, both on socket 0: they split its 24 cores. */
        expect(dgx, 0, 2, 0, 0, 12, 0, "dgx 2 ranks");
        expect(dgx, 1, 2, 1, 12, 12, 0, "dgx 2 ranks on gpu 0,1 share socket 0");
        /* 5 ranks on GPUs 0-4 (all socket 0): 24 = 5+5+5+5+4. */
        expect(dgx, 4, 5, 4, 20, 4, 0, "dgx 5 ranks uneven");
        /* Without GPUs, 4 ranks split 48 cores 12 each, each inside one socket. */
        expect(dgx, 3, 4, -1, 36, 12, 1, "dgx no gpu");
        zoe_placement p;
        CHECK(zoe_topology_place(dgx, 0, 1, 16, &p) == ZOE_ERR_INVALID_ARGUMENT, "gpu 16 rejected");
        CHECK(zoe_topology_place(dgx, 2, 2, 0, &p) == ZOE_ERR_INVALID_ARGUMENT,
              "local rank 2 of 2 rejected");
        CHECK(zoe_topology_place(dgx, 0, -1, 0, &p) == ZOE_ERR_INVALID_ARGUMENT,
              "negative local size rejected");
        CHECK(strstr(zoe_last_error(), "-1") != NULL, "message names -1: %s", zoe_last_error());
        zoe_topology_destroy(dgx);
    }
    /* A 2-socket host with NUMA nodes per socket and no GPUs: 3 ranks take 11, 11, 10 cores;
     * the middle one straddles the sockets (numa -1). */
    zoe_topology *two = NULL;
    CHECK_OK(zoe_topology_load_synthetic("pack:2 [numa] core:16 pu:2", NULL, 0, &two));
    if (two) {
        expect(two, 0, 3, -1, 0, 11, 0, "2 sockets, 3 ranks");
        expect(two, 1, 3, -1, 11, 11, -1, "2 sockets, 3 ranks");
        expect(two, 2, 3, -1, 22, 10, 1, "2 sockets, 3 ranks");
        zoe_topology_destroy(two);
    }
    /* More ranks than cores: round-robin single cores. */
    zoe_topology *small = NULL;
    CHECK_OK(zoe_topology_load_synthetic("pack:1 core:2 pu:1", NULL, 0, &small));
    if (small) {
        expect(small, 2, 4, -1, 0, 1, 0, "oversubscribed");
        expect(small, 3, 4, -1, 1, 1, 0, "oversubscribed");
        zoe_topology_destroy(small);
    }
    zoe_topology *bad = NULL;
    CHECK(zoe_topology_load_synthetic("flux:3", NULL, 0, &bad) == ZOE_ERR_INVALID_ARGUMENT && !bad,
          "bad description");
    int far[1] = {5};
    CHECK(zoe_topology_load_synthetic("pack:2 core:2", far, 1, &bad) == ZOE_ERR_INVALID_ARGUMENT,
          "gpu on numa 5 rejected");
    CHECK(zoe_topology_load_xml("/nonexistent/topo.xml", &bad) == ZOE_ERR_IO, "missing xml");
    /* This host: load, place rank 0 of 1 and bind. */
    zoe_topology *host = NULL;
    if (CHECK_OK(zoe_topology_load_host(&host))) {
        zoe_placement p;
        CHECK_OK(zoe_topology_place(host, 0, 1, -1, &p));
        CHECK(p.num_cores == zoe_topology_num_cores(host), "rank 0 of 1 takes every core");
        CHECK_OK(zoe_topology_bind(host, &p));
        zoe_topology_destroy(host);
    }
    return test_finish("test_topology");
}
