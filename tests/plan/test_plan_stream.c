/* Streamed weights in the plan (issue 35, item 4; docs/plan.md, "Streamed weights"): every new
 * term worked out again here from the model's shape and the box's stated rates, not from the
 * plan's own pieces.
 *   - sizes: a GPT layer's TP shard holds 12 h^2 / t + 7 h / t + 6 h parameters (QKV and fc1
 *     split by columns with their biases, proj and fc2 by rows with their biases whole, two
 *     LayerNorms), the embedding (the LM head: the same tensor) padded_vocab / t x h, the
 *     position table T x h and the final LayerNorm 2 h; the ring cycles through a layer's parts
 *     (tensor_parallel/layers.h), the largest of which is the MLP's input: ln_2 (2 h) and fc1
 *     (4 h^2 / t + 4 h / t); the device holds, where it held the weights, prefetch + 1 of those
 *     parts, the embedding's own buffer (held through a pass, as offload/param_stream.h does)
 *     and over DP a staging buffer of the larger unit; nothing else changes on it;
 *   - the host: the compute-dtype copy of the rank's partition in page-locked memory, none where
 *     the master is bf16 and the compute dtype bf16 (fp16 weights are never a bf16 master's
 *     bits); on the CPU backend, the plan's host bytes against a real optimizer's;
 *   - the copies: per step, grad_accum x (2 passes x (L layers + the embedding) + the L layers'
 *     parts the recomputation fetches again, all but fc2's 4 h^2 / t + h), over d for PCIe, x (d -
 * 1) / d for the all-gather; a unit's pace the slower of its two links, its latency both; the
 * prefetch the fewest units whose forward compute covers a layer's latency; the embedding's fetch
 * exposed in every pass; the exposed time and the micro-batch from which the forward hides the
 * layers' copies, from Megatron-LM's FLOPs per token (24 h^2 + 4 T h a layer's forward, 2 h V the
 * head's) at the box's share of peak. Attention is priced as matmuls here (gpu_cc 0), so that the
 * FLOPs alone give the compute. Tolerances: the sizes are integers in doubles, equal exactly; the
 * times are the same sums in another order, within 1e-9 relative. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/config/sizing.h"
#include "engine/train/trainer_impl.h"
#include "max_model_testing.h"
#include "testing.h"
#include "zoe/plan.h"
#include "zoe/train.h"

static double rel(double a, double b) {
    return fabs(a - b) / fmax(fabs(b), 1e-300);
}

static zoe_plan_config box(const char *model, const char *hardware, int tp, int dp, int mb) {
    zoe_plan_config p;
    zoe_plan_config_init(&p);
    CHECK_OK(zoe_model_preset(model, &p.model));
    CHECK_OK(zoe_hardware_preset(hardware, &p.hardware));
    p.hardware.gpu_cc = 0; /* attention as matmuls: compute is FLOPs over the rate */
    p.tp = tp, p.dp = dp, p.micro_batch = mb, p.recompute = 1;
    p.dtype = p.hardware.dtype;
    p.offload_params = 1;
    return p;
}

/* The plan of p against the sums worked out here. */
static void check_stream(const char *what, zoe_plan_config p) {
    zoe_plan_result r, resident;
    if (!CHECK_OK(zoe_plan(&p, &r))) return;
    zoe_plan_config q = p;
    q.offload_params = 0;
    if (!CHECK_OK(zoe_plan(&q, &resident))) return;
    const zoe_hardware *hw = &p.hardware;
    const double h = p.model.hidden, t = p.tp, d = p.dp, T = p.model.seq_len, V = p.model.vocab;
    const double L = p.model.layers, B = p.micro_batch, k = p.grad_accum;
    const double esz = p.dtype == ZOE_F32 ? 4 : 2;
    const double m = t * ceil(128.0 / t), padded = ceil(V / m) * m;
    const double layer = (12 * h * h / t + 7 * h / t + 6 * h) * esz;
    const double emb = (padded / t * h + T * h + 2 * h) * esz;
    const double part = (4 * h * h / t + 4 * h / t + 2 * h) * esz;
    const double refetch = layer - (4 * h * h / t + h) * esz;
    CHECK(r.stream.layer_bytes == layer && r.stream.embedding_bytes == emb &&
              r.stream.part_bytes == part && r.stream.refetch_bytes == refetch,
          "%s: layer %.0f bytes (expected %.0f), embedding %.0f (expected %.0f), part %.0f "
          "(expected %.0f), fetched again %.0f (expected %.0f)",
          what, r.stream.layer_bytes, layer, r.stream.embedding_bytes, emb, r.stream.part_bytes,
          part, r.stream.refetch_bytes, refetch);
    const double ring = (r.stream.prefetch + 1) * part + emb + (d > 1 ? fmax(part, emb) : 0);
    CHECK(r.stream.ring == ring && r.gpu.weights == ring,
          "%s: ring %.0f, weights %.0f, expected %.0f", what, r.stream.ring, r.gpu.weights, ring);
    /* The gradient ring by bytes (docs/offload.md, "The gradient ring"; its bytes against the
     * allocation: test_optimizer_memory) instead of the resident run's slots of the largest
     * tensor: a block's buckets, wte's and one more take less than 3 + a block's worth of fc1s. */
    CHECK(r.gpu.grad_ring < resident.gpu.grad_ring,
          "%s: gradient ring %.0f bytes streamed, %.0f resident", what, r.gpu.grad_ring,
          resident.gpu.grad_ring);
    CHECK(rel(r.gpu.total, resident.gpu.total - resident.gpu.weights - resident.gpu.grad_ring +
                               ring + r.gpu.grad_ring) < 1e-12,
          "%s: device %.0f, expected the resident %.0f less its weights %.0f and gradient ring "
          "%.0f plus the rings",
          what, r.gpu.total, resident.gpu.total, resident.gpu.weights, resident.gpu.grad_ring);
    /* bf16 weights are a bf16 master's own bits, fp16 weights (a V100) their exact conversion:
     * either way the master is the weights */
    const int master_is_weights = p.main_params_dtype == ZOE_STATE_BF16 && p.dtype != ZOE_F32;
    const double host_weights = master_is_weights ? 0 : (double)r.state_params * esz;
    /* Besides the copy, the host holds what it held, less the pinned buffers streaming leaves
     * out (the copy-out ring, the partition's staging): between none and all of the pinned. */
    const double held = r.host.optimizer_per_rank + r.host.pinned_per_rank - host_weights;
    const double was = resident.host.optimizer_per_rank + resident.host.pinned_per_rank;
    CHECK(r.stream.host_weights == host_weights && held <= was &&
              held >= was - resident.host.pinned_per_rank,
          "%s: host weights %.0f (expected %.0f), host besides %.0f (resident %.0f, of which "
          "pinned %.0f)",
          what, r.stream.host_weights, host_weights, held, was, resident.host.pinned_per_rank);
    /* the copies */
    int sharing = hw->gpus_per_link < p.tp * p.dp ? hw->gpus_per_link : p.tp * p.dp;
    const double link = hw->pcie_bandwidth / sharing, nv = hw->nvlink_bandwidth;
    const double lp = layer / d / link, lg = d > 1 ? layer * (d - 1) / d / nv : 0;
    const double ep = emb / d / link, eg = d > 1 ? emb * (d - 1) / d / nv : 0;
    const double pcie_bytes = k * (2 * (L * layer + emb) + L * refetch) / d;
    CHECK(rel(r.stream.pcie_bytes, pcie_bytes) < 1e-12 &&
              rel(r.stream.pcie, pcie_bytes / link) < 1e-9 &&
              (d == 1 ? r.stream.gather_bytes == 0
                      : rel(r.stream.gather_bytes, pcie_bytes * (d - 1)) < 1e-12),
          "%s: PCIe %.0f bytes %.6f s, gather %.0f bytes (expected %.0f, %.6f s)", what,
          r.stream.pcie_bytes, r.stream.pcie, r.stream.gather_bytes, pcie_bytes, pcie_bytes / link);
    CHECK(rel(r.stream.layer_copy, fmax(lp, lg)) < 1e-9 &&
              rel(r.stream.layer_latency, lp + lg) < 1e-9,
          "%s: a layer's copy %.6f latency %.6f, expected %.6f %.6f", what, r.stream.layer_copy,
          r.stream.layer_latency, fmax(lp, lg), lp + lg);
    /* compute from the FLOPs: a layer's forward, the head's */
    const double rate = hw->gpu_peak_flops * hw->gpu_fraction;
    const double layer_fwd = B * T * (24 * h * h + 4 * T * h) / t / rate;
    const double head_fwd = B * T * 2 * h * V / t / rate;
    CHECK(rel(r.stream.layer_forward, layer_fwd) < 1e-9,
          "%s: a layer's forward %.6f s, expected %.6f", what, r.stream.layer_forward, layer_fwd);
    const int prefetch = (int)fmax(1, ceil((lp + lg) / fmax(layer_fwd, fmax(lp, lg)) - 1e-9));
    CHECK(r.stream.prefetch == prefetch && r.stream.prefetch_from_plan,
          "%s: prefetch %d, expected %d", what, r.stream.prefetch, prefetch);
    const double pass = L * fmax(fmax(lp, lg), (lp + lg) / prefetch);
    const double bwd_pass = pass * (1 + refetch / layer);
    const double fwd = L * layer_fwd + head_fwd, bwd = 3 * L * layer_fwd + 2 * head_fwd;
    const double exposed = k * (fmax(0, pass - fwd) + fmax(0, bwd_pass - bwd) + 2 * (ep + eg));
    CHECK(rel(r.stream.exposed, exposed) < 1e-9, "%s: exposed %.6f s, expected %.6f", what,
          r.stream.exposed, exposed);
    const int hide = (int)fmax(1, ceil(L * fmax(lp, lg) / (fwd / B) - 1e-9));
    CHECK(r.stream.hide_micro_batch == hide, "%s: copies hide from micro-batch %d, expected %d",
          what, r.stream.hide_micro_batch, hide);
    /* nothing refreshes device weights, and the exposed copies are on the step */
    CHECK(r.time.pcie_in == 0 && r.time.dp_all_gather == 0, "%s: PCIe in %.3f, all-gather %.3f",
          what, r.time.pcie_in, r.time.dp_all_gather);
    printf(
        "%-34s ring %d + 1 layer parts, %.2f GiB in all, host weights %.2f GiB/rank; per step PCIe "
        "%.2f GiB "
        "(%.3f s), exposed %.3f s of %.3f; a layer: forward %.4f s, copy %.4f s; hides from "
        "micro-batch %d; %s binds\n",
        what, r.stream.prefetch, ring / (1 << 30), host_weights / (1 << 30), pcie_bytes / (1 << 30),
        r.stream.pcie, r.stream.exposed, r.time.step, layer_fwd, fmax(lp, lg), hide, r.time.bound);
}

/* The CPU backend: the "device" is host memory, so the ring counts in the host's total; the
 * copies are memcpys at the host's bandwidth shared by its ranks, on the compute's cores, so
 * none hides: every pass exposes each unit's copy and gather in turn. An fp32 master computing in
 * fp32 is the parameter buffer (no copy); computing in bf16 it is not. */
static void check_cpu(zoe_dtype dtype, int dp) {
    zoe_plan_config p;
    zoe_plan_config_init(&p);
    CHECK_OK(zoe_model_preset("gpt2-124m", &p.model));
    CHECK_OK(zoe_hardware_local(0, &p.hardware));
    p.hardware.host_cores = 2, p.hardware.host_bandwidth = 20e9;
    p.hardware.gpu_peak_flops = 100e9, p.hardware.nvlink_bandwidth = 10e9;
    p.dtype = dtype, p.dp = dp, p.micro_batch = 2, p.recompute = 1, p.offload_params = 1;
    zoe_plan_result r, resident;
    if (!CHECK_OK(zoe_plan(&p, &r))) return;
    zoe_plan_config q = p;
    q.offload_params = 0;
    if (!CHECK_OK(zoe_plan(&q, &resident))) return;
    const double h = p.model.hidden, T = p.model.seq_len, V = p.model.vocab, L = p.model.layers;
    const double d = dp, esz = dtype == ZOE_F32 ? 4 : 2, padded = ceil(V / 128) * 128;
    const double layer = (12 * h * h + 13 * h) * esz, emb = (padded * h + T * h + 2 * h) * esz;
    const double link = p.hardware.host_bandwidth / dp, nv = p.hardware.nvlink_bandwidth;
    const double lp = layer / d / link, lg = dp > 1 ? layer * (d - 1) / d / nv : 0;
    const double ep = emb / d / link, eg = dp > 1 ? emb * (d - 1) / d / nv : 0;
    /* with recomputation the backward fetches a layer's parts but fc2 (4 h^2 + h) again */
    const double refetch = layer - (4 * h * h + h) * esz, part = (4 * h * h + 6 * h) * esz;
    const double exposed = 2 * (L * (lp + lg) + ep + eg) + L * (lp + lg) * refetch / layer;
    const double host_weights = dtype == ZOE_F32 ? 0 : (double)r.state_params * esz;
    const double ring = (r.stream.prefetch + 1) * part + emb + (dp > 1 ? fmax(part, emb) : 0);
    printf("CPU backend, %s, DP=%d: ring %.1f MiB, host weights %.1f MiB, exposed %.4f s "
           "(expected %.4f), copies hide from micro-batch %d\n",
           zoe_dtype_name(dtype), dp, ring / (1 << 20), r.stream.host_weights / (1 << 20),
           r.stream.exposed, exposed, r.stream.hide_micro_batch);
    CHECK(rel(r.stream.exposed, exposed) < 1e-9 && r.stream.hide_micro_batch == 0 &&
              r.stream.prefetch == 1,
          "CPU %s DP=%d: exposed %.6f s (expected %.6f), hides from %d", zoe_dtype_name(dtype), dp,
          r.stream.exposed, exposed, r.stream.hide_micro_batch);
    CHECK(r.stream.host_weights == host_weights && r.gpu.weights == ring,
          "CPU %s: host weights %.0f (expected %.0f), device weights %.0f (ring %.0f)",
          zoe_dtype_name(dtype), r.stream.host_weights, host_weights, r.gpu.weights, ring);
    /* the device is host memory: the host total moves by the ring less the weights, the
     * partition's compute-dtype weights on the host (fp32: the master itself), and the gradient
     * ring by bytes against the slots, on every rank */
    const double moved = dp * (ring - resident.gpu.weights + (double)r.state_params * esz +
                               r.gpu.grad_ring - resident.gpu.grad_ring);
    CHECK(rel(r.host.total, resident.host.total + moved) < 1e-12,
          "CPU %s DP=%d: host %.0f, expected the resident %.0f %+.0f", zoe_dtype_name(dtype), dp,
          r.host.total, resident.host.total, moved);
}

/* The host's weights with a bf16 master computing in bf16 or fp16, on the CPU backend: the plan
 * against a real optimizer's counted allocations (zoe_optimizer_memory), exactly (both are whole
 * byte counts), and against the rule worked out here: the master is the weights (no copy) unless
 * a stale DPU schedule (plain, predict, dc) rewrites it while the forward reads the weights, and
 * then the partition has its own 2-byte copy. The CPU backend computes in bf16, not fp16 (the plan
 * refuses fp16 there), but its optimizer holds fp16 weights as a GPU's would: the fp16 optimizer
 * is created beside the bf16 trainer's, from the same tensors and configuration, for its
 * allocations alone, and must allocate what the plan of the bf16 run says (2 bytes either way,
 * and the same rule; the CUDA plan's fp16 against bf16: check_stream's V100 rows). */
static void check_bf16_master(const char *schedule, zoe_dpu_schedule dpu_schedule,
                              zoe_dtype dtype) {
    zoe_train_config c;
    zoe_train_config_defaults(&c);
    CHECK_OK(zoe_model_preset("demo", &c.model));
    c.backend = ZOE_BACKEND_CPU, c.dtype = ZOE_BF16, c.micro_batch = 2, c.recompute = 1;
    c.main_params_dtype = ZOE_STATE_BF16;
    c.offload_params = ZOE_OFFLOAD_PARAMS_CPU;
    const int off = !strcmp(schedule, "off");
    c.dpu = off ? ZOE_DPU_OFF : ZOE_DPU_ON;
    c.dpu_warmup = off ? 0 : 1;
    c.dpu_schedule = dpu_schedule;
    const int stale = !off && dpu_schedule != ZOE_DPU_EXACT;
    zoe_hardware hw;
    CHECK_OK(zoe_hardware_local(0, &hw));
    zoe_plan_config pc;
    zoe_plan_result plan;
    zoe_trainer *tr = NULL;
    zoe_train_config planned = c;
    planned.dtype = dtype;
    if (!CHECK_OK(zoe_plan_config_from_train(&c, 1, &hw, &pc)) || !CHECK_OK(zoe_plan(&pc, &plan)) ||
        !CHECK_OK(zoe_trainer_create(MPI_COMM_SELF, &c, &tr)))
        return;
    zoe_optimizer *opt = zoe_trainer_optimizer(tr), *own = NULL;
    if (dtype != c.dtype) {
        zoe_gpt *g = zoe_trainer_gpt(tr);
        int n = zoe_gpt_num_tensors(g);
        zoe_param_tensor *tensors = calloc((size_t)n, sizeof *tensors);
        zoe_optimizer_config oc;
        zoe_train_param_tensors(g, 0, tensors);
        zoe_train_optimizer_config(&planned, g, &oc);
        CHECK_OK(zoe_optimizer_create(zoe_trainer_grid(tr), zoe_trainer_device(tr),
                                      zoe_trainer_stream(tr), dtype, tensors, n, &oc, &own));
        free(tensors);
        if (!own) {
            zoe_trainer_destroy(tr);
            return;
        }
        opt = own;
        /* the streamed weights are the master, read as bf16 and converted where they are used */
        const zoe_dtype held = zoe_optimizer_params_dtype(opt);
        CHECK(zoe_optimizer_params_on_host(opt) && held == (stale ? ZOE_F16 : ZOE_BF16),
              "fp16 DPU %s: the parameter buffer holds %s, on the host %d", schedule,
              zoe_dtype_name(held), zoe_optimizer_params_on_host(opt));
    }
    zoe_optimizer_footprint real;
    CHECK_OK(zoe_optimizer_memory(opt, &real));
    const double copy = stale ? 2.0 * (double)real.partition_numel : 0.0;
    printf("CPU bf16 master, %s weights, DPU %-7s: host weights %.0f bytes (expected %.0f), "
           "optimizer host %.0f pinned %.0f (allocated %zu, %zu)\n",
           zoe_dtype_name(dtype), schedule, plan.stream.host_weights, copy,
           plan.host.optimizer_per_rank, plan.host.pinned_per_rank, real.host_bytes,
           real.pinned_bytes);
    CHECK(plan.stream.host_weights == copy && real.params_host_bytes == copy,
          "DPU %s: host weights %.0f in the plan, %zu allocated, expected %.0f", schedule,
          plan.stream.host_weights, real.params_host_bytes, copy);
    CHECK(plan.host.optimizer_per_rank == (double)real.host_bytes &&
              plan.host.pinned_per_rank == (double)real.pinned_bytes,
          "DPU %s: plan host %.0f pinned %.0f, allocated %zu and %zu", schedule,
          plan.host.optimizer_per_rank, plan.host.pinned_per_rank, real.host_bytes,
          real.pinned_bytes);
    zoe_optimizer_destroy(own);
    zoe_trainer_destroy(tr);
}

/* The largest GPT of GPT-3's family with streamed weights at the run: it fits, the next
 * (tp more layers) does not, and the host is what stops it. Returns its parameters. */
static double largest_streamed(const char *hardware, int tp, double at_least) {
    zoe_plan_config p;
    zoe_plan_config_init(&p);
    CHECK_OK(zoe_hardware_preset(hardware, &p.hardware));
    p.tp = tp, p.dp = p.hardware.gpus / tp;
    p.dtype = p.hardware.dtype;
    p.main_params_dtype = ZOE_STATE_BF16;
    p.exp_avg_dtype = p.exp_avg_sq_dtype = ZOE_STATE_INT8;
    p.main_grads_dtype = p.dtype; /* fp16 on a V100, bf16 on an A100 */
    max_model_run(&p);
    p.offload_params = 1;
    zoe_model_config best;
    zoe_plan_result r, next;
    if (!max_model_and_next(&p, &best, &r, &next)) return 0;
    const double params = (double)r.params;
    printf("largest streamed GPT on %s at TP=%d: %d x %d, %.1fB; GPU %.1f GiB, host %.0f of %.0f "
           "GiB, %.2f host bytes per parameter; step %.1f s, %.0f tokens/s, MFU %.1f%%, %s binds; "
           "copies hide from micro-batch %d; the next (%d layers) %s\n",
           hardware, tp, best.layers, best.hidden, params / 1e9, r.gpu.total / (1 << 30),
           r.host.total / (1 << 30), r.host.available / (1 << 30), r.stream.host_bytes_per_param,
           r.time.step, r.time.tokens_per_second, 100 * r.mfu, r.time.bound,
           r.stream.hide_micro_batch, best.layers + tp, next.verdict);
    CHECK(r.fits && best.layers == best.heads && best.hidden == 128 * best.layers,
          "%s: %d x %d with %d heads, fits %d", hardware, best.layers, best.hidden, best.heads,
          r.fits);
    CHECK(!next.fits && !next.fits_host, "%s: the next member %s", hardware, next.verdict);
    CHECK(params >= at_least, "%s: %.1fB streamed, the goal %.0fB", hardware, params / 1e9,
          at_least / 1e9);
    return params;
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    /* one GPU, bf16: fp32 state (a bf16 copy on the host) and a bf16 master (none) */
    zoe_plan_config a = box("6.7b", "h200", 1, 1, 1);
    check_stream("6.7b h200 fp32 state", a);
    a.main_params_dtype = a.exp_avg_dtype = a.exp_avg_sq_dtype = ZOE_STATE_BF16;
    check_stream("6.7b h200 bf16 state", a);
    a.micro_batch = 4, a.grad_accum = 3;
    check_stream("6.7b h200 bf16 4 x 3 micro-batches", a);
    /* fp16 (V100): with an fp32 master a copy on the host, with a bf16 master none */
    zoe_plan_config v = box("13b", "v100-32g", 1, 1, 1);
    check_stream("13b v100 fp32 state", v);
    v.main_params_dtype = ZOE_STATE_BF16, v.exp_avg_dtype = v.exp_avg_sq_dtype = ZOE_STATE_INT8;
    check_stream("13b v100 int8 state", v);
    /* TP x DP on a box: the link shared by two GPUs, the all-gather over DP */
    check_stream("70b dgx-a100 TP=2 x DP=4", box("70b", "dgx-a100-80g", 2, 4, 2));
    check_stream("13b dgx2 TP=1 x DP=16", box("13b", "dgx2", 1, 16, 1));
    check_cpu(ZOE_F32, 1);
    check_cpu(ZOE_BF16, 2);
    const zoe_dtype weights[] = {ZOE_BF16, ZOE_F16};
    for (int w = 0; w < 2; w++) {
        check_bf16_master("off", ZOE_DPU_EXACT, weights[w]);
        check_bf16_master("exact", ZOE_DPU_EXACT, weights[w]);
        check_bf16_master("plain", ZOE_DPU_PLAIN, weights[w]);
        check_bf16_master("predict", ZOE_DPU_PREDICT, weights[w]);
        check_bf16_master("dc", ZOE_DPU_DC, weights[w]);
    }
    /* a prefetch given: the ring follows it, and too few units expose the latency */
    zoe_plan_config g = box("13b", "dgx2", 1, 16, 1);
    g.prefetch_layers = 7;
    zoe_plan_result r;
    if (CHECK_OK(zoe_plan(&g, &r)))
        CHECK(r.stream.prefetch == 7 && !r.stream.prefetch_from_plan &&
                  r.stream.ring == 8 * r.stream.part_bytes + r.stream.embedding_bytes +
                                       fmax(r.stream.part_bytes, r.stream.embedding_bytes),
              "prefetch 7: %d units, ring %.0f", r.stream.prefetch, r.stream.ring);
    /* refused: a share of the optimizer on the device with streamed weights */
    zoe_plan_config bad = box("13b", "h200", 1, 1, 1);
    bad.offload_ratio = 0.5f;
    CHECK(zoe_plan(&bad, &r) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "--offload-ratio 0.5"),
          "offload ratio 0.5 with streamed weights: %s", zoe_last_error());
    /* issue 35's goals at its run (int8 state, a 2-byte gradient partition, seq 2048, vocabulary
     * 50257, micro-batch 1, recompute): >= 200B on one V100-32GB, whose fp16 weights are the bf16
     * master converted on the GPU (6 host bytes per parameter, no second copy), and >= 280B on a
     * DGX A100-80GB (docs/plan.md, "Streamed weights") */
    largest_streamed("v100-32g", 1, 200e9);
    largest_streamed("dgx-a100-80g", 1, 280e9);
    return test_finish("test_plan_stream");
}
