/* Internal: the CPU backend of the op table. kernels.c validates every argument once and then
 * calls zoe_cpu_<op>(ck, <the public op's arguments after the context>); the functions here
 * assume valid arguments (sizes within the plan, required pointers non-NULL, dt fp32 or bf16).
 *
 * Explained in docs/architecture.md, "Layers of the code". */
#ifndef ZOE_KERNELS_CPU_OPS_H
#define ZOE_KERNELS_CPU_OPS_H

#include "kernels/kernels.h"
#include "kernels/op_list.h"

typedef struct zoe_cpu_kernels zoe_cpu_kernels;

/* Plans the workspace (per-thread tiles and shared scratch) for the shapes in plan. */
zoe_status zoe_cpu_kernels_create(const zoe_kernel_plan *plan, zoe_cpu_kernels **out);
/* Host bytes of the workspace zoe_cpu_kernels_create allocates for plan with threads threads. */
size_t zoe_cpu_workspace_bytes(const zoe_kernel_plan *plan, int threads);
void zoe_cpu_kernels_destroy(zoe_cpu_kernels *ck);

/* zoe_cpu_<op>(ck, <the op's parameters>) for every row of kernels/op_list.h. */
#define ZOE_CPU_OP_DECLARATION(name, params)                                                       \
    zoe_status zoe_cpu_##name(zoe_cpu_kernels *ck, ZOE_KERNEL_PARAMS params);
ZOE_KERNEL_OPS(ZOE_CPU_OP_DECLARATION)
#undef ZOE_CPU_OP_DECLARATION

#endif
