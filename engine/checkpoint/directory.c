/* The checkpoint directory protocol (partial directory, fsync, rename, latest), trainer.json
 * reading, and the one-process tools: resolve, info, verify.
 *
 * Explained in docs/checkpoint.md, "Crash safety". */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "engine/checkpoint/directory.h"
#include "engine/checkpoint/mpi_io.h"
#include "engine/formats/json_file.h"
#include "engine/formats/safetensors.h"
#include "runtime/error.h"

void ckpt_step_name(int step, char *out, size_t cap) {
    snprintf(out, cap, "step-%08d", step);
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
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return zoe_fail(ZOE_ERR_IO, "checkpoint '%s' does not exist", path);
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
    snprintf(parent, sizeof parent, "%s", dir);
    size_t n = strlen(parent);
    while (n > 1 && parent[n - 1] == '/') parent[--n] = '\0';
    char *slash = strrchr(parent, '/');
    if (!slash)
        snprintf(parent, sizeof parent, ".");
    else if (slash == parent)
        parent[1] = '\0';
    else
        *slash = '\0';
    if (stat(parent, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--save: cannot create '%s': its parent '%s' is not a directory", dir,
                        parent);
    if (!dir_writable(parent, &err))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--save: cannot create '%s' in '%s': %s", dir,
                        parent, strerror(err));
    return ZOE_OK;
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

zoe_status ckpt_write_text(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return zoe_fail(ZOE_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    size_t n = strlen(text);
    ssize_t put = write(fd, text, n);
    int ok = put == (ssize_t)n && fsync(fd) == 0;
    if (close(fd) != 0) ok = 0;
    if (!ok) return zoe_fail(ZOE_ERR_IO, "writing %s failed: %s", path, strerror(errno));
    return ZOE_OK;
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
    if (rename(tmp, latest) != 0)
        return zoe_fail(ZOE_ERR_IO, "cannot rename %s to %s: %s", tmp, latest, strerror(errno));
    return ckpt_fsync_dir(parent);
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
