/* The choices CUDA attention makes, as plain arithmetic over the shape and the GPU's limits: which
 * path runs (tensor-core GEMMs or the fp32 flash kernels), the flash kernels' tile per
 * architecture, the dk/dv grid's split, the GEMM path's passes, the workspace all of it needs
 * and the work it executes. The dispatcher (kernels/cuda/attention*.cu), the workspace plan
 * (kernels.c, context.cu) and the plan's time model (engine/plan/plan.c) all read these functions,
 * so that what the plan prices is what runs. Built on every backend: the CPU tests check it.
 *
 * Explained in docs/attention.md, "Which path runs where". */
#ifndef ZOE_KERNELS_ATTENTION_PLAN_H
#define ZOE_KERNELS_ATTENTION_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include "zoe/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    ZOE_ATTN_PARTNER_ROWS = 32, /* partner rows per staged tile: one per lane of a warp */
    ZOE_ATTN_WARPS = 8,         /* warps per flash block */
    ZOE_ATTN_MAX_HEAD_DIM = 256 /* 8 dims per lane */
};

/* Dynamic shared memory one block may have (cudaDevAttrMaxSharedMemoryPerBlockOptin), from the
 * CUDA C++ Programming Guide's table of compute capabilities. */
#define ZOE_SMEM_OPTIN_SM70 ((int64_t)96 * 1024)  /* V100 */
#define ZOE_SMEM_OPTIN_SM80 ((int64_t)163 * 1024) /* A100 */
#define ZOE_SMEM_OPTIN_SM90 ((int64_t)227 * 1024) /* H100, H200 */

/* What of the GPU the choices read. */
typedef struct zoe_attention_gpu {
    int cc;             /* compute capability, major * 10 + minor: 70, 80, 90 */
    int sms;            /* multiprocessors */
    int64_t smem_optin; /* bytes of dynamic shared memory a block may opt in to */
} zoe_attention_gpu;

typedef enum { ZOE_ATTN_FORWARD, ZOE_ATTN_BACKWARD } zoe_attention_pass;
typedef enum { ZOE_ATTN_PATH_FLASH, ZOE_ATTN_PATH_GEMM } zoe_attention_path;

/* The tensor-core GEMM path for 16-bit storage where the GPU multiplies that dtype on tensor
 * cores (fp16 from sm_70, bf16 from sm_80), unless force_flash; otherwise the flash kernels. */
zoe_attention_path zoe_attention_path_of(zoe_dtype dt, int cc, int force_flash);

/* ---- the flash kernels (kernels/cuda/attention.cu) ---- */

/* Bytes of shared memory a flash block of `rows` own rows takes at head size HS: its own rows
 * (q; or q and dout, or k and v, backward) unpadded, two staged partner tiles padded by a float
 * per row, and backward the partner rows' lse and delta. */
int64_t zoe_attention_flash_smem(zoe_attention_pass pass, int64_t HS, int rows);
/* Own rows per block: the largest of 32, 16 and 8 whose block fits smem_optin; 0 when none does
 * or HS exceeds ZOE_ATTN_MAX_HEAD_DIM. */
int zoe_attention_flash_rows(zoe_attention_pass pass, int64_t HS, int64_t smem_optin);
/* The largest head size whose blocks fit smem_optin in both passes (for messages). */
int64_t zoe_attention_flash_max_head_dim(int64_t smem_optin);

/* The dk/dv grid, (key tiles, KV heads, B) blocks, each walking the query heads of its group,
 * is split over `slices` slices of `heads` query heads each (the last may hold fewer): each
 * slice writes fp32 partial sums that one pass adds in slice order, so the result does not
 * depend on scheduling. Split until the grid holds 2 blocks per multiprocessor, no further than
 * one head per slice and no further than partial_bytes of workspace hold. */
typedef struct zoe_attention_dkv_split {
    int64_t slices, heads;
} zoe_attention_dkv_split;
zoe_attention_dkv_split zoe_attention_dkv_split_of(int64_t B, int64_t T, int64_t NKV, int64_t group,
                                                   int64_t HS, int rows, int sms,
                                                   int64_t partial_bytes);
/* Blocks of the dk/dv grid with that split. */
int64_t zoe_attention_dkv_blocks(int64_t B, int64_t T, int64_t NKV, int rows,
                                 zoe_attention_dkv_split split);

/* ---- the GEMM path (kernels/cuda/attention_gemm.cu) ---- */

/* One pass over a block of the scores: `heads` consecutive query heads (inside one KV group,
 * or whole groups) and `rows` consecutive query rows against the keys causality lets them see,
 * each score row `ld` elements apart. Its scratch is heads * rows * ld * ZOE_ATTN_GEMM_BYTES. */
typedef struct zoe_attention_gemm_pass {
    int64_t heads, rows, ld;
} zoe_attention_gemm_pass;
/* Bytes per score: S and dP in fp32, P and dS in the 16-bit storage dtype. */
#define ZOE_ATTN_GEMM_BYTES 12
/* The scratch the GEMM path is given at most. */
#define ZOE_ATTN_GEMM_BUDGET ((int64_t)256 << 20)
/* The largest pass scratch_bytes holds: all rows and as many heads as fit, else one head and
 * as many rows as fit (so any sequence runs). rows 0: not even one score row fits. */
zoe_attention_gemm_pass zoe_attention_gemm_pass_of(int64_t T, int64_t NH, int64_t group,
                                                   int64_t scratch_bytes);

/* ---- workspace ---- */

/* The CUDA workspace's attention regions for the plan's largest shapes: the GEMM path's scores
 * (ZOE_ATTN_GEMM_BUDGET at most) and the dk/dv split's partial sums (ZOE_ATTN_DKV_BUDGET). */
#define ZOE_ATTN_DKV_BUDGET ((int64_t)32 << 20)
int64_t zoe_attention_gemm_scratch_bytes(int64_t max_seq, int64_t max_heads);
int64_t zoe_attention_dkv_partial_bytes(int64_t max_rows, int64_t max_heads, int64_t max_head_dim);

/* ---- what runs, for the plan ---- */

/* The work of one attention call (one layer, one micro-batch) as the chosen kernels execute it:
 * FLOPs on the tensor cores and on the CUDA cores (fp32), and bytes the GEMM path moves through
 * device memory for its scores. */
typedef struct zoe_attention_cost {
    zoe_attention_path path;
    int rows;                      /* flash: own rows per block (0 on the GEMM path) */
    zoe_attention_dkv_split split; /* flash backward */
    double tensor_flops, cuda_flops, bytes;
} zoe_attention_cost;
typedef struct zoe_attention_shape {
    zoe_dtype dt;
    int64_t B, T, NH, NKV, HS;
} zoe_attention_shape;
/* The cost of pass on gpu for shape, the workspace planned for max_rows, max_seq, max_heads
 * and max_head_dim of shape itself. */
zoe_attention_cost zoe_attention_cost_of(zoe_attention_pass pass, const zoe_attention_shape *s,
                                         const zoe_attention_gpu *gpu, int force_flash);
/* Share of the fp32 peak the flash kernels reach with `rows` own rows on a GPU of compute
 * capability cc (a model of their instruction mix; see attention_plan.c). */
double zoe_attention_flash_efficiency(int rows, int cc);

#ifdef __cplusplus
}
#endif
#endif
