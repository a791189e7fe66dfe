/* zoe-train: trains a GPT or Llama with TP x DP and ZeRO-Offload, from random weights or a
 * Hugging Face model (--init-from). Uses the public API only.
 *   mpirun -np 4 zoe-train --model demo --tp 2 --data data/demo-corpus.txt
 *
 * Explained in docs/train.md. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "zoe/data.h"
#include "zoe/plan.h"
#include "zoe/train.h"
#include "zoe/zoe.h"

#define EXIT_USAGE 2

/* Every rank decides alike (the configuration is the same everywhere); rank 0 speaks. */
static int fail(int rank, int code, const char *what) {
    if (rank == 0) fprintf(stderr, "zoe-train: %s\n", what);
    MPI_Finalize();
    return code;
}

/* A failure that may be one rank's own (an allocation, a file): every rank that has it says so,
 * naming itself, and the status's name stands in where no message was recorded. */
static void say_failed(int rank, zoe_status st) {
    const char *why = zoe_last_error();
    fprintf(stderr, "zoe-train: rank %d: %s\n", rank, why[0] ? why : zoe_status_string(st));
}

static void list_models(void) {
    printf("%-12s %-6s %6s %6s %8s %6s %7s %7s %9s  %-11s %s\n", "model", "family", "layers",
           "hidden", "heads/kv", "ffn", "seq", "vocab", "params", "TP x DP", "shape from");
    for (int i = 0; i < zoe_model_preset_count(); i++) {
        const zoe_model_config *m = zoe_model_preset_at(i);
        double p = (double)zoe_model_param_count(m);
        char heads[24], grids[64] = "";
        snprintf(heads, sizeof heads, "%d/%d", m->heads, m->kv_heads ? m->kv_heads : m->heads);
        for (int g = 0; g < ZOE_MODEL_MAX_GRIDS && m->grids[g].tp; g++)
            snprintf(grids + strlen(grids), sizeof grids - strlen(grids), "%s%dx%d", g ? " " : "",
                     m->grids[g].tp, m->grids[g].dp);
        printf("%-12s %-6s %6d %6d %8s %6d %7d %7d %8.*f%c  %-11s %s\n", m->name,
               zoe_model_family_name(m->family), m->layers, m->hidden, heads,
               m->ffn ? m->ffn : 4 * m->hidden, m->seq_len, m->vocab, p >= 1e9 ? 2 : 1,
               p >= 1e9 ? p / 1e9 : p / 1e6, p >= 1e9 ? 'B' : 'M', grids, m->source);
    }
}

static void print_banner(const zoe_train_config *c, const zoe_trainer *tr, int world) {
    int tp = c->tp, dp = world / tp;
    printf("zoe-train: %s %s, %.2fM parameters (%d layers, hidden %d, %d heads, seq %d, vocab "
           "%d)%s%s\n",
           c->model.name, c->model.family == ZOE_MODEL_LLAMA ? "Llama" : "GPT",
           (double)zoe_trainer_param_count(tr) / 1e6, c->model.layers, c->model.hidden,
           c->model.heads, c->model.seq_len, c->model.vocab,
           c->init_from[0] ? ", weights from " : "", c->init_from);
    int dpu = c->dpu != ZOE_DPU_OFF && c->dpu_warmup > 0;
    float ratio = c->offload == ZOE_OFFLOAD_NONE ? 0.0f : c->offload_ratio;
    char where[96];
    if (c->offload == ZOE_OFFLOAD_NVME)
        snprintf(where, sizeof where, "the host, its state%s on drives (%d read ahead)",
                 c->offload_grads == ZOE_OFFLOAD_GRADS_NVME ? " and gradients" : "",
                 c->nvme_ahead > 0 ? c->nvme_ahead : 2);
    else if (ratio >= 1.0f)
        snprintf(where, sizeof where, "the host (ZeRO-Offload)");
    else if (ratio <= 0.0f)
        snprintf(where, sizeof where, "the device");
    else
        snprintf(where, sizeof where, "the host for %.0f%%, the device for the rest",
                 100.0 * ratio);
    printf("zoe-train: %d rank%s = TP %d x DP %d, %s %s, optimizer on %s, DPU %s, global batch "
           "%d x %d tokens\n",
           world, world == 1 ? "" : "s", tp, dp, zoe_backend_name(c->backend),
           zoe_dtype_name(c->dtype), where, dpu ? "on after warm-up" : "off",
           dp * c->grad_accum * c->micro_batch, c->model.seq_len);
    if (dpu) printf("zoe-train: DPU starts after %d synchronous steps\n", c->dpu_warmup);
    printf("zoe-train: weights %s, recompute %s\n",
           c->offload_params == ZOE_OFFLOAD_PARAMS_CPU
               ? "on the host, streamed to the device layer by layer"
           : c->offload_params == ZOE_OFFLOAD_PARAMS_NVME
               ? "on the drives, streamed to the device layer by layer through a host ring"
               : "on the device",
           c->recompute ? "on" : "off");
    if (c->offload_params != ZOE_OFFLOAD_PARAMS_NONE)
        printf("zoe-train: %d layer%s fetched ahead of the one in use\n", c->prefetch_layers,
               c->prefetch_layers == 1 ? "" : "s");
    /* Open MPI's mpirun answers its own SIGTERM/SIGINT (a Ctrl-C) with SIGCONT to the ranks (a
     * stop request here), then SIGTERM and SIGKILL, odls_base_sigkill_timeout (1 s) apart: too
     * soon to finish most saves. */
    if (c->save[0] && getenv("OMPI_COMM_WORLD_SIZE") &&
        !getenv("OMPI_MCA_odls_base_sigkill_timeout"))
        printf("zoe-train: to give a save on Ctrl-C or SIGTERM to mpirun up to 2 x N seconds, run "
               "mpirun --mca odls_base_sigkill_timeout N (default 1); SIGUSR1 to mpirun needs "
               "nothing\n");
    fflush(stdout);
}

/* Ranks on this rank's host, the most over the world (every rank must plan alike). */
static int ranks_per_node(void) {
    MPI_Comm node;
    int local = 1;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &local);
    MPI_Comm_free(&node);
    MPI_Allreduce(MPI_IN_PLACE, &local, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return local;
}

/* --device-memory against the plan's device figure: a run that needs more than the cap on a
 * rank's device is refused before anything is allocated (unless --no-plan-check; the device's
 * allocator refuses the allocation that passes it then). Returns 0 to go on, or the exit code
 * after a message. */
static int check_device_cap(const zoe_train_config *cfg, const zoe_plan_result *r, int rank) {
    const double cap = (double)cfg->device_memory, mib = 1 << 20;
    if (!cfg->device_memory || cfg->no_plan_check || r->gpu.total <= cap) return 0;
    char msg[640];
    snprintf(
        msg, sizeof msg,
        "the run does not fit --device-memory=%.1f MiB (%llu bytes): the plan needs %.1f MiB "
        "(%.0f bytes) on each rank's device (weights %.1f, gradient ring %.1f, optimizer %.1f, "
        "activations %.1f, workspace %.1f, communication %.1f MiB; --no-plan-check runs it "
        "anyway)",
        cap / mib, (unsigned long long)cfg->device_memory, r->gpu.total / mib, r->gpu.total,
        r->gpu.weights / mib, r->gpu.grad_ring / mib, r->gpu.optimizer / mib,
        r->gpu.activations / mib, r->gpu.workspace / mib, r->gpu.comm / mib);
    return fail(rank, EXIT_USAGE, msg);
}

/* The plan's pinned host memory per rank against --pinned-memory and, on a GPU, RLIMIT_MEMLOCK
 * (ulimit -l) of this machine: one warning line when it pins more, as the buffers past the limit
 * are pageable then (zoe_host_alloc falls back; correct, slower copies). Writes "" when it fits. */
static void check_pinned(const zoe_train_config *cfg, const zoe_plan_result *r, char *line,
                         size_t cap) {
    const double gib = 1 << 30, pinned = r->host.pinned_per_rank;
    line[0] = 0;
    if (cfg->pinned_memory && pinned > (double)cfg->pinned_memory) {
        snprintf(line, cap,
                 "warning: the run pins %.2f GiB (%.0f bytes) of host memory on each rank, more "
                 "than --pinned-memory (%llu bytes): the buffers past it are pageable "
                 "(slower copies to and from the device)\n",
                 pinned / gib, pinned, (unsigned long long)cfg->pinned_memory);
        return;
    }
    struct rlimit rl;
    if (cfg->backend != ZOE_BACKEND_CUDA || getrlimit(RLIMIT_MEMLOCK, &rl) != 0 ||
        rl.rlim_cur == RLIM_INFINITY || pinned <= (double)rl.rlim_cur)
        return;
    snprintf(line, cap,
             "warning: the run pins %.2f GiB of host memory on each rank and RLIMIT_MEMLOCK "
             "(ulimit -l) is %.2f GiB: where pinning fails the buffers are pageable instead "
             "(slower copies to and from the GPU; raise the limit, or --pinned-memory bounds "
             "what is pinned)\n",
             pinned / gib, (double)rl.rlim_cur / gib);
}

/* Appends one "zoe-train: ..." line to notes (rank 0's lines of the plan, printed once every check
 * before the first step has passed: a run refused on the way prints its one line, not the plan's
 * before it). */
static void note(char *notes, size_t cap, const char *fmt, ...) {
    size_t len = strlen(notes);
    if (len + 12 >= cap) return;
    len += (size_t)snprintf(notes + len, cap - len, "zoe-train: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(notes + len, cap - len, fmt, ap);
    va_end(ap);
}

/* Plans the run before anything is allocated: resolves --offload-ratio auto and --dpu auto,
 * writes the plan's summary into notes, and refuses a run that does not fit (unless
 * --no-plan-check) or needs more than --device-memory. Every rank plans from rank 0's measurements,
 * so all decide alike. gpu_bytes: the smallest GPU of the job (0 on the CPU backend). Returns 0 to
 * go on, or the exit code after a message. */
static int plan_run(zoe_train_config *cfg, int world, int rank, int node_gpus, double gpu_bytes,
                    char *notes, size_t notes_cap) {
    zoe_hardware hw;
    zoe_status st = strcmp(cfg->hardware, "local") == 0 ? zoe_hardware_local(0, &hw)
                                                        : zoe_hardware_preset(cfg->hardware, &hw);
    if (st == ZOE_OK && hw.backend == ZOE_BACKEND_CPU) st = zoe_hardware_measure_rank_base(&hw);
    /* --offload nvme on this machine: its drives are the --nvme-path directories */
    if (st == ZOE_OK && cfg->offload == ZOE_OFFLOAD_NVME && strcmp(cfg->hardware, "local") == 0)
        st = zoe_hardware_drives_of_paths(cfg->nvme_path, &hw);
    if (st != ZOE_OK) return fail(rank, EXIT_USAGE, zoe_last_error());
    if (cfg->backend == ZOE_BACKEND_CUDA && hw.backend == ZOE_BACKEND_CPU) {
        /* this machine's GPUs: their count (all a node's ranks see, whatever each rank sees);
         * their memory is not known here, so not checked */
        hw.backend = ZOE_BACKEND_CUDA;
        hw.gpus = node_gpus;
        hw.dtype = cfg->dtype;
    }
    /* On a GPU the cap is the GPU's memory to the plan, which --offload-ratio auto then fits;
     * the CPU backend's device is host memory, checked against the cap after the plan. */
    const double cap = (double)cfg->device_memory;
    if (cfg->backend == ZOE_BACKEND_CUDA && cap > gpu_bytes && gpu_bytes > 0) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "--device-memory=%.2f GiB is more than the %.2f GiB of the job's smallest GPU",
                 cap / (1 << 30), gpu_bytes / (1 << 30));
        return fail(rank, EXIT_USAGE, msg);
    }
    if (cfg->backend == ZOE_BACKEND_CUDA && cap > 0 && (hw.gpu_bytes <= 0 || cap < hw.gpu_bytes))
        hw.gpu_bytes = cap;
    double measured[3] = {hw.host_bytes, hw.rank_base_bytes, hw.host_free_bytes};
    MPI_Bcast(measured, 3, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    hw.host_bytes = measured[0], hw.rank_base_bytes = measured[1], hw.host_free_bytes = measured[2];
    zoe_plan_config pc;
    zoe_plan_result r;
    st = zoe_plan_config_from_train(cfg, world, &hw, &pc);
    pc.ranks_per_node = ranks_per_node();
    if (st == ZOE_OK && cfg->offload_ratio == ZOE_OFFLOAD_RATIO_AUTO) {
        st = zoe_plan_auto_offload_ratio(&pc, &pc.offload_ratio);
        if (st == ZOE_OK) cfg->offload_ratio = pc.offload_ratio;
        if (st == ZOE_OK && rank == 0)
            note(notes, notes_cap, "--offload-ratio auto: %g of the optimizer state on the host\n",
                 (double)cfg->offload_ratio);
    }
    if (st == ZOE_OK && cfg->dpu == ZOE_DPU_AUTO) {
        pc.dpu = 0;
        st = zoe_plan(&pc, &r);
        int pays = st == ZOE_OK && zoe_plan_dpu_pays(&r);
        cfg->dpu = pays ? ZOE_DPU_ON : ZOE_DPU_OFF;
        if (pays && cfg->dpu_warmup == 0) cfg->dpu_warmup = 5;
        pc.dpu = pays && cfg->dpu_warmup > 0;
        if (st == ZOE_OK && rank == 0 && hw.backend == ZOE_BACKEND_CUDA &&
            strcmp(r.time.bound, "not probed") == 0)
            note(notes, notes_cap,
                 "--dpu auto: off (no time model for this machine's GPUs: name the "
                 "box with --hardware)\n");
        else if (st == ZOE_OK && rank == 0 && hw.backend == ZOE_BACKEND_CPU)
            note(notes, notes_cap,
                 "--dpu auto: off (on the CPU backend the host step runs on the cores "
                 "that compute, so DPU hides nothing)\n");
        else if (st == ZOE_OK && rank == 0)
            note(notes, notes_cap,
                 "--dpu auto: %s (the host step would stall the device for %.0f%% "
                 "of a step, DPU would hide %.3f s; on above %.0f%%)\n",
                 pays ? "on" : "off", 100.0 * r.time.stall_share, r.time.hidden_by_dpu,
                 100.0 * ZOE_PLAN_DPU_STALL_SHARE);
    }
    if (st == ZOE_OK) st = zoe_plan(&pc, &r);
    if (st != ZOE_OK) return fail(rank, EXIT_USAGE, zoe_last_error());
    /* --offload-grads auto: the plan's decision (on the drives only where the host cannot hold
     * the gradient partition) */
    if (cfg->offload == ZOE_OFFLOAD_NVME && cfg->offload_grads == ZOE_OFFLOAD_GRADS_AUTO) {
        cfg->offload_grads = r.drive.grads ? ZOE_OFFLOAD_GRADS_NVME : ZOE_OFFLOAD_GRADS_CPU;
        if (rank == 0)
            note(notes, notes_cap, "--offload-grads auto: the gradient partition %s\n",
                 r.drive.grads ? "on the drives (the host cannot hold it)"
                               : "in host memory (it fits there)");
    }
    /* streamed weights: the plan's prefetch depth unless --prefetch-layers names one */
    if (cfg->offload_params != ZOE_OFFLOAD_PARAMS_NONE && cfg->prefetch_layers == 0)
        cfg->prefetch_layers = r.stream.prefetch > 0 ? r.stream.prefetch : 1;
    char line[512];
    zoe_plan_summary(&pc, &r, line, sizeof line);
    if (rank == 0) note(notes, notes_cap, "%s\n", line);
    /* The plan checks the box's memory; other processes may hold much of it now. */
    if (rank == 0 && r.fits && hw.host_free_bytes > 0 && r.host.total > hw.host_free_bytes)
        note(notes, notes_cap,
             "warning: the run needs %.2f GiB of host memory, and only %.2f GiB are "
             "free now (other processes hold the rest): it may be killed for memory\n",
             r.host.total / (1 << 30), hw.host_free_bytes / (1 << 30));
    char pin_line[384];
    check_pinned(cfg, &r, pin_line, sizeof pin_line);
    if (rank == 0 && pin_line[0]) note(notes, notes_cap, "%s", pin_line);
    if (check_device_cap(cfg, &r, rank)) return EXIT_USAGE;
    if (!r.fits && !cfg->no_plan_check) {
        char msg[640];
        snprintf(msg, sizeof msg,
                 "the run does not fit: %s (zoe-plan shows where memory goes; --no-plan-check "
                 "runs it anyway)",
                 r.verdict);
        return fail(rank, EXIT_USAGE, msg);
    }
    return 0;
}

/* --backend=cuda: the GPUs every rank takes (zoe_gpu_choose), and the compute dtype they train
 * in: without --dtype, the one the weakest GPU of the job computes fastest (bf16, or fp16 with
 * dynamic loss scaling before sm_80; fp32 with --tf32); --dtype bf16 on a GPU without bf16
 * refused. Sets *node_gpus and *gpu_bytes (the smallest GPU's memory) for the plan. Returns 0
 * to go on, or the exit code after a message. */
static int choose_gpus(zoe_train_config *cfg, int dtype_given, int rank, int *node_gpus,
                       double *gpu_bytes) {
    *node_gpus = 0;
    *gpu_bytes = 0;
    if (cfg->backend != ZOE_BACKEND_CUDA) return 0;
    zoe_gpu_choice c;
    if (zoe_gpu_choose(MPI_COMM_WORLD, &c) != ZOE_OK)
        return fail(rank, EXIT_USAGE, zoe_last_error());
    zoe_gpu_spec spec;
    zoe_gpu_spec_of(c.weakest.capability, c.weakest.name, &spec);
    *node_gpus = c.node_gpus;
    *gpu_bytes = c.gpu.memory_bytes;
    MPI_Allreduce(MPI_IN_PLACE, gpu_bytes, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    if (!dtype_given) {
        cfg->dtype = cfg->tf32 ? ZOE_F32 : zoe_gpu_default_dtype(&spec);
        if (rank == 0)
            printf("zoe-train: --dtype %s, the default on the %s (sm_%d)%s\n",
                   zoe_dtype_name(cfg->dtype), c.weakest.name, c.weakest.capability,
                   cfg->dtype == ZOE_F16 ? ": no bf16 tensor cores, so fp16 with dynamic loss "
                                           "scaling (--loss-scale)"
                                         : "");
    }
    char warning[256]; /* the trainer logs it */
    if (zoe_gpu_check_dtype(&spec, cfg->dtype, cfg->tf32, warning, sizeof warning) != ZOE_OK)
        return fail(rank, EXIT_USAGE, zoe_last_error());
    return 0;
}

/* zoe's OpenMP regions alternate with the BLAS's own thread pool. OpenMP workers that spin
 * after a region (libgomp's default) take the cores from the BLAS threads: a gpt2-124m step on
 * 2 cores runs 1.4x slower. libgomp reads its wait policy once, when it loads, so zoe-train
 * re-executes itself once with OMP_WAIT_POLICY=passive unless the user chose a policy. */
static void ensure_passive_openmp_wait(char **argv) {
    if (getenv("OMP_WAIT_POLICY")) return;
    setenv("OMP_WAIT_POLICY", "passive", 1);
    /* The binary's own path, not /proc/self/exe: the kernel names a process after the file it
     * executes, and "exe" in ps, top and the OOM killer's log would hide zoe-train. */
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0 || n >= (ssize_t)sizeof self - 1) return; /* run as we are */
    self[n] = '\0';
    execv(self, argv); /* returns only on failure: then run as we are */
}

/* Before the model is built: every token inside the vocabulary (rank 0 reads the dataset once
 * and tells the others), and at least one global batch of sequences (the loader's own check,
 * made here with the grid's DP size). Every rank returns the same status. */
static zoe_status check_data(const zoe_dataset *ds, const zoe_train_config *cfg, int rank,
                             int world) {
    int status = rank == 0 ? (int)zoe_dataset_check_tokens(ds, cfg->model.vocab) : 0;
    MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (status != ZOE_OK) return (zoe_status)status;
    zoe_loader_config lc = {.seq_len = cfg->model.seq_len,
                            .micro_batch = cfg->micro_batch,
                            .dp_size = world / cfg->tp,
                            .dp_rank = 0,
                            .grad_accum = cfg->grad_accum,
                            .seed = cfg->seed};
    zoe_loader *probe = NULL;
    zoe_status st = zoe_loader_create(ds, &lc, &probe);
    zoe_loader_destroy(probe);
    return st;
}

/* The training and validation datasets: --data whole and --val-data, or --data's documents
 * split by --split (two views of one dataset, which *whole owns). */
typedef struct run_data {
    zoe_dataset *whole, *train, *val;
} run_data;

static void run_data_destroy(run_data *d) {
    if (d->train != d->whole) zoe_dataset_destroy(d->train);
    zoe_dataset_destroy(d->val);
    zoe_dataset_destroy(d->whole);
    *d = (run_data){0};
}

static zoe_status open_data(const zoe_train_config *cfg, run_data *d) {
    *d = (run_data){0};
    zoe_status st = zoe_dataset_open(cfg->data, &d->whole);
    d->train = d->whole;
    if (st != ZOE_OK || (!cfg->val_data[0] && !cfg->split_train)) return st;
    if (cfg->val_data[0]) return zoe_dataset_open(cfg->val_data, &d->val);
    int64_t docs = zoe_dataset_documents(d->whole), train = 0;
    st = zoe_dataset_split_documents(docs, cfg->split_train, cfg->split_val, &train);
    d->train = NULL;
    if (st == ZOE_OK) st = zoe_dataset_subset(d->whole, 0, train, &d->train);
    if (st == ZOE_OK) st = zoe_dataset_subset(d->whole, train, docs - train, &d->val);
    return st;
}

/* The validation loss over the first `batches` global batches of the validation loader (the
 * same sequences at every evaluation), each rank its share, micro-batch by micro-batch. */
static zoe_status evaluate(zoe_trainer *tr, const zoe_loader *val, int batches, int grad_accum,
                           int32_t *tokens, int32_t *targets, float *loss) {
    zoe_status st = zoe_trainer_eval_begin(tr);
    for (int b = 0; st == ZOE_OK && b < batches; b++)
        for (int m = 0; st == ZOE_OK && m < grad_accum; m++) {
            st = zoe_loader_fetch(val, b, m, tokens, targets);
            if (st == ZOE_OK) st = zoe_trainer_eval_micro_batch(tr, tokens, targets);
        }
    return st == ZOE_OK ? zoe_trainer_eval_end(tr, loss) : st;
}

/* The status of a check or a write that rank 0 makes (it writes the metrics and holds the save
 * directory's lock; checkpoints' directories are shared), on every rank; only rank 0 has its
 * message. */
static zoe_status from_rank0(zoe_status st) {
    int code = (int)st;
    MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return (zoe_status)code;
}

/* from_rank0, with rank 0's message in why on every rank when it failed. */
static zoe_status rank0_failure(int rank, zoe_status st, char *why, size_t cap) {
    st = from_rank0(st);
    if (st == ZOE_OK) return st;
    if (rank == 0) snprintf(why, cap, "%s", zoe_last_error());
    MPI_Bcast(why, (int)cap, MPI_CHAR, 0, MPI_COMM_WORLD);
    return st;
}

static int rank0_agrees(int rank, zoe_status (*check)(const char *), const char *path) {
    return from_rank0(rank ? ZOE_OK : check(path)) == ZOE_OK;
}

/* Rank 0: whether the file system of --save has room for one checkpoint of this trainer. */
static zoe_status room_for_checkpoint(zoe_trainer *tr, const char *dir) {
    uint64_t need = 0;
    zoe_status st = zoe_trainer_checkpoint_bytes(tr, &need);
    return st == ZOE_OK ? zoe_checkpoint_room_check(dir, need) : st;
}

int main(int argc, char **argv) {
    ensure_passive_openmp_wait(argv);
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    zoe_train_config cfg;
    zoe_train_config_defaults(&cfg);
    /* Not a dtype: tells whether --dtype (or a config's "dtype") was given. */
    cfg.dtype = ZOE_DTYPE_COUNT;
    int help = 0, models = 0;
    zoe_status st = zoe_train_config_parse_args(&cfg, argc, argv, &help, &models);
    const int dtype_given = cfg.dtype != ZOE_DTYPE_COUNT;
    if (!dtype_given) cfg.dtype = ZOE_F32;
    if (help || models) {
        if (rank == 0 && help) zoe_train_config_print_help(stdout, "zoe-train");
        if (rank == 0 && models && !help) list_models();
        MPI_Finalize();
        return st == ZOE_OK ? 0 : EXIT_USAGE;
    }
    if (st != ZOE_OK) return fail(rank, EXIT_USAGE, zoe_last_error());
    if (!cfg.data[0])
        return fail(
            rank, EXIT_USAGE,
            "--data is required (a .txt file, or an indexed dataset prefix made by zoe-data)");
    int node_gpus = 0;
    double gpu_bytes = 0;
    int code = choose_gpus(&cfg, dtype_given, rank, &node_gpus, &gpu_bytes);
    if (code) return code;
    if (zoe_train_config_validate(&cfg, world) != ZOE_OK ||
        zoe_train_schedule_validate(&cfg) != ZOE_OK)
        return fail(rank, EXIT_USAGE, zoe_last_error());
    char plan_notes[4096] = "";
    code = plan_run(&cfg, world, rank, node_gpus, gpu_bytes, plan_notes, sizeof plan_notes);
    if (code) return code;
    /* Rank 0 writes the metrics. Whether it can is checked now, before anything is built, and
     * every rank learns the answer; the file itself is opened (truncated for a new run, cut at
     * the first step for a resumed one) only once every check has passed and the first step is
     * known, so a run refused on the way leaves an existing file as it was and makes none. */
    zoe_progress *progress = NULL;
    if (!rank0_agrees(rank, zoe_metrics_check, cfg.metrics) ||
        from_rank0(rank ? ZOE_OK : zoe_metrics_check_room(cfg.metrics, cfg.steps)) != ZOE_OK)
        return fail(rank, EXIT_USAGE, zoe_last_error());
    /* The same for --save: a save directory that cannot be written, or that holds another run's
     * checkpoints (unless this run resumes them), is found now, not after the training it was to
     * keep; and one run at a time saves into it (rank 0 holds the lock for the run). */
    zoe_checkpoint_lock *lock = NULL;
    if (!rank0_agrees(rank, zoe_checkpoint_dir_check, cfg.save) ||
        from_rank0(rank || !cfg.save[0] ? ZOE_OK : zoe_checkpoint_lock_acquire(cfg.save, &lock)) !=
            ZOE_OK)
        return fail(rank, EXIT_USAGE, zoe_last_error());
    if (from_rank0(rank ? ZOE_OK : zoe_checkpoint_dir_check_run(cfg.save, cfg.resume)) != ZOE_OK) {
        zoe_checkpoint_lock_release(lock);
        return fail(rank, EXIT_USAGE, zoe_last_error());
    }

    zoe_stop_signals_install();
    run_data data;
    if (open_data(&cfg, &data) != ZOE_OK || check_data(data.train, &cfg, rank, world) != ZOE_OK ||
        (data.val && check_data(data.val, &cfg, rank, world) != ZOE_OK)) {
        run_data_destroy(&data);
        zoe_checkpoint_lock_release(lock);
        return fail(rank, EXIT_USAGE, zoe_last_error());
    }
    zoe_dataset *ds = data.train;
    zoe_trainer *tr = NULL;
    st = zoe_trainer_create(MPI_COMM_WORLD, &cfg, &tr);
    if (st != ZOE_OK) {
        if (rank == 0) fputs(plan_notes, stdout), fflush(stdout); /* a failure, not bad input */
        say_failed(rank, st);
        run_data_destroy(&data);
        zoe_checkpoint_lock_release(lock);
        MPI_Finalize();
        /* bad input found only now (a --nvme-path without room): exit 2, nothing written */
        return st == ZOE_ERR_INVALID_ARGUMENT ? EXIT_USAGE : EXIT_FAILURE;
    }
    char ckpt[ZOE_PATH_MAX * 2] = "";
    /* A bad checkpoint is bad input: one line naming it, exit 2, nothing written. So is a
     * --save whose file system cannot hold one checkpoint: found before the first step, not
     * after the training it was to keep. */
    if ((cfg.resume[0] && zoe_trainer_load(tr, cfg.resume, ckpt, sizeof ckpt) != ZOE_OK) ||
        from_rank0(rank || !cfg.save[0] ? ZOE_OK : room_for_checkpoint(tr, cfg.save)) != ZOE_OK) {
        zoe_trainer_destroy(tr);
        run_data_destroy(&data);
        zoe_checkpoint_lock_release(lock);
        return fail(rank, EXIT_USAGE, zoe_last_error());
    }
    if (rank == 0) fputs(plan_notes, stdout), fflush(stdout);
    int first = zoe_trainer_steps_done(tr);
    if (first >= cfg.steps) {
        if (rank == 0)
            printf("zoe-train: %s is already at step %d (--steps=%d): nothing to train; give a "
                   "larger --steps to go on\n",
                   ckpt, first, cfg.steps);
        zoe_trainer_destroy(tr);
        run_data_destroy(&data);
        zoe_checkpoint_lock_release(lock);
        MPI_Finalize();
        return 0;
    }
    zoe_loader_config lc = {.seq_len = cfg.model.seq_len,
                            .micro_batch = cfg.micro_batch,
                            .dp_size = zoe_trainer_dp_size(tr),
                            .dp_rank = zoe_trainer_dp_rank(tr),
                            .grad_accum = cfg.grad_accum,
                            .seed = cfg.seed,
                            .vocab_size = cfg.model.vocab};
    zoe_loader *loader = NULL, *val_loader = NULL;
    /* A step's micro-batches are fetched first: the count of their targets weights the loss. */
    size_t n = (size_t)cfg.micro_batch * (size_t)cfg.model.seq_len,
           all = n * (size_t)cfg.grad_accum;
    int32_t *tokens = malloc(all * sizeof(int32_t)), *targets = malloc(all * sizeof(int32_t));
    st = tokens && targets ? zoe_loader_create(ds, &lc, &loader) : ZOE_ERR_OUT_OF_MEMORY;
    if (st == ZOE_OK && data.val) st = zoe_loader_create(data.val, &lc, &val_loader);
    /* More batches than the validation set holds would only count sequences twice. */
    int val_batches = 0, evaluated_at = -1;
    if (val_loader)
        val_batches = (int)(zoe_loader_steps_per_epoch(val_loader) < cfg.eval_iters
                                ? zoe_loader_steps_per_epoch(val_loader)
                                : cfg.eval_iters);
    float val_loss = 0;
    char why[1024] = ""; /* a failure of rank 0's own (its metrics), on every rank */
    if (st == ZOE_OK)    /* a resumed run keeps the lines of the steps before first */
        st = rank0_failure(rank,
                           rank ? ZOE_OK
                                : zoe_progress_create_at(stdout, cfg.progress, cfg.steps,
                                                         cfg.log_every, cfg.metrics, first,
                                                         &progress),
                           why, sizeof why);
    if (st == ZOE_OK && rank == 0) print_banner(&cfg, tr, world);
    if (st == ZOE_OK && rank == 0 && val_loader) {
        char every[64] = "at the end";
        if (cfg.eval_every > 0)
            snprintf(every, sizeof every, "every %d steps and at the end", cfg.eval_every);
        printf("zoe-train: validation on %s (%lld sequences): %d global batches %s%s\n",
               zoe_dataset_name(data.val), (long long)zoe_loader_sequences(val_loader), val_batches,
               every,
               val_batches < cfg.eval_iters ? " (all it holds; fewer than --eval-iters)" : "");
        fflush(stdout);
    }
    if (st == ZOE_OK && rank == 0 && ckpt[0])
        printf("zoe-train: resumed from %s at step %d\n", ckpt, first);
    float first_loss = 0, last_loss = 0;
    double ms = 0, toks = 0;
    int stopped = 0, signo = 0, step = first;
    for (; st == ZOE_OK && step < cfg.steps && !stopped; step++) {
        zoe_trainer_caller_phase(tr, "loading the step's batches");
        for (int m = 0; st == ZOE_OK && m < cfg.grad_accum; m++)
            st = zoe_loader_fetch(loader, step, m, tokens + (size_t)m * n, targets + (size_t)m * n);
        if (st == ZOE_OK) st = zoe_trainer_begin_step(tr, zoe_count_targets(targets, all));
        for (int m = 0; st == ZOE_OK && m < cfg.grad_accum; m++)
            st = zoe_trainer_micro_batch(tr, tokens + (size_t)m * n, targets + (size_t)m * n, NULL);
        zoe_step_stats s;
        if (st == ZOE_OK) st = zoe_trainer_step(tr, zoe_train_lr_at(&cfg, step), &s);
        int eval_due = val_loader && ((cfg.eval_every > 0 && (step + 1) % cfg.eval_every == 0) ||
                                      step + 1 == cfg.steps);
        if (st == ZOE_OK && eval_due) {
            st = evaluate(tr, val_loader, val_batches, cfg.grad_accum, tokens, targets, &val_loss);
            s.evaluated = 1, s.val_loss = val_loss, evaluated_at = step + 1;
        }
        /* rank 0 writes the metrics: a line it cannot write stops every rank */
        zoe_trainer_caller_phase(tr, "reporting the step (rank 0 writes the metrics)");
        if (st == ZOE_OK && cfg.metrics[0])
            st = rank0_failure(rank, progress ? zoe_progress_report(progress, &s) : ZOE_OK, why,
                               sizeof why);
        else if (st == ZOE_OK && progress)
            st = zoe_progress_report(progress, &s);
        if (st == ZOE_OK) {
            if (step == first) first_loss = s.loss;
            last_loss = s.loss, ms += s.ms_total, toks += (double)s.tokens;
        }
        if (st == ZOE_OK && cfg.save[0] && cfg.save_every > 0 && (step + 1) % cfg.save_every == 0)
            st = zoe_trainer_save(tr, cfg.save, cfg.keep_last, NULL, 0);
        /* Every rank finishes the step, then all agree on a signal any of them got. */
        if (st == ZOE_OK) stopped = zoe_trainer_stop_requested(tr, &signo);
    }
    int done = zoe_trainer_steps_done(tr);
    if (st == ZOE_OK && cfg.save[0])
        st = zoe_trainer_save(tr, cfg.save, cfg.keep_last, ckpt, sizeof ckpt);
    if (st == ZOE_OK) st = zoe_trainer_finalize(tr);
    if (st != ZOE_OK) {
        if (why[0]) /* rank 0's own failure (its metrics), said by every rank */
            fprintf(stderr, "zoe-train: rank %d: %s\n", rank, why);
        else
            say_failed(rank, st);
        code = EXIT_FAILURE;
    } else if (rank == 0 && stopped) {
        if (cfg.save[0])
            printf("zoe-train: %s: saved step %d to %s; resume with --resume %s\n",
                   zoe_stop_signal_name(signo), done, ckpt, cfg.save);
        else
            printf("zoe-train: %s: stopped after step %d; nothing saved (no --save given)\n",
                   zoe_stop_signal_name(signo), done);
    } else if (rank == 0) {
        printf("zoe-train: loss %.3f -> %.3f in %d steps, %.0f tokens/s on average\n", first_loss,
               last_loss, done - first, ms > 0 ? toks / (ms / 1e3) : 0.0);
        if (evaluated_at > 0)
            printf("zoe-train: validation loss %.3f after step %d (%d global batches of %s)\n",
                   val_loss, evaluated_at, val_batches, zoe_dataset_name(data.val));
        if (cfg.save[0]) printf("zoe-train: saved step %d to %s\n", done, ckpt);
    }
    zoe_progress_destroy(progress);
    zoe_loader_destroy(loader);
    zoe_loader_destroy(val_loader);
    free(tokens), free(targets);
    zoe_trainer_destroy(tr);
    run_data_destroy(&data);
    zoe_checkpoint_lock_release(lock);
    if (code) MPI_Abort(MPI_COMM_WORLD, code);
    MPI_Finalize();
    return code;
}
