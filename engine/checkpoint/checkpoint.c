/* Saving and loading a trainer: the files' tables from the model's tensor descriptors (global
 * shapes, unpadded vocabulary), each rank's runs (its TP shard cut by its DP partition, in
 * global element indices), trainer.json, and the DPU rule of docs/checkpoint.md. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "engine/checkpoint/directory.h"
#include "engine/checkpoint/mpi_io.h"
#include "engine/config/sizing.h"
#include "engine/formats/json_file.h"
#include "engine/train/trainer_impl.h"
#include "models/gpt.h"
#include "runtime/agree.h"
#include "runtime/error.h"
#include "zoe/zoe.h"

enum { FILE_MODEL = 0, FILE_OPTIMIZER, FILE_PARAMS, NUM_FILES };
static const char *const file_names[NUM_FILES] = {CKPT_MODEL_FILE, CKPT_OPTIMIZER_FILE,
                                                  CKPT_PARAMS_FILE};

/* What a trainer's tensors look like in a checkpoint. */
typedef struct ckpt_view {
    zoe_trainer *tr;
    zoe_gpt *gpt;
    zoe_optimizer *opt;
    zoe_grid *grid;
    const zoe_train_config *cfg;
    int num_tensors, tp_rank, dp_rank;
} ckpt_view;

static ckpt_view view_of(zoe_trainer *tr) {
    ckpt_view v = {.tr = tr,
                   .gpt = zoe_trainer_gpt(tr),
                   .opt = zoe_trainer_optimizer(tr),
                   .grid = zoe_trainer_grid(tr),
                   .cfg = zoe_trainer_config(tr)};
    v.num_tensors = zoe_gpt_num_tensors(v.gpt);
    v.tp_rank = zoe_grid_tp_rank(v.grid);
    v.dp_rank = zoe_grid_dp_rank(v.grid);
    return v;
}

/* Rows a tensor keeps in the file: the embedding and an untied head drop the vocabulary
 * padding. */
static int64_t stored_rows(const ckpt_view *v, const zoe_tp_param *p) {
    const zoe_tp_embedding *e = zoe_gpt_embedding(v->gpt);
    return p == &e->wte || (e->untied && p == &e->head) ? e->vocab.vocab : p->global_shape[0];
}

static const char *suffix_of(ckpt_source s) {
    switch (s) {
    case CKPT_EXP_AVG:
        return ".exp_avg";
    case CKPT_EXP_AVG_SQ:
        return ".exp_avg_sq";
    case CKPT_EXP_AVG_SCALES:
        return ".exp_avg.scales";
    case CKPT_EXP_AVG_SQ_SCALES:
        return ".exp_avg_sq.scales";
    default:
        return "";
    }
}

static int is_scales(ckpt_source s) {
    return s == CKPT_EXP_AVG_SCALES || s == CKPT_EXP_AVG_SQ_SCALES;
}

/* Whether the trainer holds moment which in int8. */
static int holds_int8(const ckpt_view *v, zoe_optimizer_state which) {
    return zoe_optimizer_state_dtype(v->opt, which) == ZOE_I8;
}

/* The sources of a file, in its tensor order: the model's tensors once per source; an int8
 * moment's block scales after the moments. */
static int file_sources(const ckpt_view *v, int file, ckpt_source out[4]) {
    if (file == FILE_MODEL) return out[0] = CKPT_MASTER, 1;
    if (file == FILE_PARAMS) return out[0] = CKPT_PARAMS, 1;
    int n = 0;
    out[n++] = CKPT_EXP_AVG, out[n++] = CKPT_EXP_AVG_SQ;
    if (holds_int8(v, ZOE_STATE_EXP_AVG)) out[n++] = CKPT_EXP_AVG_SCALES;
    if (holds_int8(v, ZOE_STATE_EXP_AVG_SQ)) out[n++] = CKPT_EXP_AVG_SQ_SCALES;
    return n;
}

/* The dtype a moment has in the optimizer file: the one it is held in (int8 codes: I8 for m,
 * U8 for v, whose codes are unsigned), its scales F32. */
static zoe_st_dtype moment_file_dtype(const ckpt_view *v, ckpt_source src) {
    if (is_scales(src)) return ZOE_ST_F32;
    zoe_dtype held = zoe_optimizer_state_dtype(v->opt, (zoe_optimizer_state)src);
    if (held == ZOE_I8) return src == CKPT_EXP_AVG ? ZOE_ST_I8 : ZOE_ST_U8;
    return zoe_st_dtype_from_zoe(held);
}

/* Blocks of an int8 moment in one TP shard of p (blocks count from the shard's first element:
 * a tensor starts at a block boundary of the partition, zoe_tensor_align). */
static int64_t shard_blocks(const zoe_tp_param *p) {
    return (p->local_numel + ZOE_OPTIMIZER_INT8_BLOCK - 1) / ZOE_OPTIMIZER_INT8_BLOCK;
}

/* The table this trainer writes for a file (and expects when loading). */
static zoe_status build_table(const ckpt_view *v, int file, zoe_safetensors *table) {
    zoe_safetensors_init(table);
    ckpt_source src[4];
    int ns = file_sources(v, file, src);
    char name[ZOE_TP_NAME_MAX + 24];
    int tp = zoe_grid_tp_size(v->grid);
    for (int s = 0; s < ns; s++)
        for (int t = 0; t < v->num_tensors; t++) {
            /* The moments as the host holds them (int8: codes, and per tensor the scales of its
             * blocks, [TP shards, blocks per shard]); the master in fp32 (exact from bf16), so
             * that the model file reads as any fp32 safetensors does. */
            zoe_st_dtype dt = file == FILE_PARAMS  ? zoe_st_dtype_from_zoe(v->cfg->dtype)
                              : file == FILE_MODEL ? ZOE_ST_F32
                                                   : moment_file_dtype(v, src[s]);
            const zoe_tp_param *p = zoe_gpt_tensor(v->gpt, t);
            int64_t shape[2] = {stored_rows(v, p), p->global_shape[1]};
            int ndim = p->ndim;
            if (is_scales(src[s]))
                shape[0] = tp / p->replicas, shape[1] = shard_blocks(p), ndim = 2;
            snprintf(name, sizeof name, "%s%s", p->name, suffix_of(src[s]));
            zoe_status st = zoe_safetensors_add(table, name, dt, ndim, shape);
            if (st != ZOE_OK) {
                zoe_safetensors_free(table);
                return st;
            }
        }
    return ZOE_OK;
}

/* This rank's runs of tensor t: local elements [first, first + count), which sit at mem, as
 * stretches of consecutive global indices (a row of a column shard, or whole rows). */
static zoe_status shard_runs(const ckpt_view *v, const zoe_tp_param *p, int entry, ckpt_source src,
                             size_t first, size_t count, uint64_t mem, int counted,
                             ckpt_runs *out) {
    int64_t lc = p->local_shape[1], gc = p->global_shape[1], rows = stored_rows(v, p);
    for (size_t k = first; k < first + count;) {
        int64_t i = (int64_t)k / lc, j = (int64_t)k % lc, grow = p->local_offset[0] + i;
        size_t n = (size_t)(lc - j) < first + count - k ? (size_t)(lc - j) : first + count - k;
        if (grow < rows) {
            ckpt_run r = {.entry = entry,
                          .source = src,
                          .mem = mem + (k - first),
                          .gidx = (uint64_t)(grow * gc + p->local_offset[1] + j),
                          .n = n,
                          .counted = counted};
            ZOE_TRY(ckpt_runs_add(out, &r));
        }
        k += n;
    }
    return ZOE_OK;
}

/* The runs of a file on this rank. Writing, a TP-replicated tensor is written by tp_rank 0
 * only, and a sharded one (KV heads replicated over TP, param.h) by the first rank of each
 * replica group; reading, every TP rank reads it, and the checksum counts it once. The optimizer
 * state is the rank's DP partition; the parameter buffer (compute dtype) is written from that
 * partition too, but read whole (every DP rank holds all of it) unless the weights are streamed
 * (the buffer is then the rank's partition on the host). file_table maps names to the
 * entries of the file being read (NULL: the trainer's own table, in its order). */
static zoe_status file_runs(const ckpt_view *v, int file, int reading,
                            const zoe_safetensors *file_table, const ckpt_int8_blocks *int8,
                            ckpt_runs *out) {
    ckpt_source src[4];
    int ns = file_sources(v, file, src);
    char name[ZOE_TP_NAME_MAX + 24];
    memset(out, 0, sizeof *out);
    for (int s = 0; s < ns; s++)
        for (int t = 0; t < v->num_tensors; t++) {
            const zoe_tp_param *p = zoe_gpt_tensor(v->gpt, t);
            int entry = s * v->num_tensors + t;
            if (file_table) {
                snprintf(name, sizeof name, "%s%s", p->name, suffix_of(src[s]));
                const zoe_st_tensor *f = zoe_safetensors_find(file_table, name);
                /* scales the file lacks (its moments are not int8) or that another grid wrote
                 * (read whole to requantise the codes: ckpt_int8_blocks) */
                if (!f) continue;
                entry = (int)(f - file_table->tensors);
                if (is_scales(src[s])) {
                    snprintf(name, sizeof name, "%s%s", p->name, suffix_of(src[s] - CKPT_PARAMS));
                    const zoe_st_tensor *codes = zoe_safetensors_find(file_table, name);
                    if (int8 && codes && int8[codes - file_table->tensors].scales) continue;
                }
            }
            int once = v->tp_rank % p->replicas == 0;
            if (!reading && !once) continue;
            size_t first, count, part, flat;
            ZOE_TRY(zoe_optimizer_tensor_shard(v->opt, t, &first, &count, &part));
            ZOE_TRY(zoe_optimizer_tensor_offset(v->opt, t, &flat));
            zoe_status st = ZOE_OK;
            /* Streamed weights: the parameter buffer is the rank's partition (host) */
            int streamed = v->cfg->offload_params != ZOE_OFFLOAD_PARAMS_NONE;
            if (is_scales(src[s])) {
                /* the blocks of [first, first + count), row tp_rank / replicas of the scales */
                const size_t bs = ZOE_OPTIMIZER_INT8_BLOCK;
                size_t b0 = first / bs, b1 = (first + count + bs - 1) / bs;
                ckpt_run r = {.entry = entry,
                              .source = src[s],
                              .mem = part / bs,
                              .gidx = (uint64_t)((v->tp_rank / p->replicas) * shard_blocks(p)) + b0,
                              .n = count ? b1 - b0 : 0,
                              .counted = once};
                st = ckpt_runs_add(out, &r);
            } else if (src[s] == CKPT_PARAMS && reading && !streamed)
                st = shard_runs(v, p, entry, src[s], 0, (size_t)p->local_numel, flat,
                                once && v->dp_rank == 0, out);
            else if (src[s] == CKPT_PARAMS && streamed)
                st = shard_runs(v, p, entry, src[s], first, count, part, once, out);
            else
                st = shard_runs(v, p, entry, src[s], first, count,
                                src[s] == CKPT_PARAMS ? flat + first : part, once, out);
            if (st != ZOE_OK) {
                ckpt_runs_free(out);
                return st;
            }
        }
    return ZOE_OK;
}

static ckpt_io io_of(const ckpt_view *v) {
    return (ckpt_io){.comm = zoe_grid_world_comm(v->grid),
                     .opt = v->opt,
                     .params = zoe_optimizer_params(v->opt),
                     .params_on_host = zoe_optimizer_params_on_host(v->opt),
                     .stream = zoe_trainer_stream(v->tr),
                     .round_bytes = zoe_ckpt_round_bytes()};
}

/* ---- trainer.json ---- */

static void add_hex(cJSON *obj, const char *key, uint64_t v) {
    char hex[32];
    snprintf(hex, sizeof hex, "%016" PRIx64, v);
    cJSON_AddStringToObject(obj, key, hex);
}

static char *trainer_json(const ckpt_view *v, const zoe_optimizer_progress *op, int refresh_due,
                          int files, zoe_safetensors *tables, uint64_t **sums) {
    const zoe_train_config *c = v->cfg;
    int step = zoe_trainer_steps_done(v->tr), dp = zoe_grid_dp_size(v->grid);
    cJSON *root = cJSON_CreateObject();
    char text[64];
    cJSON_AddStringToObject(root, "format", CKPT_FORMAT);
    cJSON_AddNumberToObject(root, "format_version", CKPT_FORMAT_VERSION);
    snprintf(text, sizeof text, "%d.%d.%d", ZOE_VERSION_MAJOR, ZOE_VERSION_MINOR,
             ZOE_VERSION_PATCH);
    cJSON_AddStringToObject(root, "zoe_version", text);
    cJSON_AddNumberToObject(root, "step", step);
    cJSON_AddNumberToObject(root, "next_lr", zoe_train_lr_at(c, step));
    cJSON *o = cJSON_AddObjectToObject(root, "optimizer");
    cJSON_AddNumberToObject(o, "iteration", (double)op->iteration);
    cJSON_AddNumberToObject(o, "step", (double)op->step);
    cJSON_AddNumberToObject(o, "skipped_total", (double)op->skipped_total);
    cJSON_AddNumberToObject(o, "loss_scale", op->loss_scale);
    cJSON_AddNumberToObject(o, "clean_steps", op->clean_steps);
    cJSON_AddNumberToObject(o, "last_lr", op->last_lr);
    cJSON_AddBoolToObject(o, "refresh_due", refresh_due);
    cJSON *d = cJSON_AddObjectToObject(root, "data");
    cJSON_AddNumberToObject(d, "next_step", step);
    snprintf(text, sizeof text, "%" PRIu64, c->seed);
    cJSON_AddStringToObject(d, "seed", text);
    cJSON_AddNumberToObject(d, "global_batch", (double)dp * c->grad_accum * c->micro_batch);
    cJSON_AddNumberToObject(root, "dropout_forward_count", (double)zoe_gpt_forward_count(v->gpt));
    cJSON *g = cJSON_AddObjectToObject(root, "grid");
    cJSON_AddNumberToObject(g, "world", zoe_grid_world_size(v->grid));
    cJSON_AddNumberToObject(g, "tp", zoe_grid_tp_size(v->grid));
    cJSON_AddNumberToObject(g, "dp", dp);
    cJSON *m = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(m, "name", c->model.name);
    cJSON_AddNumberToObject(m, "layers", c->model.layers);
    cJSON_AddNumberToObject(m, "hidden", c->model.hidden);
    cJSON_AddNumberToObject(m, "heads", c->model.heads);
    cJSON_AddNumberToObject(m, "ffn", c->model.ffn ? c->model.ffn : 4 * c->model.hidden);
    cJSON_AddNumberToObject(m, "seq_len", c->model.seq_len);
    cJSON_AddNumberToObject(m, "max_positions", zoe_model_position_rows(&c->model));
    cJSON_AddNumberToObject(m, "vocab", c->model.vocab);
    cJSON_AddNumberToObject(m, "dropout", c->model.dropout);
    cJSON_AddStringToObject(m, "family", zoe_model_family_name(c->model.family));
    if (c->model.family == ZOE_MODEL_LLAMA) {
        cJSON_AddNumberToObject(m, "kv_heads",
                                c->model.kv_heads ? c->model.kv_heads : c->model.heads);
        cJSON_AddNumberToObject(m, "rope_theta", c->model.rope_theta);
        cJSON_AddNumberToObject(m, "norm_eps", c->model.norm_eps);
        cJSON_AddBoolToObject(m, "tie_embeddings", c->model.tie_embeddings);
        const zoe_rope_scaling *rs = &c->model.rope_scaling;
        if (rs->factor > 0) {
            cJSON *r = cJSON_AddObjectToObject(m, "rope_scaling");
            cJSON_AddNumberToObject(r, "factor", rs->factor);
            cJSON_AddNumberToObject(r, "low_freq_factor", rs->low_freq_factor);
            cJSON_AddNumberToObject(r, "high_freq_factor", rs->high_freq_factor);
            cJSON_AddNumberToObject(r, "original_max_position", rs->original_max_position);
        }
    }
    cJSON_AddStringToObject(root, "dtype", zoe_dtype_name(c->dtype));
    /* the imported model's own config.json, for the export (docs/hf.md, "Export") */
    const char *hf = zoe_trainer_hf_config(v->tr);
    if (hf) cJSON_AddItemToObject(root, "hf_config", cJSON_Parse(hf));
    char *config = zoe_train_config_json(c);
    cJSON_AddItemToObject(root, "config", config ? cJSON_Parse(config) : cJSON_CreateNull());
    free(config);
    cJSON *f = cJSON_AddObjectToObject(root, "files");
    for (int i = 0; i < files; i++) {
        cJSON *e = cJSON_AddObjectToObject(f, file_names[i]);
        cJSON_AddNumberToObject(e, "bytes", (double)(tables[i].data_offset + tables[i].data_size));
        cJSON *s = cJSON_AddObjectToObject(e, "checksums");
        for (int t = 0; t < tables[i].count; t++) add_hex(s, tables[i].tensors[t].name, sums[i][t]);
    }
    char *out = cJSON_Print(root);
    cJSON_Delete(root);
    return out;
}

/* ---- save ---- */

static int64_t json_num(const cJSON *obj, const char *key, int64_t fallback) {
    int64_t n = fallback;
    zoe_json_int64(cJSON_GetObjectItemCaseSensitive(obj, key), &n);
    return n;
}

/* Rank 0: the partial directory, fresh. *skip when the step is already saved. */
static zoe_status prepare_dir(const char *dir, const char *name, int *skip) {
    char p[ZOE_PATH_MAX * 2];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return zoe_fail(ZOE_ERR_IO, "cannot create checkpoint directory %s: %s", dir,
                        strerror(errno));
    snprintf(p, sizeof p, "%s/%s/%s", dir, name, CKPT_TRAINER_FILE);
    struct stat sb;
    *skip = stat(p, &sb) == 0;
    if (*skip) return ZOE_OK;
    snprintf(p, sizeof p, "%s/%s.partial", dir, name);
    ZOE_TRY(ckpt_remove_tree(p)); /* a crashed save of the same step */
    if (mkdir(p, 0755) != 0)
        return zoe_fail(ZOE_ERR_IO, "cannot create %s: %s", p, strerror(errno));
    return ZOE_OK;
}

/* Bytes a checkpoint of files files takes: the safetensors files as the tables say, and room
 * for trainer.json (its fixed part, and a name and a checksum per tensor). */
static zoe_status checkpoint_bytes(const ckpt_view *v, int files, uint64_t *bytes) {
    *bytes = 64 << 10;
    for (int f = 0; f < files; f++) {
        zoe_safetensors t;
        ZOE_TRY(build_table(v, f, &t));
        *bytes += t.data_offset + t.data_size + 160 * (uint64_t)t.count;
        zoe_safetensors_free(&t);
    }
    return ZOE_OK;
}

zoe_status zoe_trainer_checkpoint_bytes(zoe_trainer *tr, uint64_t *bytes) {
    if (!tr || !bytes) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "checkpoint bytes: NULL argument");
    ckpt_view v = view_of(tr);
    /* the third file whenever a delayed update may be in flight at a save */
    int dpu = v.cfg->dpu != ZOE_DPU_OFF && v.cfg->dpu_warmup > 0;
    return checkpoint_bytes(&v, dpu ? NUM_FILES : FILE_PARAMS, bytes);
}

/* Rank 0, after writing trainer.json: it reads back with every file's size and every tensor's
 * checksum as written (the files themselves were read back as they were written). */
static zoe_status verify_trainer_json(const char *partial, int files, const zoe_safetensors *tables,
                                      uint64_t *const *sums) {
    cJSON *root = NULL;
    ZOE_TRY(ckpt_read_trainer_json(partial, &root));
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(root, "files");
    zoe_status st = ZOE_OK;
    for (int f = 0; st == ZOE_OK && f < files; f++) {
        const cJSON *entry = cJSON_GetObjectItemCaseSensitive(all, file_names[f]);
        uint64_t want = tables[f].data_offset + tables[f].data_size, recorded = 0;
        if (json_num(entry, "bytes", -1) != (int64_t)want)
            st = zoe_fail(ZOE_ERR_IO, "%s/%s reads back without the size of %s", partial,
                          CKPT_TRAINER_FILE, file_names[f]);
        for (int t = 0; st == ZOE_OK && t < tables[f].count; t++) {
            st = ckpt_recorded_checksum(root, partial, file_names[f], tables[f].tensors[t].name,
                                        &recorded);
            if (st == ZOE_OK && recorded != sums[f][t])
                st = zoe_fail(ZOE_ERR_IO, "%s/%s reads back with another checksum of %s in %s",
                              partial, CKPT_TRAINER_FILE, tables[f].tensors[t].name, file_names[f]);
        }
    }
    cJSON_Delete(root);
    return st;
}

/* Rank 0, after a save failed on some rank: the partial directory goes (a full disk stays full
 * otherwise), latest and the complete checkpoints stay, and the message says how much room the
 * checkpoint needs. */
static zoe_status discard_partial(const ckpt_view *v, int files, const char *partial,
                                  zoe_status failed) {
    struct stat sb;
    if (stat(partial, &sb) != 0) return failed; /* committed: the failure came after */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", zoe_last_error());
    uint64_t need = 0;
    checkpoint_bytes(v, files, &need);
    zoe_status removed = ckpt_remove_tree(partial);
    int gib = need >= (1ull << 30);
    return zoe_fail(failed, "%s; %s %s (the checkpoint needs %.2f %s; earlier ones are kept)", msg,
                    partial, removed == ZOE_OK ? "removed" : "could not be removed",
                    (double)need / (gib ? 1073741824.0 : 1048576.0), gib ? "GiB" : "MiB");
}

static zoe_status save_checkpoint(zoe_trainer *tr, const char *dir, int keep_last, char *saved,
                                  size_t cap) {
    ckpt_view v = view_of(tr);
    MPI_Comm comm = zoe_grid_world_comm(v.grid);
    int rank = zoe_grid_rank(v.grid), skip = 0, refresh_due = 0;
    char name[32], partial[ZOE_PATH_MAX * 2], path[ZOE_PATH_MAX * 3];
    ckpt_step_name(zoe_trainer_steps_done(tr), name, sizeof name);
    snprintf(partial, sizeof partial, "%s/%s.partial", dir, name);
    if (saved) snprintf(saved, cap, "%s/%s", dir, name);
    zoe_status st = ZOE_OK;
    if (rank == 0) st = prepare_dir(dir, name, &skip);
    ZOE_TRY(zoe_agree(comm, st));
    MPI_Bcast(&skip, 1, MPI_INT, 0, comm);
    if (skip) return ZOE_OK;
    ZOE_TRY(zoe_agree(comm, zoe_optimizer_settle(v.opt, &refresh_due)));
    zoe_optimizer_progress op;
    ZOE_TRY(zoe_optimizer_progress_get(v.opt, &op));
    zoe_safetensors tables[NUM_FILES];
    uint64_t *sums[NUM_FILES] = {0};
    int files = refresh_due ? 3 : 2, built = 0;
    /* The room first: a disk that cannot hold the checkpoint fails the save before a byte is
     * written (the earlier checkpoints stay until this one is complete, so it needs its own). */
    uint64_t need = 0;
    if (rank == 0) st = checkpoint_bytes(&v, files, &need);
    if (st == ZOE_OK && rank == 0) st = ckpt_room_check("save into", dir, need);
    st = zoe_agree(comm, st);
    ckpt_io io = io_of(&v);
    for (; st == ZOE_OK && built < files; built++) {
        ckpt_runs runs;
        st = build_table(&v, built, &tables[built]);
        if (st != ZOE_OK) break;
        sums[built] = calloc((size_t)tables[built].count, sizeof(uint64_t));
        st = sums[built] ? file_runs(&v, built, 0, NULL, NULL, &runs)
                         : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "checksums");
        st = zoe_agree(comm, st);
        if (st != ZOE_OK) {
            built++;
            break;
        }
        snprintf(path, sizeof path, "%s/%s", partial, file_names[built]);
        st = ckpt_file_write(&io, path, &tables[built], &runs, sums[built]);
        ckpt_runs_free(&runs);
    }
    /* latest moves only once the checkpoint is complete and read back; older ones are pruned
     * only after that. */
    if (st == ZOE_OK && rank == 0) {
        char *json = trainer_json(&v, &op, refresh_due, files, tables, sums);
        snprintf(path, sizeof path, "%s/%s", partial, CKPT_TRAINER_FILE);
        st = json ? ckpt_write_text(path, json) : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "trainer.json");
        free(json);
        if (st == ZOE_OK) st = verify_trainer_json(partial, files, tables, sums);
        if (st == ZOE_OK) {
            char partial_name[64];
            snprintf(partial_name, sizeof partial_name, "%s.partial", name);
            st = ckpt_commit(dir, partial_name, name);
        }
        if (st == ZOE_OK) st = ckpt_prune(dir, keep_last, name);
    }
    for (int i = 0; i < built; i++) {
        zoe_safetensors_free(&tables[i]);
        free(sums[i]);
    }
    st = zoe_agree(comm, st);
    if (st != ZOE_OK && rank == 0) st = discard_partial(&v, files, partial, st);
    return zoe_agree(comm, st);
}

/* ---- load ---- */

/* The run it was written by must be compatible with this trainer's: the same data order and
 * global batch (the loader then continues at the step), the same sequence length. */
static zoe_status check_run(const ckpt_view *v, const cJSON *root, const char *dir) {
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(data, "seed");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const zoe_train_config *c = v->cfg;
    int64_t global = (int64_t)zoe_grid_dp_size(v->grid) * c->grad_accum * c->micro_batch;
    int64_t saved_global = json_num(data, "global_batch", -1);
    if (saved_global != global)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s was written with a global batch of %lld sequences, this run has %lld "
                        "(dp %d x --grad-accum %d x --micro-batch %d): keep dp x grad-accum x "
                        "micro-batch the same to resume",
                        dir, (long long)saved_global, (long long)global, zoe_grid_dp_size(v->grid),
                        c->grad_accum, c->micro_batch);
    char mine[32];
    snprintf(mine, sizeof mine, "%" PRIu64, c->seed);
    if (!cJSON_IsString(seed) || strcmp(seed->valuestring, mine) != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s was written with --seed %s, this run has %s",
                        dir, cJSON_IsString(seed) ? seed->valuestring : "?", mine);
    /* --split chooses the training documents: another split is another data order */
    const cJSON *split =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "config"), "split");
    char split_now[32] = "none";
    if (c->split_train)
        snprintf(split_now, sizeof split_now, "%d,%d", c->split_train, c->split_val);
    if (cJSON_IsString(split) && strcmp(split->valuestring, split_now) != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s was written with --split %s, this run has %s: the training documents "
                        "would differ",
                        dir, split->valuestring, split_now);
    if (json_num(model, "seq_len", -1) != c->model.seq_len)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s was written with --seq-len %lld, this run has %d", dir,
                        (long long)json_num(model, "seq_len", -1), c->model.seq_len);
    return ZOE_OK;
}

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && strcmp(s + n - k, tail) == 0;
}

/* A tensor of the file that the trainer does not have, named as the trainer's tensor w (which the
 * file lacks) but for one byte: a byte flipped inside the header, not another model's tensor. */
static const zoe_st_tensor *renamed_in_header(const zoe_safetensors *file,
                                              const zoe_safetensors *want, const zoe_st_tensor *w) {
    size_t len = strlen(w->name);
    for (int i = 0; i < file->count; i++) {
        const zoe_st_tensor *f = &file->tensors[i];
        if (strlen(f->name) != len || zoe_safetensors_find(want, f->name)) continue;
        int differ = 0;
        for (size_t k = 0; k < len; k++) differ += f->name[k] != w->name[k];
        if (differ == 1) return f;
    }
    return NULL;
}

/* The file's table against the trainer's: every tensor present with its dtype and shape. The
 * moments may be in any state dtype, F32, BF16 or int8 codes (I8 or U8) with their scales
 * (converted on load: a checkpoint of one state dtype resumes with another; older zoe stored
 * int8 moments as F32 values). The scales' shape is the grid's that wrote them (checked by
 * int8_blocks). */
static zoe_status check_table(const zoe_safetensors *file, const zoe_safetensors *want,
                              int any_state_dtype, const char *path) {
    int expected = 0;
    char name[ZOE_TP_NAME_MAX + 24];
    for (int i = 0; i < want->count; i++) {
        const zoe_st_tensor *w = &want->tensors[i], *f = zoe_safetensors_find(file, w->name);
        if (ends_with(w->name, ".scales")) continue;
        expected++;
        const zoe_st_tensor *odd = f ? NULL : renamed_in_header(file, want, w);
        if (odd)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "%s: the safetensors header is corrupt: the entry of data bytes "
                            "%" PRIu64 "..%" PRIu64 " is named \"%s\" where \"%s\" was "
                            "expected (one byte differs; zoe-ckpt verify checks the rest)",
                            path, odd->begin, odd->end, odd->name, w->name);
        if (!f)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "%s has no tensor %s (a checkpoint of another model?)", path, w->name);
        int codes = any_state_dtype && (f->dtype == ZOE_ST_I8 || f->dtype == ZOE_ST_U8);
        int dtype_ok = f->dtype == w->dtype || codes ||
                       (any_state_dtype && (f->dtype == ZOE_ST_F32 || f->dtype == ZOE_ST_BF16));
        if (codes) {
            snprintf(name, sizeof name, "%s.scales", w->name);
            const zoe_st_tensor *sc = zoe_safetensors_find(file, name);
            if (!sc || sc->dtype != ZOE_ST_F32 || sc->ndim != 2)
                return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                                "%s: int8 moment %s has no F32 [shards, blocks] tensor %s", path,
                                w->name, name);
            expected++;
        }
        int same = f->ndim == w->ndim && dtype_ok;
        for (int d = 0; same && d < w->ndim; d++) same = f->shape[d] == w->shape[d];
        if (!same)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "%s: tensor %s is %s [%lld, %lld] in the file but %s [%lld, %lld] in "
                            "this model (a checkpoint of another model shape?)",
                            path, w->name, zoe_st_dtype_name(f->dtype), (long long)f->shape[0],
                            (long long)(f->ndim > 1 ? f->shape[1] : 1), zoe_st_dtype_name(w->dtype),
                            (long long)w->shape[0], (long long)(w->ndim > 1 ? w->shape[1] : 1));
    }
    if (file->count != expected)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s holds %d tensors, this model %d", path,
                        file->count, expected);
    return ZOE_OK;
}

static void int8_blocks_free(ckpt_int8_blocks *b, int count) {
    for (int i = 0; b && i < count; i++) free(b[i].scales), free(b[i].shard);
    free(b);
}

/* The int8 moments of the optimizer file that are requantised on load: every one whose blocks
 * are another grid's (its scales' shape differs from this run's: blocks count per TP shard) or
 * that this run holds in another dtype. Their scales are read whole on every rank, and each
 * shard's place comes from the model described at the TP that wrote them (trainer.json). Sets
 * *out to NULL where none is. */
static zoe_status int8_blocks(const ckpt_view *v, const cJSON *root, const char *path,
                              const zoe_safetensors *got, const zoe_safetensors *want,
                              ckpt_int8_blocks **out) {
    *out = NULL;
    MPI_Comm comm = zoe_grid_world_comm(v->grid);
    int saved_tp = (int)json_num(cJSON_GetObjectItemCaseSensitive(root, "grid"), "tp", 0);
    ckpt_int8_blocks *b = NULL;
    zoe_gpt **old = NULL;
    zoe_status st = ZOE_OK;
    int requantised = 0;
    char name[ZOE_TP_NAME_MAX + 24];
    const ckpt_source moments[2] = {CKPT_EXP_AVG, CKPT_EXP_AVG_SQ};
    for (int m = 0; st == ZOE_OK && m < 2; m++)
        for (int t = 0; st == ZOE_OK && t < v->num_tensors; t++) {
            const zoe_tp_param *p = zoe_gpt_tensor(v->gpt, t);
            snprintf(name, sizeof name, "%s%s", p->name, suffix_of(moments[m]));
            const zoe_st_tensor *codes = zoe_safetensors_find(got, name);
            if (!codes || (codes->dtype != ZOE_ST_I8 && codes->dtype != ZOE_ST_U8)) continue;
            snprintf(name, sizeof name, "%s%s", p->name, suffix_of(moments[m] + CKPT_PARAMS));
            const zoe_st_tensor *sc = zoe_safetensors_find(got, name),
                                *mine = zoe_safetensors_find(want, name);
            if (mine && mine->shape[0] == sc->shape[0] && mine->shape[1] == sc->shape[1])
                continue; /* the same blocks: codes and scales move as they are */
            int shards = (int)sc->shape[0];
            if (saved_tp <= 0 || shards <= 0 || saved_tp % shards != 0) {
                st = zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                              "%s: %s has %d shards, not a divisor of the TP %d it was written at",
                              path, name, shards, saved_tp);
                break;
            }
            if (!b) b = calloc((size_t)got->count, sizeof *b);
            if (!old) old = calloc((size_t)saved_tp, sizeof *old);
            if (!b || !old) {
                st = zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "int8 blocks");
                break;
            }
            ckpt_int8_blocks *e = &b[codes - got->tensors];
            e->shards = shards;
            e->is_v = codes->dtype == ZOE_ST_U8;
            e->blocks = sc->shape[1];
            e->cols = p->global_shape[1];
            e->shard = calloc((size_t)shards, sizeof *e->shard);
            e->scales = malloc((size_t)(shards * e->blocks) * sizeof(float));
            if (!e->shard || !e->scales) {
                st = zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "int8 scales of %s", name);
                break;
            }
            zoe_gpt_config gc = zoe_train_gpt_config(v->cfg);
            for (int s = 0; st == ZOE_OK && s < shards; s++) {
                int r = s * (saved_tp / shards);
                if (!old[r]) st = zoe_gpt_describe(&gc, saved_tp, r, &old[r]);
                if (st != ZOE_OK) break;
                const zoe_tp_param *q = zoe_gpt_tensor(old[r], t);
                if (shard_blocks(q) != e->blocks)
                    st = zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                                  "%s: %s has %lld blocks a shard, TP %d shards hold %lld", path,
                                  name, (long long)e->blocks, saved_tp, (long long)shard_blocks(q));
                int64_t place[4] = {q->local_offset[0], q->local_shape[0], q->local_offset[1],
                                    q->local_shape[1]};
                memcpy(e->shard[s], place, sizeof place);
            }
            if (st == ZOE_OK)
                st = ckpt_read_tensor(comm, path, got, (int)(sc - got->tensors), e->scales);
            requantised++;
        }
    for (int r = 0; old && r < saved_tp; r++) zoe_gpt_destroy(old[r]);
    free(old);
    if (st != ZOE_OK) {
        int8_blocks_free(b, got->count);
        return st;
    }
    if (requantised && zoe_grid_rank(v->grid) == 0)
        zoe_log(ZOE_LOG_INFO,
                "%s: %d int8 moment tensors written at TP %d (blocks count per TP shard) are "
                "requantised for this run (TP %d, its moments' dtypes)",
                path, requantised, saved_tp, zoe_grid_tp_size(v->grid));
    *out = b;
    return ZOE_OK;
}

/* Reads one file into the trainer and verifies its checksums. */
static zoe_status load_file(const ckpt_view *v, const cJSON *root, const char *dir, int file,
                            const char *hint) {
    char path[ZOE_PATH_MAX * 2];
    snprintf(path, sizeof path, "%s/%s", dir, file_names[file]);
    MPI_Comm comm = zoe_grid_world_comm(v->grid);
    zoe_safetensors want, got;
    zoe_safetensors_init(&got);
    ZOE_TRY(build_table(v, file, &want));
    zoe_status st = zoe_safetensors_read_header(path, &got);
    const cJSON *entry = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(root, "files"), file_names[file]);
    int64_t bytes = json_num(entry, "bytes", -1);
    if (st == ZOE_OK && bytes != (int64_t)(got.data_offset + got.data_size))
        st = zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: %llu bytes, trainer.json says %lld", path,
                      (unsigned long long)(got.data_offset + got.data_size), (long long)bytes);
    if (st == ZOE_OK) st = check_table(&got, &want, file == FILE_OPTIMIZER, path);
    st = zoe_agree(comm, st);
    ckpt_int8_blocks *int8 = NULL;
    if (st == ZOE_OK && file == FILE_OPTIMIZER)
        st = zoe_agree(comm, int8_blocks(v, root, path, &got, &want, &int8));
    ckpt_runs runs = {0};
    if (st == ZOE_OK) st = file_runs(v, file, 1, &got, int8, &runs);
    uint64_t *sums = calloc((size_t)got.count, sizeof *sums);
    if (st == ZOE_OK && !sums) st = zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "checksums");
    st = zoe_agree(comm, st);
    ckpt_io io = io_of(v);
    io.int8 = int8;
    /* int8 moments requantised from values (an older file's F32, another grid's blocks) are
     * written through their blocks (zoe_optimizer_write_state): a block whose elements arrive in
     * several runs holds them exactly once all are there, so the optimizer file is read twice,
     * the second pass over the first (docs/checkpoint.md). */
    int passes = file == FILE_OPTIMIZER &&
                         (holds_int8(v, ZOE_STATE_EXP_AVG) || holds_int8(v, ZOE_STATE_EXP_AVG_SQ))
                     ? 2
                     : 1;
    for (int pass = 0; st == ZOE_OK && pass < passes; pass++)
        st = ckpt_file_read(&io, path, &got, &runs, sums);
    /* scales read whole (requantised codes): their checksum from that copy */
    for (int i = 0; st == ZOE_OK && int8 && i < got.count; i++) {
        if (!int8[i].scales) continue;
        char name[ZOE_TP_NAME_MAX + 24];
        snprintf(name, sizeof name, "%s.scales", got.tensors[i].name);
        const zoe_st_tensor *sc = zoe_safetensors_find(&got, name);
        sums[sc - got.tensors] =
            ckpt_hash_elements(ckpt_salt(name), 0, int8[i].scales,
                               (uint64_t)(int8[i].shards * int8[i].blocks), sizeof(float));
    }
    int8_blocks_free(int8, got.count);
    for (int i = 0; st == ZOE_OK && i < got.count; i++) {
        uint64_t recorded;
        st = ckpt_recorded_checksum(root, dir, file_names[file], got.tensors[i].name, &recorded);
        if (st == ZOE_OK && recorded != sums[i])
            st = zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                          "%s: tensor %s: checksum %016" PRIx64
                          " but trainer.json records %016" PRIx64 " (corrupted)",
                          path, got.tensors[i].name, sums[i], recorded);
    }
    free(sums);
    ckpt_runs_free(&runs);
    zoe_safetensors_free(&got);
    zoe_safetensors_free(&want);
    if (st != ZOE_OK && hint[0]) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", zoe_last_error());
        return zoe_fail(st, "%s%s", msg, hint);
    }
    return st;
}

static zoe_status load_resolved(const ckpt_view *v, const char *dir) {
    MPI_Comm comm = zoe_grid_world_comm(v->grid);
    char hint[ZOE_PATH_MAX * 3];
    ckpt_previous_hint(dir, hint, sizeof hint);
    cJSON *root = NULL;
    zoe_status st = ckpt_read_trainer_json(dir, &root);
    if (st == ZOE_OK) st = check_run(v, root, dir);
    st = zoe_agree(comm, st);
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "optimizer");
    int refresh_due = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "refresh_due"));
    /* The stale weights are in the compute dtype of the run that saved; another dtype cannot
     * continue its trajectory exactly anyway, so it starts from the latest weights instead. */
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(root, "dtype");
    if (refresh_due && (!cJSON_IsString(dtype) ||
                        strcmp(dtype->valuestring, zoe_dtype_name(v->cfg->dtype)) != 0)) {
        zoe_log(ZOE_LOG_INFO,
                "%s: saved in another compute dtype: the pending delayed update is "
                "applied at once",
                dir);
        refresh_due = 0;
    }
    for (int file = 0; st == ZOE_OK && file < FILE_PARAMS; file++)
        st = zoe_agree(comm, load_file(v, root, dir, file, hint));
    zoe_optimizer_progress op = {.iteration = json_num(o, "iteration", -1),
                                 .step = json_num(o, "step", -1),
                                 .skipped_total = json_num(o, "skipped_total", -1),
                                 .loss_scale = -1,
                                 .clean_steps = (int)json_num(o, "clean_steps", -1)};
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(o, "loss_scale");
    if (cJSON_IsNumber(ls)) op.loss_scale = (float)ls->valuedouble;
    const cJSON *last_lr = cJSON_GetObjectItemCaseSensitive(o, "last_lr");
    if (cJSON_IsNumber(last_lr)) op.last_lr = (float)last_lr->valuedouble; /* older: none */
    if (st == ZOE_OK) st = zoe_agree(comm, zoe_optimizer_progress_set(v->opt, &op));
    double t0 = MPI_Wtime();
    if (st == ZOE_OK) st = zoe_agree(comm, zoe_optimizer_refresh_params(v->opt));
    zoe_log(ZOE_LOG_DEBUG, "load: refresh of the parameters %.3f s", MPI_Wtime() - t0);
    /* Under DPU the next forward reads the stale weights; the latest are refreshed at the next
     * step, as in the run that saved. */
    if (st == ZOE_OK && refresh_due) st = zoe_agree(comm, zoe_optimizer_defer_refresh(v->opt));
    if (st == ZOE_OK && refresh_due)
        st = zoe_agree(comm, load_file(v, root, dir, FILE_PARAMS, hint));
    if (st == ZOE_OK) {
        zoe_gpt_set_forward_count(v->gpt, (uint64_t)json_num(root, "dropout_forward_count", 0));
        zoe_trainer_set_steps_done(v->tr, (int)json_num(root, "step", 0));
    }
    /* the model's Hugging Face config goes on with the run, into its next saves */
    const cJSON *hf = cJSON_GetObjectItemCaseSensitive(root, "hf_config");
    if (st == ZOE_OK && cJSON_IsObject(hf)) {
        char *text = cJSON_PrintUnformatted(hf);
        st = text ? zoe_trainer_set_hf_config(v->tr, text)
                  : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "%s: hf_config", dir);
        free(text);
    }
    cJSON_Delete(root);
    return st;
}

static zoe_status load_checkpoint(zoe_trainer *tr, const char *path, char *loaded, size_t cap) {
    ckpt_view v = view_of(tr);
    MPI_Comm comm = zoe_grid_world_comm(v.grid);
    char dir[ZOE_PATH_MAX] = "";
    zoe_status st = ZOE_OK;
    if (zoe_grid_rank(v.grid) == 0) st = zoe_checkpoint_resolve(path, dir, sizeof dir);
    ZOE_TRY(zoe_agree(comm, st));
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, comm);
    if (loaded) snprintf(loaded, cap, "%s", dir);
    return load_resolved(&v, dir);
}

/* The stall watchdog names a save or a load a rank waits in. */
zoe_status zoe_trainer_save(zoe_trainer *tr, const char *dir, int keep_last, char *saved,
                            size_t cap) {
    if (!tr || !dir || !*dir) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "save: no directory");
    zoe_trainer_watch(tr, ZOE_PHASE_SAVE);
    zoe_status st = save_checkpoint(tr, dir, keep_last, saved, cap);
    zoe_trainer_watch(tr, ZOE_PHASE_BETWEEN);
    return st;
}

zoe_status zoe_trainer_load(zoe_trainer *tr, const char *path, char *loaded, size_t cap) {
    if (!tr || !path) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "load: NULL argument");
    zoe_trainer_watch(tr, ZOE_PHASE_LOAD);
    zoe_status st = load_checkpoint(tr, path, loaded, cap);
    zoe_trainer_watch(tr, ZOE_PHASE_BETWEEN);
    return st;
}
