/* The checkpoint directory protocol (partial directory, fsync, rename, latest), trainer.json
 * reading, and the one-process tools: resolve, info, verify.
 *
 * Explained in docs/checkpoint.md, "Crash safety". */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "engine/checkpoint/directory.h"
#include "engine/checkpoint/mpi_io.h"
#include "engine/formats/json_file.h"
#include "engine/formats/safetensors.h"
#include "runtime/error.h"

void ckpt_step_name(int step, char *out, size_t cap) {
    snprintf(out, cap, "step-%08d", step);
}

/* The directory that holds path: "." for a bare name, "/" at the root. */
static void parent_of(const char *path, char *out, size_t cap) {
    snprintf(out, cap, "%s", path);
    size_t n = strlen(out);
    while (n > 1 && out[n - 1] == '/') out[--n] = '\0';
    char *slash = strrchr(out, '/');
    if (!slash)
        snprintf(out, cap, ".");
    else if (slash == out)
        out[1] = '\0';
    else
        *slash = '\0';
}

static int is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* A complete checkpoint is a step-N directory (no .partial) holding trainer.json. */
static int step_of(const char *name) {
    int step = -1, used = 0;
    if (sscanf(name, "step-%d%n", &step, &used) != 1 || name[used] != '\0' || step < 0) return -1;
    return step;
}

static int is_complete(const char *parent, const char *name) {
    char p[ZOE_PATH_MAX * 2];
    snprintf(p, sizeof p, "%s/%s/%s", parent, name, CKPT_TRAINER_FILE);
    return step_of(name) >= 0 && is_file(p);
}

/* The complete checkpoints of parent, steps ascending; *n of them, malloc'ed. */
static zoe_status list_complete(const char *parent, int **steps, int *n) {
    *steps = NULL, *n = 0;
    DIR *d = opendir(parent);
    if (!d) return zoe_fail(ZOE_ERR_IO, "cannot list %s: %s", parent, strerror(errno));
    int cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!is_complete(parent, e->d_name)) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            int *grown = realloc(*steps, (size_t)cap * sizeof *grown);
            if (!grown) {
                closedir(d);
                return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "checkpoint list");
            }
            *steps = grown;
        }
        (*steps)[(*n)++] = step_of(e->d_name);
    }
    closedir(d);
    for (int i = 1; i < *n; i++) /* insertion sort: a handful of entries */
        for (int j = i; j > 0 && (*steps)[j - 1] > (*steps)[j]; j--) {
            int t = (*steps)[j];
            (*steps)[j] = (*steps)[j - 1], (*steps)[j - 1] = t;
        }
    return ZOE_OK;
}

zoe_status zoe_checkpoint_resolve(const char *path, char *out, size_t cap) {
    char p[ZOE_PATH_MAX * 2];
    snprintf(p, sizeof p, "%s/%s", path, CKPT_TRAINER_FILE);
    if (is_file(p)) {
        snprintf(out, cap, "%s", path);
        return ZOE_OK;
    }
    /* A directory of checkpoints: latest names the newest complete one. */
    snprintf(p, sizeof p, "%s/%s", path, CKPT_LATEST_FILE);
    FILE *f = fopen(p, "r");
    char name[256] = "";
    if (f) {
        if (!fgets(name, sizeof name, f)) name[0] = '\0';
        fclose(f);
        name[strcspn(name, "\r\n")] = '\0';
        if (is_complete(path, name)) {
            snprintf(out, cap, "%s/%s", path, name);
            return ZOE_OK;
        }
    }
    /* No usable latest (a crash between the rename and latest): the newest complete one. */
    int *steps = NULL, n = 0;
    struct stat sb;
    if (stat(path, &sb) != 0) return zoe_fail(ZOE_ERR_IO, "checkpoint '%s' does not exist", path);
    if (!S_ISDIR(sb.st_mode))
        return zoe_fail(ZOE_ERR_IO,
                        "'%s' is not a checkpoint: it is a file, and a checkpoint is a directory "
                        "(step-N/ with %s, or a --save directory of them)",
                        path, CKPT_TRAINER_FILE);
    ZOE_TRY(list_complete(path, &steps, &n));
    if (n == 0) {
        free(steps);
        return zoe_fail(ZOE_ERR_IO, "'%s' holds no complete checkpoint (no %s, no step-N/%s)", path,
                        CKPT_LATEST_FILE, CKPT_TRAINER_FILE);
    }
    char step[32];
    ckpt_step_name(steps[n - 1], step, sizeof step);
    free(steps);
    snprintf(out, cap, "%s/%s", path, step);
    return ZOE_OK;
}

void ckpt_previous_hint(const char *ckpt_dir, char *out, size_t cap) {
    out[0] = '\0';
    char parent[ZOE_PATH_MAX];
    snprintf(parent, sizeof parent, "%s", ckpt_dir);
    size_t len = strlen(parent);
    while (len > 1 && parent[len - 1] == '/') parent[--len] = '\0';
    char *slash = strrchr(parent, '/');
    int mine = step_of(slash ? slash + 1 : parent);
    if (slash)
        *slash = '\0';
    else
        snprintf(parent, sizeof parent, ".");
    int *steps = NULL, n = 0;
    if (mine < 0 || list_complete(parent, &steps, &n) != ZOE_OK) return;
    int prev = -1;
    for (int i = 0; i < n; i++)
        if (steps[i] < mine) prev = steps[i];
    free(steps);
    if (prev < 0) return;
    char name[32];
    ckpt_step_name(prev, name, sizeof name);
    snprintf(out, cap, "; the previous checkpoint is %s/%s (--resume %s/%s)", parent, name, parent,
             name);
}

/* Whether a directory can be written: a probe subdirectory made and removed (access() says yes
 * to root where the file system still refuses, as sysfs does). */
static int dir_writable(const char *dir, int *err) {
    char probe[ZOE_PATH_MAX + 64];
    snprintf(probe, sizeof probe, "%s/.zoe-write-check-%ld", dir, (long)getpid());
    if (mkdir(probe, 0700) != 0) return *err = errno, 0;
    rmdir(probe);
    return 1;
}

zoe_status zoe_checkpoint_dir_check(const char *dir) {
    if (!dir || !dir[0]) return ZOE_OK;
    if (strlen(dir) >= ZOE_PATH_MAX)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--save: the path is longer than %d bytes",
                        ZOE_PATH_MAX - 1);
    struct stat sb;
    int err = 0;
    if (stat(dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--save: '%s' is not a directory", dir);
        if (!dir_writable(dir, &err))
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--save: cannot write in '%s': %s", dir,
                            strerror(err));
        return ZOE_OK;
    }
    if (errno != ENOENT)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--save: '%s': %s", dir, strerror(errno));
    /* A save makes the directory itself, one level: its parent must be a writable directory. */
    char parent[ZOE_PATH_MAX];
    parent_of(dir, parent, sizeof parent);
    if (stat(parent, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--save: cannot create '%s': its parent '%s' is not a directory", dir,
                        parent);
    if (!dir_writable(parent, &err))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--save: cannot create '%s' in '%s': %s", dir,
                        parent, strerror(err));
    return ZOE_OK;
}

/* The directory that holds a checkpoint directory (its parent), made absolute. */
static int holder_of(const char *ckpt_dir, char *out) {
    char parent[ZOE_PATH_MAX];
    parent_of(ckpt_dir, parent, sizeof parent);
    return realpath(parent, out) != NULL;
}

zoe_status zoe_checkpoint_dir_check_run(const char *dir, const char *resume) {
    ZOE_TRY(zoe_checkpoint_dir_check(dir));
    struct stat sb;
    int *steps = NULL, n = 0;
    if (!dir || !dir[0] || stat(dir, &sb) != 0) return ZOE_OK; /* the run makes it */
    ZOE_TRY(list_complete(dir, &steps, &n));
    int newest = n ? steps[n - 1] : -1;
    free(steps);
    if (newest < 0) return ZOE_OK;
    char name[32], mine[PATH_MAX], theirs[PATH_MAX], resolved[ZOE_PATH_MAX];
    ckpt_step_name(newest, name, sizeof name);
    if (!resume || !resume[0])
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--save '%s' already holds another run's checkpoints (newest %s): give "
                        "--resume %s to continue that run, or a new --save directory",
                        dir, name, dir);
    /* --resume names this directory or one of its checkpoints: the same run goes on. A resume
     * that does not resolve is reported by the load. */
    if (zoe_checkpoint_resolve(resume, resolved, sizeof resolved) != ZOE_OK) return ZOE_OK;
    if (realpath(dir, mine) && holder_of(resolved, theirs) && strcmp(mine, theirs) == 0)
        return ZOE_OK;
    return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                    "--save '%s' already holds checkpoints of a run other than --resume '%s' "
                    "(newest %s): save into a new directory, or resume from '%s'",
                    dir, resume, name, dir);
}

struct zoe_checkpoint_lock {
    int fd;
    int made_dir; /* the directory was made for the lock: removed with it if nothing was saved */
    char dir[ZOE_PATH_MAX], path[ZOE_PATH_MAX + 32];
};

/* The lock file is removed at release, so that a run leaves its directory as it found it. A run
 * that opened the file just before its holder removed it would lock a file no longer there:
 * after flock, the path must still name the file locked, else it tries again. */
static zoe_status lock_file(zoe_checkpoint_lock *lock) {
    for (int attempt = 0; attempt < 100; attempt++) {
        lock->fd = open(lock->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (lock->fd < 0)
            return zoe_fail(ZOE_ERR_IO, "--save: cannot create %s: %s", lock->path,
                            strerror(errno));
        if (flock(lock->fd, LOCK_EX | LOCK_NB) != 0) {
            int err = errno;
            char holder[128] = "";
            ssize_t got = pread(lock->fd, holder, sizeof holder - 1, 0);
            holder[got > 0 ? got : 0] = '\0';
            holder[strcspn(holder, "\n")] = '\0';
            close(lock->fd), lock->fd = -1;
            if (err == EWOULDBLOCK)
                return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                                "--save '%s' is in use by another run (%s holds %s): wait for it "
                                "to end, or save into another directory",
                                lock->dir, holder[0] ? holder : "a process", lock->path);
            return zoe_fail(ZOE_ERR_IO, "--save: cannot lock %s: %s", lock->path, strerror(err));
        }
        struct stat held, named;
        if (fstat(lock->fd, &held) == 0 && stat(lock->path, &named) == 0 &&
            held.st_dev == named.st_dev && held.st_ino == named.st_ino)
            return ZOE_OK;
        close(lock->fd), lock->fd = -1;
    }
    return zoe_fail(ZOE_ERR_IO, "--save: cannot lock %s: it keeps being replaced", lock->path);
}

zoe_status zoe_checkpoint_lock_acquire(const char *dir, zoe_checkpoint_lock **out) {
    *out = NULL;
    zoe_checkpoint_lock *lock = calloc(1, sizeof *lock);
    if (!lock) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "checkpoint lock");
    lock->fd = -1;
    snprintf(lock->dir, sizeof lock->dir, "%s", dir);
    snprintf(lock->path, sizeof lock->path, "%s/%s", dir, CKPT_LOCK_FILE);
    lock->made_dir = mkdir(dir, 0755) == 0;
    zoe_status st = lock_file(lock);
    if (st != ZOE_OK) {
        if (lock->made_dir) rmdir(dir);
        free(lock);
        return st;
    }
    /* Who holds it, for the message of a run refused: best effort (on a full disk it stays
     * empty; the lock holds all the same). */
    char host[64] = "?", who[160];
    gethostname(host, sizeof host - 1);
    int n = snprintf(who, sizeof who, "pid %ld on %s\n", (long)getpid(), host);
    if (ftruncate(lock->fd, 0) != 0 || pwrite(lock->fd, who, (size_t)n, 0) != n)
        zoe_log(ZOE_LOG_DEBUG, "%s: could not record the holder", lock->path);
    *out = lock;
    return ZOE_OK;
}

void zoe_checkpoint_lock_release(zoe_checkpoint_lock *lock) {
    if (!lock) return;
    unlink(lock->path); /* while still held: see lock_file */
    close(lock->fd);
    if (lock->made_dir) { /* a run that saved nothing leaves no directory behind */
        int *steps = NULL, n = 0;
        if (list_complete(lock->dir, &steps, &n) == ZOE_OK && n == 0)
            rmdir(lock->dir); /* fails, harmlessly, if anything else is in it */
        free(steps);
    }
    free(lock);
}

zoe_status ckpt_read_trainer_json(const char *ckpt_dir, cJSON **out) {
    char path[ZOE_PATH_MAX * 2];
    snprintf(path, sizeof path, "%s/%s", ckpt_dir, CKPT_TRAINER_FILE);
    cJSON *root = NULL;
    char *text = NULL;
    ZOE_TRY(zoe_json_read_text(path, "", (size_t)1 << 26, &text));
    if (zoe_json_parse(text, path, &root) != ZOE_OK) root = NULL; /* named below */
    free(text);
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *version = cJSON_GetObjectItemCaseSensitive(root, "format_version");
    if (!cJSON_IsObject(root) || !cJSON_IsString(format) ||
        strcmp(format->valuestring, CKPT_FORMAT) != 0 || !cJSON_IsNumber(version)) {
        cJSON_Delete(root);
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s is not a zoe trainer.json (bad JSON or no "
                        "\"format\": \"" CKPT_FORMAT "\")",
                        path);
    }
    if (version->valueint != CKPT_FORMAT_VERSION) {
        int v = version->valueint;
        cJSON_Delete(root);
        return zoe_fail(ZOE_ERR_UNSUPPORTED, "%s: format_version %d, this zoe reads %d", path, v,
                        CKPT_FORMAT_VERSION);
    }
    *out = root;
    return ZOE_OK;
}

zoe_status ckpt_recorded_checksum(const cJSON *trainer, const char *ckpt_dir, const char *file,
                                  const char *tensor, uint64_t *out) {
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(trainer, "files");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(files, file);
    const cJSON *sums = cJSON_GetObjectItemCaseSensitive(f, "checksums");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(sums, tensor);
    if (!cJSON_IsString(s) || sscanf(s->valuestring, "%" SCNx64, out) != 1)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s/%s records no checksum of %s in %s", ckpt_dir,
                        CKPT_TRAINER_FILE, tensor, file);
    return ZOE_OK;
}

zoe_status ckpt_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return zoe_fail(ZOE_ERR_IO, "cannot open directory %s: %s", dir, strerror(errno));
    int rc = fsync(fd);
    close(fd);
    if (rc != 0) return zoe_fail(ZOE_ERR_IO, "fsync of %s failed: %s", dir, strerror(errno));
    return ZOE_OK;
}

zoe_status ckpt_remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? ZOE_OK : zoe_fail(ZOE_ERR_IO, "cannot list %s", dir);
    zoe_status st = ZOE_OK;
    for (struct dirent *e; st == ZOE_OK && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[ZOE_PATH_MAX * 2];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
            st = ckpt_remove_tree(p);
        else if (unlink(p) != 0)
            st = zoe_fail(ZOE_ERR_IO, "cannot remove %s: %s", p, strerror(errno));
    }
    closedir(d);
    if (st == ZOE_OK && rmdir(dir) != 0)
        st = zoe_fail(ZOE_ERR_IO, "cannot remove %s: %s", dir, strerror(errno));
    return st;
}

int64_t ckpt_free_bytes(const char *path) {
    char p[ZOE_PATH_MAX * 3];
    snprintf(p, sizeof p, "%s", path);
    struct statvfs vfs;
    while (statvfs(p, &vfs) != 0) { /* not there yet: the directory that will hold it */
        char *slash = strrchr(p, '/');
        if (errno != ENOENT || !p[0] || !strcmp(p, ".")) return -1;
        if (!slash)
            snprintf(p, sizeof p, ".");
        else if (slash == p)
            p[1] = '\0';
        else
            *slash = '\0';
    }
    return (int64_t)vfs.f_bavail * (int64_t)vfs.f_frsize;
}

int ckpt_test_hook_on(const char *name) {
    const char *v = getenv(name);
    return v && strcmp(v, "1") == 0;
}

zoe_status ckpt_room_check(const char *what, const char *dir, uint64_t need) {
    if (ckpt_test_hook_on("ZOE_CKPT_TEST_NO_ROOM_CHECK")) return ZOE_OK;
    int64_t free_bytes = ckpt_free_bytes(dir);
    if (free_bytes < 0 || (uint64_t)free_bytes >= need) return ZOE_OK;
    return zoe_fail(ZOE_ERR_IO,
                    "%s '%s': a checkpoint needs %" PRIu64 " bytes (%.1f MiB), %" PRId64
                    " bytes (%.1f MiB) are free there",
                    what, dir, need, (double)need / 1048576.0, free_bytes,
                    (double)free_bytes / 1048576.0);
}

zoe_status zoe_checkpoint_room_check(const char *dir, uint64_t need) {
    return ckpt_room_check("--save", dir, need);
}

zoe_status ckpt_write_text(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return zoe_fail(ZOE_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    size_t n = strlen(text), done = 0;
    ssize_t put = 1;
    while (done < n && (put = write(fd, text + done, n - done)) > 0) done += (size_t)put;
    int err = put == 0 ? ENOSPC : errno; /* a write of 0 bytes: no room */
    if (done == n && fsync(fd) != 0) err = errno, done = 0;
    if (close(fd) != 0 && done == n) err = errno, done = 0;
    if (done == n) return ZOE_OK;
    return zoe_fail(ZOE_ERR_IO,
                    "writing %s failed: %s (it needs %zu bytes; %lld bytes are free on its file "
                    "system)",
                    path, strerror(err), n, (long long)ckpt_free_bytes(path));
}

zoe_status ckpt_replace(const char *tmp, const char *path) {
    if (rename(tmp, path) != 0)
        return zoe_fail(ZOE_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    char dir[ZOE_PATH_MAX * 2];
    parent_of(path, dir, sizeof dir);
    return ckpt_fsync_dir(dir);
}

zoe_status ckpt_commit(const char *parent, const char *partial, const char *final_name) {
    char from[ZOE_PATH_MAX * 2], to[ZOE_PATH_MAX * 2], tmp[ZOE_PATH_MAX * 2],
        latest[ZOE_PATH_MAX * 2];
    snprintf(from, sizeof from, "%s/%s", parent, partial);
    snprintf(to, sizeof to, "%s/%s", parent, final_name);
    ZOE_TRY(ckpt_fsync_dir(from));
    if (rename(from, to) != 0)
        return zoe_fail(ZOE_ERR_IO, "cannot rename %s to %s: %s", from, to, strerror(errno));
    ZOE_TRY(ckpt_fsync_dir(parent));
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", parent, CKPT_LATEST_FILE);
    snprintf(latest, sizeof latest, "%s/%s", parent, CKPT_LATEST_FILE);
    char line[64];
    snprintf(line, sizeof line, "%s\n", final_name);
    ZOE_TRY(ckpt_write_text(tmp, line));
    return ckpt_replace(tmp, latest);
}

zoe_status ckpt_prune(const char *parent, int keep, const char *newest) {
    if (keep <= 0) return ZOE_OK;
    int *steps = NULL, n = 0, newest_step = step_of(newest);
    ZOE_TRY(list_complete(parent, &steps, &n));
    zoe_status st = ZOE_OK;
    for (int i = 0; st == ZOE_OK && i < n - keep; i++) {
        if (steps[i] == newest_step) continue;
        char name[32], p[ZOE_PATH_MAX * 2];
        ckpt_step_name(steps[i], name, sizeof name);
        snprintf(p, sizeof p, "%s/%s", parent, name);
        st = ckpt_remove_tree(p);
    }
    free(steps);
    return st == ZOE_OK ? ckpt_fsync_dir(parent) : st;
}

/* ---- the one-process tools ---- */

static int json_int(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

zoe_status ckpt_open(const char *path, char *dir, size_t cap, cJSON **trainer) {
    ZOE_TRY(zoe_checkpoint_resolve(path, dir, cap));
    return ckpt_read_trainer_json(dir, trainer);
}

/* The dtype one moment is stored in (the first tensor of its name), for info: int8 as its codes
 * and scales. */
static void moment_note(const zoe_safetensors *st, const char *suffix, char *out, size_t cap) {
    const zoe_st_tensor *found = NULL;
    for (int i = 0; !found && i < st->count; i++) {
        const char *n = st->tensors[i].name;
        size_t len = strlen(n), k = strlen(suffix);
        if (len >= k && strcmp(n + len - k, suffix) == 0) found = &st->tensors[i];
    }
    if (!found) {
        snprintf(out, cap, "%s none", suffix + 1);
        return;
    }
    int codes = found->dtype == ZOE_ST_I8 || found->dtype == ZOE_ST_U8;
    snprintf(out, cap, codes ? "%s int8 (%s codes + F32 scales)" : "%s %s", suffix + 1,
             zoe_st_dtype_name(found->dtype));
}

zoe_status zoe_checkpoint_info(const char *path, FILE *out) {
    char dir[ZOE_PATH_MAX];
    cJSON *root = NULL;
    ZOE_TRY(ckpt_open(path, dir, sizeof dir, &root));
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *grid = cJSON_GetObjectItemCaseSensitive(root, "grid");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(model, "name");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "zoe_version");
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(root, "dtype");
    fprintf(out, "checkpoint  %s\n", dir);
    fprintf(out, "step        %d (the next step to run)\n", json_int(root, "step"));
    const cJSON *family = cJSON_GetObjectItemCaseSensitive(model, "family");
    int heads = json_int(model, "heads"), kv = json_int(model, "kv_heads");
    /* the position table's rows; absent before the field (the table was seq_len long) */
    int positions = json_int(model, "max_positions");
    fprintf(out,
            "model       %s (%s): %d layers, hidden %d, %d heads, %d KV heads, ffn %d, seq %d, "
            "positions %d, vocab %d\n",
            cJSON_IsString(name) ? name->valuestring : "?",
            cJSON_IsString(family) ? family->valuestring : "gpt", json_int(model, "layers"),
            json_int(model, "hidden"), heads, kv > 0 ? kv : heads, json_int(model, "ffn"),
            json_int(model, "seq_len"), positions > 0 ? positions : json_int(model, "seq_len"),
            json_int(model, "vocab"));
    fprintf(out, "written at  %d ranks = TP %d x DP %d, compute %s, zoe %s\n",
            json_int(grid, "world"), json_int(grid, "tp"), json_int(grid, "dp"),
            cJSON_IsString(dtype) ? dtype->valuestring : "?",
            cJSON_IsString(ver) ? ver->valuestring : "?");
    double total = 0;
    for (const cJSON *f = files ? files->child : NULL; f; f = f->next) {
        const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(f, "bytes");
        const cJSON *sums = cJSON_GetObjectItemCaseSensitive(f, "checksums");
        double b = cJSON_IsNumber(bytes) ? bytes->valuedouble : 0;
        total += b;
        fprintf(out, "file        %-26s %10.1f MB, %d tensors\n", f->string, b / 1e6,
                cJSON_GetArraySize(sums));
    }
    fprintf(out, "total       %.1f MB\n", total / 1e6);
    /* the moments' dtypes as stored; int8 blocks count per TP shard of the grid it was written at
     */
    char opt_path[ZOE_PATH_MAX * 2], m[96], v[96];
    snprintf(opt_path, sizeof opt_path, "%s/%s", dir, CKPT_OPTIMIZER_FILE);
    zoe_safetensors st;
    if (zoe_safetensors_read_header(opt_path, &st) == ZOE_OK) {
        moment_note(&st, ".exp_avg", m, sizeof m);
        moment_note(&st, ".exp_avg_sq", v, sizeof v);
        fprintf(out, "moments     %s, %s%s\n", m, v,
                strstr(m, "int8") || strstr(v, "int8") ? " (blocks of 256 per TP shard)" : "");
        zoe_safetensors_free(&st);
    }
    cJSON_Delete(root);
    return ZOE_OK;
}

/* One file: header, size and every tensor's checksum against trainer.json. */
static zoe_status verify_file(const cJSON *root, const char *dir, const cJSON *entry,
                              FILE *progress) {
    char path[ZOE_PATH_MAX * 2], hint[ZOE_PATH_MAX * 3];
    snprintf(path, sizeof path, "%s/%s", dir, entry->string);
    ckpt_previous_hint(dir, hint, sizeof hint);
    zoe_safetensors st;
    zoe_status s = zoe_safetensors_read_header(path, &st);
    if (s != ZOE_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", zoe_last_error());
        return zoe_fail(s, "%s%s", msg, hint);
    }
    const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(entry, "bytes");
    uint64_t size = st.data_offset + st.data_size;
    if (!cJSON_IsNumber(bytes) || (uint64_t)bytes->valuedouble != size) {
        zoe_safetensors_free(&st);
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: %" PRIu64 " bytes, trainer.json says %.0f%s",
                        path, size, cJSON_IsNumber(bytes) ? bytes->valuedouble : -1.0, hint);
    }
    const size_t chunk = (size_t)16 << 20;
    char *buf = malloc(chunk);
    if (!buf) s = zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "verify buffer");
    for (int i = 0; s == ZOE_OK && i < st.count; i++) {
        const zoe_st_tensor *t = &st.tensors[i];
        uint64_t want = 0, got = 0, salt = ckpt_salt(t->name);
        size_t esz = zoe_st_dtype_size(t->dtype);
        s = ckpt_recorded_checksum(root, dir, entry->string, t->name, &want);
        for (uint64_t at = 0; s == ZOE_OK && at < t->end - t->begin; at += chunk) {
            uint64_t n = t->end - t->begin - at < chunk ? t->end - t->begin - at : chunk;
            s = zoe_safetensors_read_data(path, &st, t, at, n, buf);
            if (s == ZOE_OK) got += ckpt_hash_elements(salt, at / esz, buf, n / esz, esz);
        }
        if (s == ZOE_OK && got != want)
            s = zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                         "%s: tensor %s: checksum %016" PRIx64
                         " but trainer.json records %016" PRIx64 " (corrupted)%s",
                         path, t->name, got, want, hint);
    }
    if (s == ZOE_OK && progress)
        fprintf(progress, "ok  %s: %d tensors, %.1f MB\n", entry->string, st.count,
                (double)size / 1e6);
    free(buf);
    zoe_safetensors_free(&st);
    return s;
}

zoe_status zoe_checkpoint_verify(const char *path, FILE *progress) {
    char dir[ZOE_PATH_MAX];
    cJSON *root = NULL;
    ZOE_TRY(ckpt_open(path, dir, sizeof dir, &root));
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
    zoe_status s =
        cJSON_IsObject(files) && files->child
            ? ZOE_OK
            : zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s/%s lists no files", dir, CKPT_TRAINER_FILE);
    for (const cJSON *f = s == ZOE_OK ? files->child : NULL; s == ZOE_OK && f; f = f->next)
        s = verify_file(root, dir, f, progress);
    cJSON_Delete(root);
    return s;
}
