/* The boxes zoe plans for, each figure with its source, and `local`: this machine, probed.
 *
 * Explained in docs/plan.md, "Time: a model with stated figures". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include "engine/plan/plan_impl.h"
#include "kernels/kernels.h"
#include "runtime/clock.h"
#include "runtime/proc_file.h"
#include "runtime/error.h"
#include "zoe/gpu.h"
#include "zoe/plan.h"
#include "zoe/topology.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
#define TIB (1024.0 * GIB)

/* Streaming (STREAM-class) code reaches about 75% of the DIMMs' peak on two-socket servers; the
 * peak is channels x transfer rate x 8 bytes. NCCL's all-reduce reaches about 80% of the
 * NVLink bandwidth into the switch (nccl-tests' bus bandwidth). Pinned copies reach about 80%
 * of a PCIe x16 link's rate (CUDA's bandwidthTest). */
#define STREAM_SHARE 0.75
#define NCCL_SHARE   0.80
#define PCIE_SHARE   0.80
/* A GPU rank's host memory before its first allocation: the CUDA context, cuBLAS, NCCL and MPI
 * (an estimate; a CUDA context alone takes a few hundred MiB of host memory). */
#define GPU_RANK_BASE (1.0 * GIB)
/* A streaming kernel reaches about 80% of a GPU's device-memory peak (BabelStream on V100,
 * A100 and H100). */
#define HBM_SHARE 0.80
/* A CPU rank's base, in two parts. What it holds once MPI is up and before it allocates: the
 * resident memory of zoe-train, measured there (zoe_hardware_measure_rank_base) and stated here
 * for the plans made outside a rank (zoe-plan), as this 2-core VM measured it (16.5 MiB at 1 and
 * 3 ranks: test_plan_memory's "base"). And what every rank maps later besides the buffers the
 * plan sizes (OpenBLAS's per-thread buffers on its first GEMM, Open MPI's shared-memory queues on
 * its first messages): its peak resident memory less the plan's buffers and the first part,
 * 3.5 MiB at 1 and 3 ranks of the demo (mpirun -np 3 build/tests/plan/test_plan_memory demo 0
 * 64 8 fp32 0 1, before this allowance). */
#define CPU_RANK_INIT_BYTES (16.5 * 1024 * 1024)
#define CPU_RANK_LATE_BYTES (3.5 * 1024 * 1024)

/* One core's host Adam arithmetic, nanoseconds per parameter with the data in cache, by the
 * layouts of bench/cpu_adam.c: fp32 state with the weights as master (fp32), then a bf16 copy of
 * the weights written besides (bf16_weights), then bf16 master, m and v (bf16_state: the
 * compressed path, its per-element hash and stochastic stores), then int8 m and v in place of
 * the bf16 ones (int8_state). Measured on the 2-core development VM (AMD EPYC, Zen 4, the
 * AVX512_BF16 path) on 2026-12-03, quiet (load average below 1.5), the smallest of 12 runs of
 *   OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1 build/bench/bench_cpu_adam 32768 200 --no-naive
 *     --mode MODE
 * (its cached_ns_per_param: CPU time, the fastest batch; the median whole step of the same runs,
 * step_cpu_median_ms / 32768, is 2-16% more). Other cores differ: a Skylake or Sapphire Rapids core
 * on the AVX-512 path is assumed within 2x of these; an AVX2-only core (Zen 2, the DGX A100's EPYC
 * 7742) runs the int8 quantisers about 2x slower (docs/offload.md, "Host Adam speed"). The plan
 * applies these to every box: docs/plan.md says how far that holds. */
/* The drives. A data-centre NVMe drive's published sequential rates are "up to" figures for
 * 128 KiB or larger transfers at a deep queue; O_DIRECT transfers of that size at depth are
 * assumed to reach 90% of them (the nvme benchmark, scripts/bench nvme, measures the engine's
 * share against fio on the machine it runs on). Capacities are decimal, as drives are sold.
 * The drives of each box: docs/plan.md, "Drives". */
#define DRIVE_SHARE 0.90
#define TB          1e12
/* DGX-2 datasheet: "Internal storage: 30 TB (8 x 3.84 TB) NVMe SSDs". It does not name the
 * drive: assumed a PCIe 3.0 x4 data-centre drive of its generation, Samsung's PM983 U.2 3.84 TB
 * (product brief: 3,200 MB/s sequential read, 2,000 MB/s write). */
#define DGX2_DRIVES_SOURCE                                                                         \
    "DGX-2 datasheet: 8 x 3.84 TB NVMe; each assumed a PCIe 3.0 data-centre drive (Samsung "       \
    "PM983 U.2: 3.2 GB/s read, 2.0 GB/s write, published), at 90% of those"
#define PCIE3_DRIVE_READ  (DRIVE_SHARE * 3.2e9)
#define PCIE3_DRIVE_WRITE (DRIVE_SHARE * 2.0e9)
/* DGX A100 and DGX H100 datasheets: "Internal storage: 30 TB (8 x 3.84 TB) U.2 NVMe" (the
 * data cache; the OS is on two M.2 drives apart). The drive is not named: assumed a PCIe 4.0
 * U.2 data-centre drive, Samsung's PM1733 3.84 TB (6,400 MB/s sequential read, 3,800 MB/s
 * write, as Samsung announced it). */
#define PCIE4_DRIVE_READ  (DRIVE_SHARE * 6.4e9)
#define PCIE4_DRIVE_WRITE (DRIVE_SHARE * 3.8e9)
#define PCIE4_DRIVES_SOURCE(box)                                                                   \
    box " datasheet: 8 x 3.84 TB U.2 NVMe (the data cache); each assumed a PCIe 4.0 data-centre "  \
        "drive (Samsung PM1733 U.2: 6.4 GB/s read, 3.8 GB/s write, published), at 90% of those"

#define ADAM_NS_FP32         0.139
#define ADAM_NS_BF16_WEIGHTS 0.158
#define ADAM_NS_BF16_STATE   0.312
#define ADAM_NS_INT8_STATE   1.060

double zoe_plan_adam_ns_per_param(zoe_dtype master, zoe_dtype exp_avg, zoe_dtype exp_avg_sq,
                                  int weights_out_16bit) {
    const int compressed = master != ZOE_F32 || exp_avg != ZOE_F32 || exp_avg_sq != ZOE_F32;
    const int int8_moments = (exp_avg == ZOE_I8) + (exp_avg_sq == ZOE_I8);
    /* Each step of the layouts above adds its cost to the last; an int8 moment costs half of
     * what two cost, and the compressed path the same whatever mix of fp32 and bf16 arrays it
     * holds (its cost is the hash, computed once per element). A gradient partition in the
     * compute dtype is widened by a shift: not counted. */
    return ADAM_NS_FP32 + (weights_out_16bit ? ADAM_NS_BF16_WEIGHTS - ADAM_NS_FP32 : 0.0) +
           (compressed ? ADAM_NS_BF16_STATE - ADAM_NS_BF16_WEIGHTS : 0.0) +
           int8_moments * (ADAM_NS_INT8_STATE - ADAM_NS_BF16_STATE) / 2.0;
}

#define V100_FRACTION_SOURCE                                                                       \
    "Megatron-LM (Shoeybi et al. 2019): one V100 sustains 39 TFLOPS training a 1.2B GPT-2, 30% "   \
    "of peak"
#define H100_FRACTION_SOURCE                                                                       \
    "The Llama 3 herd of models (Dubey et al. 2024): 38-43% BF16 model FLOPs utilisation on "      \
    "H100s"

static const zoe_hardware presets[] = {
    {.name = "dgx2",
     .description = "NVIDIA DGX-2: 16 x V100-SXM3-32GB on NVSwitch (6 NVLink2 x 25 GB/s per GPU), "
                    "1.5 TB host memory, 2 x 24-core Xeon Platinum 8168 with 6 channels of "
                    "DDR4-2666 each, two GPUs per PCIe 3.0 x16 switch uplink (DGX-2 datasheet "
                    "and system architecture whitepaper)",
     .backend = ZOE_BACKEND_CUDA,
     .dtype = ZOE_F16,
     .gpus = 16,
     .gpu_bytes = 32 * GIB,
     .gpu_fraction = 39.0 / 125.0,
     .gpu_fraction_source = V100_FRACTION_SOURCE,
     /* V100 datasheet: 900 GB/s HBM2; the chip's peaks: runtime/gpu_spec.c */
     .gpu_cc = 70,
     .gpu_memory_bandwidth = HBM_SHARE * 900e9,
     .host_bytes = 1.5 * TIB,
     .host_reserve = 0.10,
     .host_cores = 48,
     .host_bandwidth = STREAM_SHARE * 2 * 6 * 2666e6 * 8,
     .pcie_bandwidth = PCIE_SHARE * 15.75e9,
     .gpus_per_link = 2,
     .nvlink_bandwidth = NCCL_SHARE * 150e9,
     .rank_base_bytes = GPU_RANK_BASE,
     .drives = 8,
     .drive_bytes = 3.84 * TB,
     .drive_read_bandwidth = PCIE3_DRIVE_READ,
     .drive_write_bandwidth = PCIE3_DRIVE_WRITE,
     .drive_source = DGX2_DRIVES_SOURCE},
    {.name = "dgx-a100-80g",
     .description = "NVIDIA DGX A100 640GB: 8 x A100-SXM4-80GB on NVSwitch (12 NVLink3 x 25 GB/s "
                    "per GPU), 2 TB host memory, 2 x 64-core EPYC 7742 with 8 channels of "
                    "DDR4-3200 each, two GPUs per PCIe 4.0 x16 switch uplink (DGX A100 datasheet)",
     .backend = ZOE_BACKEND_CUDA,
     .dtype = ZOE_BF16,
     .gpus = 8,
     .gpu_bytes = 80 * GIB,
     .gpu_fraction = 0.52,
     .gpu_fraction_source = "Narayanan et al. 2021 (Megatron-LM on 3072 A100s): 163 TFLOPS per "
                            "GPU, 52% of peak",
     /* A100 datasheet: 2039 GB/s HBM2e */
     .gpu_cc = 80,
     .gpu_memory_bandwidth = HBM_SHARE * 2039e9,
     .host_bytes = 2.0 * TIB,
     .host_reserve = 0.10,
     .host_cores = 128,
     .host_bandwidth = STREAM_SHARE * 2 * 8 * 3200e6 * 8,
     .pcie_bandwidth = PCIE_SHARE * 31.5e9,
     .gpus_per_link = 2,
     .nvlink_bandwidth = NCCL_SHARE * 300e9,
     .rank_base_bytes = GPU_RANK_BASE,
     .drives = 8,
     .drive_bytes = 3.84 * TB,
     .drive_read_bandwidth = PCIE4_DRIVE_READ,
     .drive_write_bandwidth = PCIE4_DRIVE_WRITE,
     .drive_source = PCIE4_DRIVES_SOURCE("DGX A100")},
    {.name = "dgx-h100",
     .description = "NVIDIA DGX H100: 8 x H100-SXM5-80GB on NVSwitch (18 NVLink4 x 25 GB/s per "
                    "GPU), 2 TB host memory, 2 x 56-core Xeon Platinum 8480C with 8 channels of "
                    "DDR5-4800 each, PCIe 5.0 x16 links (two GPUs per link assumed, as on DGX-2 "
                    "and DGX A100) (DGX H100 datasheet)",
     .backend = ZOE_BACKEND_CUDA,
     .dtype = ZOE_BF16,
     .gpus = 8,
     .gpu_bytes = 80 * GIB,
     .gpu_fraction = 0.40,
     .gpu_fraction_source = H100_FRACTION_SOURCE,
     /* H100 SXM datasheet: 3.35 TB/s HBM3 */
     .gpu_cc = 90,
     .gpu_memory_bandwidth = HBM_SHARE * 3350e9,
     .host_bytes = 2.0 * TIB,
     .host_reserve = 0.10,
     .host_cores = 112,
     .host_bandwidth = STREAM_SHARE * 2 * 8 * 4800e6 * 8,
     .pcie_bandwidth = PCIE_SHARE * 63e9,
     .gpus_per_link = 2,
     .nvlink_bandwidth = NCCL_SHARE * 450e9,
     .rank_base_bytes = GPU_RANK_BASE,
     .drives = 8,
     .drive_bytes = 3.84 * TB,
     .drive_read_bandwidth = PCIE4_DRIVE_READ,
     .drive_write_bandwidth = PCIE4_DRIVE_WRITE,
     .drive_source = PCIE4_DRIVES_SOURCE("DGX H100")},
    {.name = "h200",
     .description = "one H200 141GB (140 GiB usable, as nvidia-smi reports 143771 MiB) on its "
                    "own PCIe 5.0 x16 link, a 16-core host with 128 GiB (its memory bandwidth "
                    "assumed: 100 GB/s, a 16-core share of a DDR5 server)",
     .backend = ZOE_BACKEND_CUDA,
     .dtype = ZOE_BF16,
     .gpus = 1,
     .gpu_bytes = 140 * GIB,
     .gpu_fraction = 0.40,
     .gpu_fraction_source = H100_FRACTION_SOURCE " (the H200 is the same GH100 chip)",
     /* H200 datasheet: 4.8 TB/s HBM3e */
     .gpu_cc = 90,
     .gpu_memory_bandwidth = HBM_SHARE * 4800e9,
     .host_bytes = 128 * GIB,
     .host_reserve = 0.10,
     .host_cores = 16,
     .host_bandwidth = 100e9,
     .pcie_bandwidth = PCIE_SHARE * 63e9,
     .gpus_per_link = 1,
     .nvlink_bandwidth = NCCL_SHARE * 450e9,
     .rank_base_bytes = GPU_RANK_BASE,
     /* a single-GPU machine's drives are its own: one, assumed */
     .drives = 1,
     .drive_bytes = 3.84 * TB,
     .drive_read_bandwidth = PCIE4_DRIVE_READ,
     .drive_write_bandwidth = PCIE4_DRIVE_WRITE,
     .drive_source = "assumed: one 3.84 TB PCIe 4.0 data-centre drive (Samsung PM1733 U.2: "
                     "6.4 GB/s read, 3.8 GB/s write, published), at 90% of those; --drives, "
                     "--drive-tb, --drive-read-gbs, --drive-write-gbs give the machine's own"},
};
enum { NUM_PRESETS = sizeof presets / sizeof presets[0] };

/* The boxes described as a change of another: one GPU of a DGX-2 alone on its host, as the
 * ZeRO-Offload paper's single-GPU runs. */
static zoe_hardware v100_32g(void) {
    zoe_hardware hw = presets[0]; /* dgx2 */
    snprintf(hw.name, sizeof hw.name, "v100-32g");
    hw.description = "one V100-SXM3-32GB alone on a DGX-2's host (as the ZeRO-Offload paper's "
                     "single-GPU runs): 1.5 TB, 2 x 24-core Xeon Platinum 8168, its own PCIe 3.0 "
                     "x16 link";
    hw.gpus = 1;
    hw.gpus_per_link = 1;
    /* the DGX-2's eight drives, all serving the one GPU's rank */
    hw.drive_source = DGX2_DRIVES_SOURCE ", all eight for the one GPU";
    return hw;
}

static const char *const other_names[] = {"v100-32g", "local"};

int zoe_hardware_preset_count(void) {
    return NUM_PRESETS + 2;
}

const char *zoe_hardware_preset_name(int index) {
    if (index >= 0 && index < NUM_PRESETS) return presets[index].name;
    return index >= NUM_PRESETS && index < NUM_PRESETS + 2 ? other_names[index - NUM_PRESETS]
                                                           : NULL;
}

/* A /proc/meminfo figure ("MemTotal", "MemAvailable") in bytes; 0 when absent. */
static double meminfo_bytes(const char *key) {
    const double kib = zoe_proc_kib("/proc/meminfo", key);
    return kib < 0 ? 0 : kib * 1024.0;
}

/* Bytes per second read plus written by a copy of a 64 MiB array, best of three. */
static double probe_bandwidth(void) {
    size_t n = (size_t)64 << 20;
    char *a = malloc(n), *b = malloc(n);
    double best = 0;
    if (a && b) {
        memset(a, 1, n), memset(b, 2, n);
        for (int rep = 0; rep < 3; rep++) {
            double t0 = zoe_clock_seconds();
            memcpy(b, a, n);
            double dt = zoe_clock_seconds() - t0;
            if (dt > 0 && 2.0 * n / dt > best) best = 2.0 * n / dt;
            a[rep] = b[n - 1 - rep]; /* keep the copy observable */
        }
    }
    free(a), free(b);
    return best;
}

/* FLOP/s of the CPU kernels' fp32 matmul on [512 x 1024] . [1024 x 1024]^T, best of three. */
static zoe_status probe_matmul(double *flops) {
    const int64_t M = 512, K = 1024, N = 1024;
    zoe_device *dev = NULL;
    zoe_stream *stream = NULL;
    zoe_kernels *k = NULL;
    float *x = calloc((size_t)(M * K), sizeof(float)), *w = calloc((size_t)(N * K), sizeof(float));
    float *y = calloc((size_t)(M * N), sizeof(float));
    zoe_status st = x && w && y ? ZOE_OK : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "matmul probe");
    if (st == ZOE_OK) st = zoe_device_create(ZOE_BACKEND_CPU, 0, &dev);
    if (st == ZOE_OK) st = zoe_stream_create(dev, &stream);
    zoe_kernel_plan plan = {
        .max_rows = M, .max_dim = N, .max_seq = 1, .max_heads = 1, .max_head_dim = 1};
    if (st == ZOE_OK) st = zoe_kernels_create(dev, stream, &plan, &k);
    double best = 0;
    for (int64_t i = 0; st == ZOE_OK && i < M * K; i++) x[i] = (float)(i % 7) * 0.01f;
    for (int64_t i = 0; st == ZOE_OK && i < N * K; i++) w[i] = (float)(i % 5) * 0.01f;
    for (int rep = 0; st == ZOE_OK && rep < 3; rep++) {
        double t0 = zoe_clock_seconds();
        st = zoe_matmul_forward(k, ZOE_F32, y, x, w, NULL, M, K, N);
        double dt = zoe_clock_seconds() - t0;
        if (dt > 0 && 2.0 * M * K * N / dt > best) best = 2.0 * M * K * N / dt;
    }
    zoe_kernels_destroy(k);
    zoe_stream_destroy(stream);
    zoe_device_destroy(dev);
    free(x), free(w), free(y);
    *flops = best;
    return st;
}

zoe_status zoe_hardware_local(int probe, zoe_hardware *hw) {
    if (!hw) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "local hardware: NULL argument");
    memset(hw, 0, sizeof *hw);
    snprintf(hw->name, sizeof hw->name, "local");
    hw->description = "this machine, CPU backend: cores from hwloc, memory from /proc/meminfo, "
                      "bandwidth from a 64 MiB copy and compute from a 512x1024x1024 fp32 "
                      "matmul of the CPU kernels";
    hw->backend = ZOE_BACKEND_CPU;
    hw->dtype = ZOE_F32;
    zoe_topology *topo = NULL;
    ZOE_TRY(zoe_topology_load_host(&topo));
    hw->host_cores = zoe_topology_num_cores(topo);
    zoe_topology_destroy(topo);
    hw->host_bytes = meminfo_bytes("MemTotal");
    hw->host_free_bytes = meminfo_bytes("MemAvailable");
    if (hw->host_bytes <= 0)
        return zoe_fail(ZOE_ERR_IO, "local hardware: no MemTotal in /proc/meminfo");
    hw->host_reserve = 0.10;
    /* an MPI rank with its libraries (Open MPI, OpenBLAS, hwloc), stated; zoe-train replaces
     * the first part with its own measure (zoe_hardware_measure_rank_base) */
    hw->rank_base_bytes = CPU_RANK_INIT_BYTES + CPU_RANK_LATE_BYTES;
    /* no drives unless told (zoe-plan --drives N --drive-tb ...): a disk's rates are not
     * probed here */
    hw->drive_source = "none: --drives N, --drive-tb, --drive-read-gbs, --drive-write-gbs";
    hw->gpu_fraction = 0.70;
    hw->gpu_fraction_source = "bench/train_step: a gpt2-124m step runs at 0.65-0.77 of the same "
                              "machine's matmul rate";
    if (!probe) return ZOE_OK;
    hw->host_bandwidth = probe_bandwidth();
    ZOE_TRY(probe_matmul(&hw->gpu_peak_flops));
    /* MPI's shared-memory collectives copy through a segment: in and out at half the rate */
    hw->nvlink_bandwidth = hw->host_bandwidth / 2;
    if (hw->host_bandwidth <= 0 || hw->gpu_peak_flops <= 0)
        return zoe_fail(ZOE_ERR_INTERNAL, "local hardware: the probes measured nothing");
    return ZOE_OK;
}

/* A box's GPU figures that belong to its chip (peaks, SMs, shared memory) come from the one
 * table of GPU specs (runtime/gpu_spec.c) by the preset's compute capability; the box keeps
 * what is its own (memory, links, bandwidth, the published share of peak). */
static zoe_hardware with_chip(zoe_hardware hw) {
    zoe_gpu_spec spec;
    zoe_gpu_spec_of(hw.gpu_cc, NULL, &spec);
    hw.gpu_peak_flops = zoe_gpu_spec_peak_tflops(&spec, hw.dtype, 0) * 1e12;
    hw.gpu_fp32_flops = spec.fp32_tflops * 1e12;
    hw.gpu_sms = spec.sms;
    hw.gpu_smem_per_block = spec.smem_per_block;
    return hw;
}

zoe_status zoe_hardware_preset(const char *name, zoe_hardware *out) {
    if (!name || !out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "hardware preset: NULL argument");
    for (int i = 0; i < NUM_PRESETS; i++)
        if (strcmp(presets[i].name, name) == 0) {
            *out = with_chip(presets[i]);
            return ZOE_OK;
        }
    if (strcmp(name, "v100-32g") == 0) {
        *out = with_chip(v100_32g());
        return ZOE_OK;
    }
    if (strcmp(name, "local") == 0) return zoe_hardware_local(1, out);
    return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                    "unknown hardware '%s' (dgx2, v100-32g, dgx-a100-80g, dgx-h100, h200, local)",
                    name);
}

zoe_status zoe_hardware_measure_rank_base(zoe_hardware *hw) {
    if (!hw) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "rank base: NULL hardware");
    const double kib = zoe_proc_kib("/proc/self/status", "VmRSS");
    if (kib < 0) return zoe_fail(ZOE_ERR_IO, "rank base: no VmRSS in a readable /proc/self/status");
    hw->rank_base_bytes = kib * 1024.0 + CPU_RANK_LATE_BYTES;
    return ZOE_OK;
}

zoe_status zoe_hardware_drives_of_paths(const char *paths, zoe_hardware *hw) {
    if (!paths || !hw) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "drives of paths: NULL argument");
    int n = 0;
    double least = 0;
    for (const char *at = paths;;) {
        const char *end = strchr(at, ',');
        const size_t len = end ? (size_t)(end - at) : strlen(at);
        char dir[4096];
        if (len == 0 || len >= sizeof dir)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "--nvme-path '%s': an empty or overlong "
                            "directory",
                            paths);
        memcpy(dir, at, len), dir[len] = '\0';
        struct statvfs fs;
        if (statvfs(dir, &fs) != 0)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--nvme-path: '%s' cannot be read (statvfs)",
                            dir);
        /* each rank's file is striped evenly: the fullest path bounds them all */
        const double free_bytes = (double)fs.f_bavail * (double)fs.f_frsize;
        least = n == 0 || free_bytes < least ? free_bytes : least;
        n++;
        if (!end) break;
        at = end + 1;
    }
    hw->drives = n;
    hw->drive_bytes = least;
    hw->drive_source = "the --nvme-path directories: one drive each, the least free space among "
                       "them (statvfs); their rates not probed";
    return ZOE_OK;
}
