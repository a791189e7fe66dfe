/* The GPUs a job finds: what each one is (name, compute capability, PCI bus id), what it
 * computes fast (one table of specs by capability), whether this build has code for it, and
 * which GPU each rank of a node takes. The decisions are pure functions, so that they are
 * tested on machines without GPUs; zoe_gpu_choose makes them collectively for a job.
 *
 * Explained in docs/gpus.md. */
#ifndef ZOE_GPU_H
#define ZOE_GPU_H

#include <mpi.h>
#include <stddef.h>
#include "zoe/dtype.h"
#include "zoe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "0000:07:00.0" and its NUL, with room for an 8-digit domain as nvidia-smi prints it. */
#define ZOE_GPU_BUS_ID_SIZE 20
/* The most devices of one rank that the device choice looks at (a DGX-2 has 16). */
#define ZOE_GPU_MAX_VISIBLE 64

typedef struct zoe_gpu_info {
    int ordinal;    /* among the devices this process sees (CUDA_VISIBLE_DEVICES) */
    char name[256]; /* "NVIDIA H100 80GB HBM3" (as cudaDeviceProp holds it) */
    int capability; /* 10 x major + minor: 70 V100, 80 A100, 86, 89, 90 H100/H200 */
    char bus_id[ZOE_GPU_BUS_ID_SIZE];
    double memory_bytes;
    int multiprocessors;
} zoe_gpu_info;

/* Device `ordinal` of this process. ZOE_ERR_UNSUPPORTED in a build without CUDA. */
zoe_status zoe_gpu_info_of(int ordinal, zoe_gpu_info *out);

/* What a GPU computes at its peak, dense (no sparsity), in TFLOP/s, from NVIDIA's datasheets of
 * the SXM parts (PCIe where named). has_bf16: bf16 tensor cores; has_tf32: TF32 tensor cores
 * (--tf32). A capability the table lacks gets its features from the capability and peaks 0. */
typedef struct zoe_gpu_spec {
    int capability;
    const char *name;   /* the part the figures are for, "A100-SXM4" */
    double fp16_tflops; /* tensor cores, fp32 accumulation */
    double bf16_tflops; /* 0: no bf16 tensor cores */
    double tf32_tflops; /* 0: no TF32 */
    double fp32_tflops; /* CUDA cores */
    int sms;            /* streaming multiprocessors */
    int smem_per_block; /* bytes of shared memory a block may opt into */
    int has_bf16, has_tf32;
} zoe_gpu_spec;

/* The spec of a GPU of this capability; name (may be NULL) picks a variant ("PCIe"). Returns 1
 * when the table has the capability, 0 when *out was derived from the capability alone. */
int zoe_gpu_spec_of(int capability, const char *name, zoe_gpu_spec *out);
/* Peak TFLOP/s of a matmul in dtype (fp32: TF32 tensor cores with tf32, else CUDA cores). */
double zoe_gpu_spec_peak_tflops(const zoe_gpu_spec *spec, zoe_dtype dtype, int tf32);

/* The compute dtype to train in on this GPU when the user names none: bf16 where it has bf16
 * tensor cores, else fp16 (with dynamic loss scaling). */
zoe_dtype zoe_gpu_default_dtype(const zoe_gpu_spec *spec);
/* Whether training in dtype (with --tf32 or not) suits this GPU: ZOE_ERR_INVALID_ARGUMENT with
 * one line for bf16 without bf16 tensor cores; ZOE_OK otherwise, with *warning (when n > 0) the
 * line to show for a setting that does nothing here (--tf32 before sm_80), else "". */
zoe_status zoe_gpu_check_dtype(const zoe_gpu_spec *spec, zoe_dtype dtype, int tf32, char *warning,
                               size_t n);

/* The architectures this build has code for, as CMake was given them ("80-real,90-real,
 * 90-virtual"; "" without CUDA). */
const char *zoe_gpu_built_archs(void);
/* Whether code built for `built` (CMake's CUDA architectures, ',' or ';' between entries: "80"
 * is machine code and PTX, "80-real" machine code only, "80-virtual" PTX only; "90a" code for
 * 9.0 alone, "100f" for 10.x) runs on a GPU of this capability: machine code of the same major and
 * a minor at most the GPU's, or PTX of a capability at most the GPU's (which the driver compiles).
 * Returns 1 when it runs (or when `built` says nothing checkable: "all", "native"); 0 with *why a
 * line saying what was built and how to build for this GPU. */
int zoe_gpu_code_check(int capability, const char *built, char *why, size_t n);

/* zoe_gpu_code_check of this build for this GPU: ZOE_OK, or ZOE_ERR_UNSUPPORTED with one line
 * naming the GPU (ordinal, name, PCI bus id), its capability, what was built and how to build
 * for it. zoe_device_create checks every GPU so, before anything is allocated. */
zoe_status zoe_gpu_check_build(const zoe_gpu_info *gpu);

/* What one rank of a node sees: its world rank and the PCI bus ids of its visible devices, in
 * its ordinal order. */
typedef struct zoe_gpu_rank_view {
    int rank;
    int visible;
    char bus_ids[ZOE_GPU_MAX_VISIBLE][ZOE_GPU_BUS_ID_SIZE];
} zoe_gpu_rank_view;

/* The GPU of local rank `local_rank` given what every rank of its node sees (views, indexed by
 * local rank; node names the node in messages). A rank takes among its visible devices the one
 * of its place among the ranks that see the same devices: local rank r of a node whose ranks
 * all see every GPU takes GPU r; a rank that sees one GPU takes it. The same verdict on every
 * rank of the node: ZOE_ERR_UNSUPPORTED when a rank sees no GPU, ZOE_ERR_INVALID_ARGUMENT when
 * two ranks would end on one GPU (same PCI bus id), naming both ranks and the GPU. */
zoe_status zoe_gpu_assign(const zoe_gpu_rank_view *views, int local_size, int local_rank,
                          const char *node, int *ordinal);
/* The GPUs the ranks of a node see together: distinct bus ids over views. */
int zoe_gpu_count_distinct(const zoe_gpu_rank_view *views, int local_size);

/* The job's GPUs, decided collectively over world (every rank returns the same status, with the
 * message of the lowest failing rank): this rank's device (zoe_gpu_assign over its node), its
 * properties, whether this build has code for it (zoe_gpu_code_check), the most GPUs a node's
 * ranks see together, and the GPU of lowest capability any rank took (what the job's dtype must
 * suit: every rank trains in the same one). */
typedef struct zoe_gpu_choice {
    int ordinal;
    int node_index; /* its place among the node's GPUs in PCI order (hwloc's numbering) */
    zoe_gpu_info gpu;
    int node_gpus;
    zoe_gpu_info weakest;
} zoe_gpu_choice;
zoe_status zoe_gpu_choose(MPI_Comm world, zoe_gpu_choice *out);

#ifdef __cplusplus
}
#endif
#endif
