/* The plan as text for people, as JSON for tools, and as one line for zoe-train's log.
 *
 * Explained in docs/plan.md. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/error.h"
#include "zoe/plan.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static double gib(double bytes) {
    return bytes / GIB;
}

static const char *yes_no(int fits) {
    return fits ? "fits" : "DOES NOT FIT";
}

static int on_drives(const zoe_plan_config *c) {
    return c->version >= 4 && c->state_on_drives;
}

/* Where the weights live, in words. */
static const char *weights_home(const zoe_plan_config *c) {
    if (c->version < 3 || !c->offload_params) return "on the device";
    return c->version >= 4 && c->offload_params == ZOE_PLAN_WEIGHTS_ON_DRIVES
               ? "streamed from the drives"
               : "streamed from the host";
}

/* The drive tier: what the drives hold against their capacity, and the host rings. */
static void print_drives(FILE *out, const zoe_plan_config *c, const zoe_plan_result *r) {
    const zoe_hardware *hw = &c->hardware;
    fprintf(out, "\nDrives (%d x %.2f TB; %s):\n", hw->drives, hw->drive_bytes / 1e12,
            hw->drive_source ? hw->drive_source : "");
    fprintf(out, "  optimizer state per rank  %9.2f GiB\n", gib(r->drive.state_bytes));
    if (r->drive.weights_bytes > 0)
        fprintf(out, "  weights per rank          %9.2f GiB  (%s, apart from the master)\n",
                gib(r->drive.weights_bytes), zoe_dtype_name(c->dtype));
    fprintf(out, "  gradient per rank         %9.2f GiB  (%s)\n", gib(r->drive.grads_bytes),
            r->drive.grads && c->grads_on_drives == 1 ? "on the drives, as asked"
            : r->drive.grads                          ? "on the drives: the host cannot hold it"
            : c->grads_on_drives == 0                 ? "on the host, as asked"
                                                      : "on the host, which holds it");
    fprintf(out,
            "  total                     %9.2f TB, %d x %.3f, of %.2f available (%.2f less 5%% "
            "for the file system)   %s\n",
            r->drive.total / 1e12, r->ranks_per_node, r->drive.per_rank / 1e12,
            r->drive.available / 1e12, r->drive.capacity / 1e12, yes_no(r->drive.fits));
    fprintf(out,
            "  host rings per rank       %9.2f GiB  (%d + 1 + %d buckets of the step's state%s)\n",
            gib(r->drive.state_ring + r->drive.weights_ring), r->drive.buckets_ahead,
            r->drive.buckets_ahead, r->drive.weights_ring > 0 ? "; the weights' units" : "");
}

static void print_memory(FILE *out, const zoe_plan_config *c, const zoe_plan_result *r) {
    int cpu = c->hardware.backend == ZOE_BACKEND_CPU;
    fprintf(out, "\n%s, per rank (GiB):\n", cpu ? "Device (CPU backend: host memory)" : "Per GPU");
    if (c->version >= 3 && c->offload_params)
        fprintf(out,
                "  weights ring (%s)       %9.2f   streamed: %d + 1 layer parts of %.2f, the "
                "embedding's %.2f held%s\n",
                zoe_dtype_name(c->dtype), gib(r->gpu.weights), r->stream.prefetch,
                gib(fmax(r->stream.part_bytes, r->stream.head_bytes)),
                gib(r->stream.embedding_bytes), c->dp > 1 ? ", the DP gather's staging" : "");
    else
        fprintf(out, "  weights (%s)            %9.2f\n", zoe_dtype_name(c->dtype),
                gib(r->gpu.weights));
    fprintf(out, "  gradient bucket ring      %9.2f\n", gib(r->gpu.grad_ring));
    fprintf(out, "  optimizer on the device   %9.2f\n", gib(r->gpu.optimizer));
    fprintf(out, "  activations (%s)%*s%9.2f   [recompute %.2f, without %.2f]\n",
            c->recompute ? "recompute" : "no recompute", c->recompute ? 3 : 0, "",
            gib(r->gpu.activations), gib(r->gpu.activations_recompute),
            gib(r->gpu.activations_full));
    if (!cpu) {
        fprintf(out, "  kernel workspace          %9.2f\n", gib(r->gpu.workspace));
        fprintf(out, "  NCCL buffers (estimate)   %9.2f\n", gib(r->gpu.comm));
        fprintf(out, "  total                     %9.2f of %.2f   %s\n", gib(r->gpu.total),
                gib(r->gpu.capacity), yes_no(r->fits_gpu));
    } else {
        fprintf(out, "  total                     %9.2f   (counted in the host below)\n",
                gib(r->gpu.total));
    }
    fprintf(out, "\nPer host (%d rank%s on the box):\n", r->ranks_per_node,
            r->ranks_per_node == 1 ? "" : "s");
    double per_param = r->state_params ? 1.0 / (double)r->state_params : 0.0;
    double part = (double)r->state_params;
    fprintf(out,
            "  optimizer state per rank  %9.2f GiB  (%.2f bytes per parameter of its "
            "partition of %.*f%c; with pinned %.2f)\n",
            gib(r->host.optimizer_per_rank), r->host.optimizer_per_rank * per_param,
            part >= 1e9 ? 2 : 1, part >= 1e9 ? part / 1e9 : part / 1e6, part >= 1e9 ? 'B' : 'M',
            (r->host.optimizer_per_rank + r->host.pinned_per_rank) * per_param);
    fprintf(out, "  pinned staging per rank   %9.2f GiB\n", gib(r->host.pinned_per_rank));
    if (c->version >= 3 && c->offload_params)
        fprintf(out,
                "    of which the weights    %9.2f GiB  (%s; the box's host holds %.2f bytes per "
                "parameter of the model's share on it)\n",
                gib(r->stream.host_weights),
                c->version >= 4 && c->offload_params == ZOE_PLAN_WEIGHTS_ON_DRIVES
                    ? "on the drives, streamed through the host ring below"
                : r->stream.host_weights > 0 ? "the compute-dtype copy of the partition"
                                             : "none apart: the master is the weights",
                r->stream.host_bytes_per_param);
    fprintf(out, "  other per rank            %9.2f GiB  (rank base %.2f%s)\n",
            gib(r->host.other_per_rank), gib(c->hardware.rank_base_bytes),
            cpu ? ", device memory, workspace, MPI staging" : "");
    fprintf(out,
            "  total                     %9.2f GiB, %d x up to %.2f, of %.1f available (%.1f "
            "less %.0f%% for the OS)   %s\n",
            gib(r->host.total), r->ranks_per_node, gib(r->host.per_rank), gib(r->host.available),
            gib(r->host.capacity), 100.0 * c->hardware.host_reserve, yes_no(r->fits_host));
    if (r->fits_host)
        fprintf(out, "  spare                     %9.1f%% of host memory\n",
                100.0 * (1.0 - r->host.total / r->host.capacity));
    if (on_drives(c)) print_drives(out, c, r);
}

static void print_time(FILE *out, const zoe_plan_config *c, const zoe_plan_result *r) {
    const zoe_hardware *hw = &c->hardware;
    const int cpu = hw->backend == ZOE_BACKEND_CPU;
    if (!strcmp(r->time.bound, "not probed")) {
        fprintf(out, "\nOne step: no time model (the hardware's rates were not probed)\n");
        return;
    }
    fprintf(out, "\nOne step (%.0f tokens), seconds:\n", r->time.tokens);
    fprintf(out,
            "  compute                   %9.3f   %.3g TFLOP per GPU at %.0f%% of %.0f TFLOPS "
            "(%s)\n",
            r->time.compute, r->time.flops_per_gpu / 1e12, 100.0 * hw->gpu_fraction,
            hw->gpu_peak_flops / 1e12, hw->gpu_fraction_source);
    if (r->time.attention > 0)
        fprintf(out, "    of which attention      %9.3f   as its kernels run: %s\n",
                r->time.attention, r->time.attention_path);
    fprintf(out, "  TP all-reduces            %9.3f   at %.0f GB/s bus bandwidth\n",
            r->time.tp_comm, hw->nvlink_bandwidth / 1e9);
    fprintf(out, "  DP reduce-scatter         %9.3f   (overlaps backward)\n",
            r->time.dp_reduce_scatter);
    fprintf(out, "  DP all-gather             %9.3f\n", r->time.dp_all_gather);
    fprintf(out,
            "  PCIe out (gradients)      %9.3f   (overlaps backward; %d GPU%s per %.1f GB/s "
            "link)\n",
            r->time.pcie_out, hw->gpus_per_link, hw->gpus_per_link == 1 ? "" : "s",
            hw->pcie_bandwidth / 1e9);
    fprintf(out, "  PCIe in (weights)         %9.3f\n", r->time.pcie_in);
    fprintf(out,
            "  host Adam                 %9.3f   %s-bound: memory %.3f at %.0f GB/s host "
            "memory bandwidth, compute %.3f at %.2f ns/param per core on %d cores\n",
            r->time.host_adam, r->time.host_adam_bound, r->time.host_adam_memory,
            hw->host_bandwidth / 1e9, r->time.host_adam_compute, r->time.host_adam_ns_per_param,
            r->time.host_adam_cores);
    if (c->version >= 3 && c->offload_params) {
        fprintf(out,
                "  weights in, %-13s %9.3f   %.2f GiB per rank per step (each unit's 1/%d "
                "partition, once per forward and once per backward of each micro-batch%s)\n",
                cpu ? "host copies" : "PCIe", r->stream.pcie, gib(r->stream.pcie_bytes), c->dp,
                r->stream.refetch_bytes > 0 ? ", a layer's parts but fc2 again to recompute" : "");
        if (r->drive.stream > 0)
            fprintf(out,
                    "  weights in, drives        %9.3f   the same bytes read from the drives, "
                    "%d ranks at %.1f GB/s\n",
                    r->drive.stream, r->ranks_per_node, r->drive.read_bandwidth / 1e9);
        fprintf(out, "  weights in, DP all-gather %9.3f   %.2f GiB per rank per step\n",
                r->stream.all_gather, gib(r->stream.gather_bytes));
        fprintf(out,
                "    a layer per micro-batch: forward %.4f s, copy %.4f s (latency %.4f); "
                "prefetch %d parts%s\n",
                r->stream.layer_forward, r->stream.layer_copy, r->stream.layer_latency,
                r->stream.prefetch, r->stream.prefetch_from_plan ? " (the plan's)" : "");
        fprintf(out,
                "  weights in, exposed       %9.3f   paced by %s; copies hide from micro-batch "
                "%d%s\n",
                r->stream.exposed, r->stream.bound, r->stream.hide_micro_batch,
                r->stream.hide_micro_batch == 0 ? " (never: the CPU backend copies on its cores)"
                : r->stream.hide_fits           ? " (fits)"
                                                : " (does not fit)");
    }
    if (on_drives(c))
        fprintf(out,
                "  drives, host step         %9.3f   %.2f GiB read, %.2f GiB written per rank; "
                "%d ranks at %.1f GB/s read, %.1f GB/s write\n"
                "  drives busy               %9.3f   the host step's traffic%s\n",
                r->drive.host_step, gib(r->drive.step_read_bytes), gib(r->drive.step_write_bytes),
                r->ranks_per_node, r->drive.read_bandwidth / 1e9, r->drive.write_bandwidth / 1e9,
                r->drive.seconds, r->drive.stream > 0 ? " and the weights' reads" : "");
    fprintf(out, "  host stall without DPU    %9.3f   (%.0f%% of the synchronous step)\n",
            r->time.host_stall, 100.0 * r->time.stall_share);
    fprintf(out, "  %-25s %9.3f\n", c->dpu ? "DPU hides" : "DPU would hide", r->time.hidden_by_dpu);
    fprintf(out,
            "  step                      %9.3f   %.0f tokens/s, %.1f TFLOPS per GPU, MFU "
            "%.1f%%; %s binds\n",
            r->time.step, r->time.tokens_per_second, r->time.tflops_per_gpu, 100.0 * r->mfu,
            r->time.bound);
}

void zoe_plan_print(FILE *out, const zoe_plan_config *c, const zoe_plan_result *r) {
    const zoe_model_config *m = &c->model;
    fprintf(out, "zoe-plan: %s GPT (%d layers, hidden %d, %d heads, seq %d), %.3gB parameters\n",
            m->name, m->layers, m->hidden, m->heads, m->seq_len, (double)r->params / 1e9);
    fprintf(out, "on %s: %s\n", c->hardware.name, c->hardware.description);
    fprintf(out,
            "run: %d ranks = TP %d x DP %d (%d node%s), micro-batch %d x %d, grad-accum %d, %s, "
            "recompute %s, DPU %s, offload ratio %g, buckets %lld MiB, weights %s\n",
            r->ranks, c->tp, c->dp, r->nodes, r->nodes == 1 ? "" : "s", c->micro_batch, m->seq_len,
            c->grad_accum, zoe_dtype_name(c->dtype), c->recompute ? "on" : "off",
            c->dpu ? "on" : "off", (double)c->offload_ratio, (long long)c->bucket_mb,
            weights_home(c));
    if (on_drives(c))
        fprintf(out,
                "tiers: optimizer state on the drives, gradient partition on the %s, weights "
                "%s\n",
                r->drive.grads ? "drives" : "host", weights_home(c));
    print_memory(out, c, r);
    print_time(out, c, r);
    if (!r->fits) {
        fprintf(out, "\nThe run does not fit: %s\n", r->verdict);
        return;
    }
    fprintf(out, "\nThe run fits: ");
    if (c->hardware.backend != ZOE_BACKEND_CPU)
        fprintf(out, "GPU %.2f of %.2f GiB, ", gib(r->gpu.total), gib(r->gpu.capacity));
    fprintf(out, "host %.1f of %.1f GiB available (%.1f%% of host memory spare)",
            gib(r->host.total), gib(r->host.available),
            100.0 * (1.0 - r->host.total / r->host.capacity));
    if (on_drives(c))
        fprintf(out, ", drives %.2f of %.2f TB", r->drive.total / 1e12, r->drive.available / 1e12);
    if (strcmp(r->time.bound, "not probed"))
        fprintf(out, "; a step takes %.2f s, %s binds", r->time.step, r->time.bound);
    fprintf(out, ".\n");
}

void zoe_plan_summary(const zoe_plan_config *c, const zoe_plan_result *r, char *buf, size_t len) {
    int cpu = c->hardware.backend == ZOE_BACKEND_CPU;
    char gpu[96] = "";
    if (!cpu)
        snprintf(gpu, sizeof gpu, "GPU %.2f of %.2f GiB; ", gib(r->gpu.total),
                 gib(r->gpu.capacity));
    char step[96] = "";
    if (strcmp(r->time.bound, "not probed"))
        snprintf(step, sizeof step, "; step %.3f s predicted (%s binds)", r->time.step,
                 r->time.bound);
    char drives[96] = "";
    if (on_drives(c))
        snprintf(drives, sizeof drives, "; drives %.2f of %.2f TB available", r->drive.total / 1e12,
                 r->drive.available / 1e12);
    snprintf(buf, len,
             "plan on %s: %s; %shost %.2f of %.2f GiB available (%d rank%s, up to %.2f GiB "
             "each)%s%s",
             c->hardware.name, r->fits ? "fits" : "does not fit", gpu, gib(r->host.total),
             gib(r->host.available), r->ranks_per_node, r->ranks_per_node == 1 ? "" : "s",
             gib(r->host.per_rank), drives, step);
}

static cJSON *add_object(cJSON *parent, const char *name) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(parent, name, o);
    return o;
}

zoe_status zoe_plan_write_json(FILE *out, const zoe_plan_config *c, const zoe_plan_result *r) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "plan JSON");
    cJSON *model = add_object(root, "model");
    cJSON_AddStringToObject(model, "name", c->model.name);
    cJSON_AddNumberToObject(model, "layers", c->model.layers);
    cJSON_AddNumberToObject(model, "hidden", c->model.hidden);
    cJSON_AddNumberToObject(model, "heads", c->model.heads);
    cJSON_AddNumberToObject(model, "seq_len", c->model.seq_len);
    cJSON_AddNumberToObject(model, "vocab", c->model.vocab);
    cJSON_AddNumberToObject(model, "params", (double)r->params);
    cJSON *run = add_object(root, "run");
    cJSON_AddStringToObject(run, "hardware", c->hardware.name);
    cJSON_AddNumberToObject(run, "tp", c->tp);
    cJSON_AddNumberToObject(run, "dp", c->dp);
    cJSON_AddNumberToObject(run, "ranks_per_node", r->ranks_per_node);
    cJSON_AddNumberToObject(run, "nodes", r->nodes);
    cJSON_AddNumberToObject(run, "micro_batch", c->micro_batch);
    cJSON_AddNumberToObject(run, "grad_accum", c->grad_accum);
    cJSON_AddStringToObject(run, "dtype", zoe_dtype_name(c->dtype));
    cJSON_AddBoolToObject(run, "recompute", c->recompute);
    cJSON_AddBoolToObject(run, "dpu", c->dpu);
    cJSON_AddNumberToObject(run, "offload_ratio", c->offload_ratio);
    cJSON_AddNumberToObject(run, "bucket_mb", (double)c->bucket_mb);
    cJSON_AddNumberToObject(run, "rank_params", (double)r->rank_params);
    cJSON_AddNumberToObject(run, "state_params", (double)r->state_params);
    cJSON *gpu = add_object(root, "gpu_bytes");
    cJSON_AddNumberToObject(gpu, "weights", r->gpu.weights);
    cJSON_AddNumberToObject(gpu, "grad_ring", r->gpu.grad_ring);
    cJSON_AddNumberToObject(gpu, "optimizer", r->gpu.optimizer);
    cJSON_AddNumberToObject(gpu, "activations", r->gpu.activations);
    cJSON_AddNumberToObject(gpu, "activations_recompute", r->gpu.activations_recompute);
    cJSON_AddNumberToObject(gpu, "activations_full", r->gpu.activations_full);
    cJSON_AddNumberToObject(gpu, "workspace", r->gpu.workspace);
    cJSON_AddNumberToObject(gpu, "comm", r->gpu.comm);
    cJSON_AddNumberToObject(gpu, "total", r->gpu.total);
    cJSON_AddNumberToObject(gpu, "capacity", r->gpu.capacity);
    cJSON *host = add_object(root, "host_bytes");
    cJSON_AddNumberToObject(host, "optimizer_per_rank", r->host.optimizer_per_rank);
    cJSON_AddNumberToObject(host, "pinned_per_rank", r->host.pinned_per_rank);
    cJSON_AddNumberToObject(host, "other_per_rank", r->host.other_per_rank);
    cJSON_AddNumberToObject(host, "per_rank", r->host.per_rank);
    cJSON_AddNumberToObject(host, "total", r->host.total);
    cJSON_AddNumberToObject(host, "capacity", r->host.capacity);
    cJSON_AddNumberToObject(host, "reserve", r->host.reserve);
    cJSON_AddNumberToObject(host, "available", r->host.available);
    cJSON *t = add_object(root, "step_seconds");
    cJSON_AddNumberToObject(t, "compute", r->time.compute);
    cJSON_AddNumberToObject(t, "attention", r->time.attention);
    cJSON_AddStringToObject(t, "attention_path", r->time.attention_path);
    cJSON_AddNumberToObject(t, "tp_all_reduce", r->time.tp_comm);
    cJSON_AddNumberToObject(t, "dp_reduce_scatter", r->time.dp_reduce_scatter);
    cJSON_AddNumberToObject(t, "dp_all_gather", r->time.dp_all_gather);
    cJSON_AddNumberToObject(t, "pcie_out", r->time.pcie_out);
    cJSON_AddNumberToObject(t, "pcie_in", r->time.pcie_in);
    cJSON_AddNumberToObject(t, "host_adam", r->time.host_adam);
    cJSON_AddNumberToObject(t, "host_adam_memory", r->time.host_adam_memory);
    cJSON_AddNumberToObject(t, "host_adam_compute", r->time.host_adam_compute);
    cJSON_AddNumberToObject(t, "host_adam_ns_per_param", r->time.host_adam_ns_per_param);
    cJSON_AddNumberToObject(t, "host_adam_cores", r->time.host_adam_cores);
    cJSON_AddStringToObject(t, "host_adam_bound", r->time.host_adam_bound);
    cJSON_AddNumberToObject(t, "host_stall", r->time.host_stall);
    cJSON_AddNumberToObject(t, "stall_share", r->time.stall_share);
    cJSON_AddNumberToObject(t, "hidden_by_dpu", r->time.hidden_by_dpu);
    cJSON_AddNumberToObject(t, "step", r->time.step);
    cJSON_AddNumberToObject(t, "flops_per_gpu", r->time.flops_per_gpu);
    cJSON_AddNumberToObject(t, "tokens", r->time.tokens);
    cJSON_AddNumberToObject(t, "tokens_per_second", r->time.tokens_per_second);
    cJSON_AddNumberToObject(t, "tflops_per_gpu", r->time.tflops_per_gpu);
    cJSON_AddStringToObject(t, "bound", r->time.bound);
    cJSON_AddNumberToObject(t, "mfu", r->mfu);
    const int streamed = c->version >= 3 && c->offload_params;
    const int weights_drives = c->version >= 4 && c->offload_params == ZOE_PLAN_WEIGHTS_ON_DRIVES;
    cJSON_AddStringToObject(run, "offload_params",
                            weights_drives ? "nvme"
                            : streamed     ? "cpu"
                                           : "none");
    cJSON_AddStringToObject(run, "offload", on_drives(c) ? "nvme" : "cpu");
    if (on_drives(c)) {
        cJSON *dr = add_object(root, "drives");
        cJSON_AddNumberToObject(dr, "drives", c->hardware.drives);
        cJSON_AddNumberToObject(dr, "drive_bytes", c->hardware.drive_bytes);
        cJSON_AddBoolToObject(dr, "grads", r->drive.grads);
        cJSON_AddNumberToObject(dr, "buckets_ahead", r->drive.buckets_ahead);
        cJSON_AddNumberToObject(dr, "state_bytes", r->drive.state_bytes);
        cJSON_AddNumberToObject(dr, "weights_bytes", r->drive.weights_bytes);
        cJSON_AddNumberToObject(dr, "grads_bytes", r->drive.grads_bytes);
        cJSON_AddNumberToObject(dr, "per_rank", r->drive.per_rank);
        cJSON_AddNumberToObject(dr, "total", r->drive.total);
        cJSON_AddNumberToObject(dr, "capacity", r->drive.capacity);
        cJSON_AddNumberToObject(dr, "available", r->drive.available);
        cJSON_AddBoolToObject(dr, "fits", r->drive.fits);
        cJSON_AddNumberToObject(dr, "state_ring_bytes", r->drive.state_ring);
        cJSON_AddNumberToObject(dr, "weights_ring_bytes", r->drive.weights_ring);
        cJSON_AddNumberToObject(dr, "step_read_bytes", r->drive.step_read_bytes);
        cJSON_AddNumberToObject(dr, "step_write_bytes", r->drive.step_write_bytes);
        cJSON_AddNumberToObject(dr, "stream_read_bytes", r->drive.stream_read_bytes);
        cJSON_AddNumberToObject(dr, "read_bandwidth", r->drive.read_bandwidth);
        cJSON_AddNumberToObject(dr, "write_bandwidth", r->drive.write_bandwidth);
        cJSON_AddNumberToObject(dr, "host_step_seconds", r->drive.host_step);
        cJSON_AddNumberToObject(dr, "stream_seconds", r->drive.stream);
        cJSON_AddNumberToObject(dr, "seconds", r->drive.seconds);
    }
    if (streamed) {
        cJSON *st = add_object(root, "stream");
        cJSON_AddNumberToObject(st, "prefetch", r->stream.prefetch);
        cJSON_AddBoolToObject(st, "prefetch_from_plan", r->stream.prefetch_from_plan);
        cJSON_AddNumberToObject(st, "layer_bytes", r->stream.layer_bytes);
        cJSON_AddNumberToObject(st, "embedding_bytes", r->stream.embedding_bytes);
        cJSON_AddNumberToObject(st, "part_bytes", r->stream.part_bytes);
        cJSON_AddNumberToObject(st, "refetch_bytes", r->stream.refetch_bytes);
        cJSON_AddNumberToObject(st, "ring_bytes", r->stream.ring);
        cJSON_AddNumberToObject(st, "host_weights_bytes", r->stream.host_weights);
        cJSON_AddNumberToObject(st, "host_bytes_per_param", r->stream.host_bytes_per_param);
        cJSON_AddNumberToObject(st, "pcie_bytes", r->stream.pcie_bytes);
        cJSON_AddNumberToObject(st, "gather_bytes", r->stream.gather_bytes);
        cJSON_AddNumberToObject(st, "pcie_seconds", r->stream.pcie);
        cJSON_AddNumberToObject(st, "all_gather_seconds", r->stream.all_gather);
        cJSON_AddNumberToObject(st, "layer_forward_seconds", r->stream.layer_forward);
        cJSON_AddNumberToObject(st, "layer_copy_seconds", r->stream.layer_copy);
        cJSON_AddNumberToObject(st, "layer_latency_seconds", r->stream.layer_latency);
        cJSON_AddNumberToObject(st, "exposed_seconds", r->stream.exposed);
        cJSON_AddNumberToObject(st, "hide_micro_batch", r->stream.hide_micro_batch);
        cJSON_AddBoolToObject(st, "hide_fits", r->stream.hide_fits);
        cJSON_AddStringToObject(st, "bound", r->stream.bound);
    }
    cJSON_AddBoolToObject(root, "fits_gpu", r->fits_gpu);
    cJSON_AddBoolToObject(root, "fits_host", r->fits_host);
    cJSON_AddBoolToObject(root, "fits", r->fits);
    cJSON_AddStringToObject(root, "verdict", r->verdict);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "plan JSON text");
    fprintf(out, "%s\n", text);
    free(text);
    return ZOE_OK;
}
