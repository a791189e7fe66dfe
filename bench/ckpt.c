/* bench_ckpt: seconds and GB/s to save and to load a trainer's checkpoint (collective MPI-IO,
 * every rank its own pieces), next to a plain sequential write (with fsync) and read of the
 * same number of bytes to the same disk in the same run, and the peak RSS a save adds on a
 * rank. Files are evicted from the page cache (posix_fadvise) before every read, so reads
 * come from the disk. Goal: save and load at >= 0.5 of the plain rate, and a save adding no
 * copy of the model (only the staging buffer).
 * Run by scripts/bench ckpt (bench/ckpt.sh: 4 ranks) as
 *   mpirun -np 4 bench_ckpt [model=gpt2-350m] [tp=2] [dir=/tmp/zoe-bench-ckpt] */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "runtime/proc_file.h"
#include "zoe/zoe.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what) {
    fprintf(stderr, "bench_ckpt: %s: %s\n", what, zoe_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* kB of a /proc/self/status line ("VmRSS", "VmHWM"). */
static long status_kb(const char *key) {
    return (long)zoe_proc_kib("/proc/self/status", key);
}

/* Resets VmHWM to the current RSS (Linux: clear_refs 5). */
static void reset_peak(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) fputs("5", f), fclose(f);
}

static void evict(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd >= 0) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), close(fd);
}

/* Bytes of the files of a checkpoint directory; evicts them from the page cache. */
static double dir_bytes_evict(const char *dir) {
    DIR *d = opendir(dir);
    double total = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        char p[2048];
        struct stat sb;
        snprintf(p, sizeof p, "%.1700s/%.300s", dir, e->d_name);
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) total += (double)sb.st_size, evict(p);
    }
    if (d) closedir(d);
    return total;
}

/* Plain sequential write (64 MiB writes, fsync) and read of bytes, in seconds. */
static void plain_io(const char *path, double bytes, double *write_s, double *read_s) {
    size_t chunk = (size_t)64 << 20;
    char *buf = malloc(chunk);
    for (size_t i = 0; i < chunk; i++) buf[i] = (char)(i * 131);
    double t0 = now();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (double done = 0; fd >= 0 && done < bytes; done += (double)chunk) {
        size_t n = bytes - done < (double)chunk ? (size_t)(bytes - done) : chunk;
        if (write(fd, buf, n) != (ssize_t)n) die("plain write");
    }
    if (fd < 0 || fsync(fd) != 0) die("plain fsync");
    close(fd);
    *write_s = now() - t0;
    evict(path);
    t0 = now();
    fd = open(path, O_RDONLY);
    while (fd >= 0 && read(fd, buf, chunk) > 0) {
    }
    if (fd >= 0) close(fd);
    *read_s = now() - t0;
    unlink(path);
    free(buf);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const char *model = argc > 1 ? argv[1] : "gpt2-350m";
    int tp = argc > 2 ? atoi(argv[2]) : 2;
    const char *root = argc > 3 ? argv[3] : "/tmp/zoe-bench-ckpt";
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    zoe_train_config cfg;
    zoe_train_config_defaults(&cfg);
    if (zoe_model_preset(model, &cfg.model) != ZOE_OK) die("preset");
    cfg.model.seq_len = 64; /* activations small: the bench measures the state, not a step */
    cfg.tp = tp, cfg.micro_batch = 1, cfg.dpu_warmup = 0, cfg.steps = 10;
    zoe_trainer *tr = NULL;
    if (zoe_trainer_create(MPI_COMM_WORLD, &cfg, &tr) != ZOE_OK) die("trainer");
    /* one step, so that the moments are not zeros */
    size_t n = (size_t)cfg.model.seq_len;
    int32_t *tokens = malloc(n * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) tokens[i] = (int32_t)((i * 7919) % (size_t)cfg.model.vocab);
    if (zoe_trainer_micro_batch(tr, tokens, tokens, NULL) != ZOE_OK ||
        zoe_trainer_step(tr, 1e-4f, NULL) != ZOE_OK)
        die("step");
    char saved[2048];
    long rss0 = status_kb("VmRSS");
    reset_peak();
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    if (zoe_trainer_save(tr, root, 1, saved, sizeof saved) != ZOE_OK) die("save");
    MPI_Barrier(MPI_COMM_WORLD);
    double save_s = now() - t0;
    long added_kb = status_kb("VmHWM") - rss0, max_added_kb = 0;
    MPI_Reduce(&added_kb, &max_added_kb, 1, MPI_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
    double bytes = rank == 0 ? dir_bytes_evict(saved) : 0;
    MPI_Bcast(&bytes, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = now();
    if (zoe_trainer_load(tr, saved, NULL, 0) != ZOE_OK) die("load");
    MPI_Barrier(MPI_COMM_WORLD);
    double load_s = now() - t0;
    double plain_w = 0, plain_r = 0;
    if (rank == 0) {
        char plain[2048];
        snprintf(plain, sizeof plain, "%s/plain.bin", root);
        plain_io(plain, bytes, &plain_w, &plain_r);
        double gb = bytes / 1e9;
        printf("{\"bench\":\"ckpt\",\"model\":\"%s\",\"params\":%lld,\"ranks\":%d,\"tp\":%d,"
               "\"dp\":%d,\"bytes\":%.0f}\n",
               model, (long long)zoe_model_param_count(&cfg.model), world, tp, world / tp, bytes);
        printf("{\"bench\":\"ckpt\",\"op\":\"save\",\"s\":%.3f,\"gb_per_s\":%.3f}\n", save_s,
               gb / save_s);
        printf("{\"bench\":\"ckpt\",\"op\":\"load\",\"s\":%.3f,\"gb_per_s\":%.3f}\n", load_s,
               gb / load_s);
        printf("{\"bench\":\"ckpt\",\"op\":\"plain_write_fsync\",\"s\":%.3f,\"gb_per_s\":%.3f}\n",
               plain_w, gb / plain_w);
        printf("{\"bench\":\"ckpt\",\"op\":\"plain_read\",\"s\":%.3f,\"gb_per_s\":%.3f}\n", plain_r,
               gb / plain_r);
        printf("{\"bench\":\"ckpt\",\"summary\":true,\"save_vs_plain\":%.3f,\"load_vs_plain\":%.3f,"
               "\"goal\":0.5,\"save_peak_rss_added_mb\":%.1f,\"rank_state_mb\":%.1f}\n",
               plain_w / save_s, plain_r / load_s, (double)max_added_kb / 1024.0,
               bytes / world / 1e6);
    }
    free(tokens);
    zoe_trainer_destroy(tr);
    MPI_Finalize();
    return 0;
}
