/* zoe-train: trains a GPT or Llama with TP x DP and ZeRO-Offload, from random weights or a
 * Hugging Face model (--init-from). Uses the public API only.
 *   mpirun -np 4 zoe-train --model demo --tp 2 --data data/demo-corpus.txt */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "zoe/data.h"
#include "zoe/zoe.h"
#include "zoe/train.h"

#define EXIT_USAGE 2

/* Every rank decides alike (the configuration is the same everywhere); rank 0 speaks. */
static int fail(int rank, int code, const char *what) {
    if (rank == 0) fprintf(stderr, "zoe-train: %s\n", what);
    MPI_Finalize();
    return code;
}

static void list_models(void) {
    printf("%-12s %-6s %6s %6s %8s %6s %7s %7s %9s  %s\n", "model", "family", "layers", "hidden",
           "heads/kv", "ffn", "seq", "vocab", "params", "shape from");
    for (int i = 0; i < zoe_model_preset_count(); i++) {
        const zoe_model_config *m = zoe_model_preset_at(i);
        double p = (double)zoe_model_param_count(m);
        char heads[24];
        snprintf(heads, sizeof heads, "%d/%d", m->heads, m->kv_heads ? m->kv_heads : m->heads);
        printf("%-12s %-6s %6d %6d %8s %6d %7d %7d %8.*f%c  %s\n", m->name,
               zoe_model_family_name(m->family), m->layers, m->hidden, heads,
               m->ffn ? m->ffn : 4 * m->hidden, m->seq_len, m->vocab, p >= 1e9 ? 2 : 1,
               p >= 1e9 ? p / 1e9 : p / 1e6, p >= 1e9 ? 'B' : 'M', m->source);
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
    printf(
        "zoe-train: %d ranks = TP %d x DP %d, %s %s, optimizer on %s, DPU %s, global batch %d x %d "
        "tokens\n",
        world, tp, dp, zoe_backend_name(c->backend), zoe_dtype_name(c->dtype),
        c->offload == ZOE_OFFLOAD_CPU ? "the host (ZeRO-Offload)" : "the device",
        c->dpu_warmup > 0 ? "on after warm-up" : "off", dp * c->grad_accum * c->micro_batch,
        c->model.seq_len);
    if (c->dpu_warmup > 0)
        printf("zoe-train: DPU starts after %d synchronous steps\n", c->dpu_warmup);
    /* Open MPI's mpirun turns its own SIGTERM/SIGINT (a Ctrl-C) into SIGTERM to the ranks and
     * SIGKILLs them 1 s later unless told otherwise: too soon to finish a save. */
    if (c->save[0] && getenv("OMPI_COMM_WORLD_SIZE") &&
        !getenv("OMPI_MCA_odls_base_sigkill_timeout"))
        printf("zoe-train: to save on Ctrl-C or SIGTERM to mpirun, run mpirun --mca "
               "odls_base_sigkill_timeout 600 (mpirun kills ranks 1 s after a signal); SIGUSR1 to "
               "mpirun always works\n");
    fflush(stdout);
}

/* zoe's OpenMP regions alternate with the BLAS's own thread pool. OpenMP workers that spin
 * after a region (libgomp's default) take the cores from the BLAS threads: a gpt2-124m step on
 * 2 cores runs 1.4x slower. libgomp reads its wait policy once, when it loads, so zoe-train
 * re-executes itself once with OMP_WAIT_POLICY=passive unless the user chose a policy. */
static void ensure_passive_openmp_wait(char **argv) {
    if (getenv("OMP_WAIT_POLICY")) return;
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv); /* returns only on failure: then run as we are */
}

int main(int argc, char **argv) {
    ensure_passive_openmp_wait(argv);
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    zoe_train_config cfg;
    zoe_train_config_defaults(&cfg);
    int help = 0, models = 0;
    zoe_status st = zoe_train_config_parse_args(&cfg, argc, argv, &help, &models);
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
    if (zoe_train_config_validate(&cfg, world) != ZOE_OK)
        return fail(rank, EXIT_USAGE, zoe_last_error());

    zoe_stop_signals_install();
    zoe_dataset *ds = NULL;
    if (zoe_dataset_open(cfg.data, &ds) != ZOE_OK) return fail(rank, EXIT_USAGE, zoe_last_error());
    zoe_trainer *tr = NULL;
    if (zoe_trainer_create(MPI_COMM_WORLD, &cfg, &tr) != ZOE_OK) {
        zoe_dataset_destroy(ds);
        return fail(rank, EXIT_FAILURE, zoe_last_error());
    }
    char ckpt[ZOE_PATH_MAX * 2] = "";
    if (cfg.resume[0] && zoe_trainer_load(tr, cfg.resume, ckpt, sizeof ckpt) != ZOE_OK) {
        /* A bad checkpoint is bad input: one line naming it, exit 2, nothing written. */
        if (rank == 0) fprintf(stderr, "zoe-train: %s\n", zoe_last_error());
        zoe_trainer_destroy(tr);
        zoe_dataset_destroy(ds);
        MPI_Finalize();
        return EXIT_USAGE;
    }
    int first = zoe_trainer_steps_done(tr);
    zoe_loader_config lc = {.seq_len = cfg.model.seq_len,
                            .micro_batch = cfg.micro_batch,
                            .dp_size = zoe_trainer_dp_size(tr),
                            .dp_rank = zoe_trainer_dp_rank(tr),
                            .grad_accum = cfg.grad_accum,
                            .seed = cfg.seed,
                            .vocab_size = cfg.model.vocab};
    zoe_loader *loader = NULL;
    zoe_progress *progress = NULL;
    size_t n = (size_t)cfg.micro_batch * (size_t)cfg.model.seq_len;
    int32_t *tokens = malloc(n * sizeof(int32_t)), *targets = malloc(n * sizeof(int32_t));
    st = tokens && targets ? zoe_loader_create(ds, &lc, &loader) : ZOE_ERR_OUT_OF_MEMORY;
    if (st == ZOE_OK && rank == 0)
        st = zoe_progress_create_at(stdout, cfg.progress, cfg.steps, cfg.log_every, cfg.metrics,
                                    first, &progress);
    if (st == ZOE_OK && rank == 0) print_banner(&cfg, tr, world);
    if (st == ZOE_OK && rank == 0 && ckpt[0])
        printf("zoe-train: resumed from %s at step %d\n", ckpt, first);
    float first_loss = 0, last_loss = 0;
    double ms = 0, toks = 0;
    int stopped = 0, signo = 0, step = first;
    for (; st == ZOE_OK && step < cfg.steps && !stopped; step++) {
        for (int m = 0; st == ZOE_OK && m < cfg.grad_accum; m++) {
            st = zoe_loader_fetch(loader, step, m, tokens, targets);
            if (st == ZOE_OK) st = zoe_trainer_micro_batch(tr, tokens, targets, NULL);
        }
        zoe_step_stats s;
        if (st == ZOE_OK) st = zoe_trainer_step(tr, zoe_train_lr_at(&cfg, step), &s);
        if (st == ZOE_OK && progress) st = zoe_progress_report(progress, &s);
        if (st == ZOE_OK) {
            if (step == first) first_loss = s.loss;
            last_loss = s.loss, ms += s.ms_total, toks += (double)s.tokens;
        }
        if (st == ZOE_OK && cfg.save[0] && cfg.save_every > 0 && (step + 1) % cfg.save_every == 0)
            st = zoe_trainer_save(tr, cfg.save, cfg.keep_last, NULL, 0);
        /* Every rank finishes the step, then all agree on a signal any of them got. */
        if (st == ZOE_OK) stopped = zoe_stop_requested(MPI_COMM_WORLD, &signo);
    }
    int done = zoe_trainer_steps_done(tr);
    if (st == ZOE_OK && cfg.save[0])
        st = zoe_trainer_save(tr, cfg.save, cfg.keep_last, ckpt, sizeof ckpt);
    if (st == ZOE_OK) st = zoe_trainer_flush(tr);
    int code = 0;
    if (st != ZOE_OK) {
        fprintf(stderr, "zoe-train: rank %d: %s\n", rank, zoe_last_error());
        code = EXIT_FAILURE;
    } else if (rank == 0 && stopped) {
        if (cfg.save[0])
            printf("zoe-train: %s: saved step %d to %s; resume with --resume %s\n",
                   strsignal(signo), done, ckpt, cfg.save);
        else
            printf("zoe-train: %s: stopped after step %d; nothing saved (no --save given)\n",
                   strsignal(signo), done);
    } else if (rank == 0) {
        printf("zoe-train: loss %.3f -> %.3f in %d steps, %.0f tokens/s on average\n", first_loss,
               last_loss, done - first, ms > 0 ? toks / (ms / 1e3) : 0.0);
        if (cfg.save[0]) printf("zoe-train: saved step %d to %s\n", done, ckpt);
    }
    zoe_progress_destroy(progress);
    zoe_loader_destroy(loader);
    free(tokens), free(targets);
    zoe_trainer_destroy(tr);
    zoe_dataset_destroy(ds);
    if (code) MPI_Abort(MPI_COMM_WORLD, code);
    MPI_Finalize();
    return code;
}
