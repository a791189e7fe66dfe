/* How the NCCL collectives of one GPU keep their order (runtime/comm_impl.h): NCCL's launch
 * order from 2.26 on unless the user turned it off, zoe's serial chain otherwise. The decision is
 * plain C, so it is tested here without a GPU; what each order does on a GPU is argued at the top
 * of runtime/comm_nccl_cuda.c. */
#include <string.h>
#include "runtime/comm_impl.h"
#include "testing.h"

static void expect(int version, const char *env, zoe_nccl_order want) {
    zoe_nccl_order got = zoe_nccl_order_choose(version, env);
    CHECK(got == want, "NCCL %d with NCCL_LAUNCH_ORDER_IMPLICIT=%s: got %s, want %s", version,
          env ? env : "(unset)", zoe_nccl_order_name(got), zoe_nccl_order_name(want));
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    /* NCCL 2.26 introduced the variable: unset (zoe sets it) or on, NCCL orders by launch. */
    expect(22600, NULL, ZOE_NCCL_ORDER_BY_LAUNCH);
    expect(22809, NULL, ZOE_NCCL_ORDER_BY_LAUNCH);
    expect(22809, "", ZOE_NCCL_ORDER_BY_LAUNCH);
    expect(22809, "1", ZOE_NCCL_ORDER_BY_LAUNCH);
    expect(23100, "1", ZOE_NCCL_ORDER_BY_LAUNCH);
    /* The user's explicit 0 is kept: then zoe must order the collectives itself. */
    expect(22809, "0", ZOE_NCCL_ORDER_SERIAL);
    /* Older NCCL ignores the variable whatever its value. */
    expect(22509, NULL, ZOE_NCCL_ORDER_SERIAL);
    expect(21805, "1", ZOE_NCCL_ORDER_SERIAL);
    expect(0, NULL, ZOE_NCCL_ORDER_SERIAL);
    CHECK(strstr(zoe_nccl_order_name(ZOE_NCCL_ORDER_BY_LAUNCH), "NCCL_LAUNCH_ORDER_IMPLICIT") !=
              NULL,
          "the by-launch order's name says which variable it rests on");
    return test_finish("test_nccl_order");
}
