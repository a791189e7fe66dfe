/* Internal to engine/: the checkpoint directory protocol and trainer.json, shared by the
 * collective save/load (checkpoint.c), the one-process tools (directory.c) and the
 * Hugging Face export (export_hf.c).
 *
 * Explained in docs/checkpoint.md, "Files" and "Crash safety". */
#ifndef ZOE_ENGINE_CHECKPOINT_IMPL_H
#define ZOE_ENGINE_CHECKPOINT_IMPL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include "zoe/checkpoint.h"

#define CKPT_MODEL_FILE     "model.safetensors"
#define CKPT_OPTIMIZER_FILE "optimizer.safetensors"
#define CKPT_PARAMS_FILE    "params-in-use.safetensors"
#define CKPT_TRAINER_FILE   "trainer.json"
#define CKPT_LATEST_FILE    "latest"
#define CKPT_LOCK_FILE      ".zoe-save.lock"
#define CKPT_FORMAT         "zoe-checkpoint"
#define CKPT_FORMAT_VERSION 1

/* "step-00000400" */
void ckpt_step_name(int step, char *out, size_t cap);
/* Resolves path (zoe_checkpoint_resolve) into dir and parses its trainer.json. */
zoe_status ckpt_open(const char *path, char *dir, size_t cap, cJSON **trainer);
/* trainer.json of a checkpoint directory, parsed; names the file when it is missing or bad. */
zoe_status ckpt_read_trainer_json(const char *ckpt_dir, cJSON **out);
/* The checksum recorded for tensor of file in trainer.json. */
zoe_status ckpt_recorded_checksum(const cJSON *trainer, const char *ckpt_dir, const char *file,
                                  const char *tensor, uint64_t *out);
/* " (the previous checkpoint is DIR/step-N: --resume DIR/step-N)" or "" when there is none. */
void ckpt_previous_hint(const char *ckpt_dir, char *out, size_t cap);
/* fsync of a directory (after creating, renaming or removing entries in it). */
zoe_status ckpt_fsync_dir(const char *dir);
/* Removes a directory tree (a stale partial checkpoint, or one that keep-last drops). */
zoe_status ckpt_remove_tree(const char *dir);
/* Renames parent/partial to parent/final and points parent/latest at it, fsyncing on the way. */
zoe_status ckpt_commit(const char *parent, const char *partial, const char *final_name);
/* Removes all but the keep newest complete checkpoints of parent (never the one named newest). */
zoe_status ckpt_prune(const char *parent, int keep, const char *newest);
/* Bytes free to an unprivileged writer (statvfs's f_bavail) on the file system that holds
 * path, or that would hold it (the nearest existing directory above it); -1 when unknown. */
int64_t ckpt_free_bytes(const char *path);
/* ZOE_OK when need bytes fit in what is free under dir; else names dir, need and free, with
 * what (e.g. "--save") in front. The test-only ZOE_CKPT_TEST_NO_ROOM_CHECK=1 skips it, so that
 * a test can fill a disk in the middle of a save. */
zoe_status ckpt_room_check(const char *what, const char *dir, uint64_t need);
/* Whether the test-only environment variable name is set to 1 (docs/checkpoint.md). */
int ckpt_test_hook_on(const char *name);
/* Renames the complete, synced file tmp over path and fsyncs their directory. */
zoe_status ckpt_replace(const char *tmp, const char *path);
/* Writes text to path and fsyncs it. */
zoe_status ckpt_write_text(const char *path, const char *text);

#endif
