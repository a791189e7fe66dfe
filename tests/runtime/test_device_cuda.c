/* GPU: the CUDA device and the NCCL communicator. Skipped (exit 77) without a GPU. Each rank
 * uses GPU rank % count; all-reduce and all-gather of bf16 data checked on the host. */
#include <stdlib.h>
#include "testing.h"

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    int ngpu = zoe_cuda_device_count(), any = 0;
    MPI_Allreduce(&ngpu, &any, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (any == 0) {
        if (test_rank() == 0) printf("test_device_cuda: no GPU, skipped\n");
        MPI_Finalize();
        return 77;
    }
    int rank = test_rank(), world = test_world_size();
    zoe_device *dev = NULL;
    zoe_stream *s = NULL;
    zoe_comm *c = NULL;
    CHECK_OK(zoe_device_create(ZOE_BACKEND_CUDA, rank % ngpu, &dev));
    CHECK_OK(zoe_stream_create(dev, &s));
    enum { N = 1 << 20 };
    uint16_t *h = NULL, *d = NULL;
    CHECK_OK(zoe_host_alloc(dev, N * 2 * (size_t)world, (void **)&h));
    CHECK_OK(zoe_device_alloc(dev, N * 2 * (size_t)world, (void **)&d));
    for (int i = 0; i < N; i++) h[i] = zoe_f32_to_bf16((float)((i % 7) + rank));
    CHECK_OK(zoe_memcpy_async(d, h, N * 2, ZOE_COPY_HOST_TO_DEVICE, s));
    if (CHECK_OK(zoe_comm_create_for_device(MPI_COMM_WORLD, dev, &c))) {
        CHECK(strcmp(zoe_comm_backend_name(c), "nccl") == 0, "nccl backend");
        CHECK_OK(zoe_comm_all_reduce(c, d, d, N, ZOE_BF16, ZOE_REDUCE_SUM, s));
        CHECK_OK(zoe_memcpy_async(h, d, N * 2, ZOE_COPY_DEVICE_TO_HOST, s));
        CHECK_OK(zoe_stream_synchronize(s));
        int bad = 0;
        for (int i = 0; i < N; i++) {
            float want = (float)(world * (i % 7) + world * (world - 1) / 2);
            bad += zoe_bf16_to_f32(h[i]) != zoe_bf16_to_f32(zoe_f32_to_bf16(want));
        }
        CHECK(bad == 0, "nccl bf16 all_reduce: %d wrong", bad);
        zoe_comm_destroy(c);
    }
    zoe_device_free(dev, d);
    zoe_host_free(dev, h);
    zoe_stream_destroy(s);
    zoe_device_destroy(dev);
    return test_finish("test_device_cuda");
}
