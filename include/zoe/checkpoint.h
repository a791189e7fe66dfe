/* Checkpoints: a trainer's state saved in global layout, resumable at any TP x DP grid
 * (docs/checkpoint.md describes the files, the DPU rule and the crash-safety protocol).
 *
 *   DIR/step-00000400/model.safetensors        fp32 master weights, global shapes, zoe's names
 *   DIR/step-00000400/optimizer.safetensors    NAME.exp_avg and NAME.exp_avg_sq (fp32)
 *   DIR/step-00000400/params-in-use.safetensors  only when a delayed update was pending: the
 *                                              compute-dtype weights the next forward reads
 *   DIR/step-00000400/trainer.json             step, optimizer counters, loss scale, data and
 *                                              dropout positions, configuration, shape, grid,
 *                                              zoe version, file sizes and per-tensor checksums
 *   DIR/latest                                 the name of the newest complete checkpoint
 *
 * A save checks the room it needs, reserves each file's bytes, writes into step-N.partial/,
 * checks every write, syncs, reads the files back against their checksums, renames the directory
 * to step-N and then replaces latest by write-temp-and-rename, so a crash or a full disk at any
 * moment leaves the previous checkpoint complete and latest naming it. */
#ifndef ZOE_CHECKPOINT_H
#define ZOE_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "zoe/status.h"
#include "zoe/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Steps the trainer has taken (continues from a loaded checkpoint's step). */
int zoe_trainer_steps_done(const zoe_trainer *tr);

/* Collective over the trainer's ranks. Saves the state after the last step into
 * dir/step-NNNNNNNN (dir is created if needed) without disturbing the run: under DPU the update
 * in flight is completed, but the weights the next forward reads stay as scheduled. Then keeps
 * the keep_last newest complete checkpoints of dir (keep_last <= 0 keeps all). saved (optional,
 * cap bytes) receives the checkpoint's path. A step already saved in dir is not written again.
 * A save that fails on any rank (no room, a write error, a file that reads back otherwise) fails
 * on every rank with the first failing rank's message, which names the file, the bytes needed
 * and the bytes free; it removes step-N.partial and leaves latest and every checkpoint as they
 * were. */
zoe_status zoe_trainer_save(zoe_trainer *tr, const char *dir, int keep_last, char *saved,
                            size_t cap);
/* Collective. Loads path (a checkpoint directory, or a directory of them: its newest complete
 * one) into a trainer created with a compatible configuration: the same model shape, seed,
 * sequence length and global batch (dp x grad_accum x micro_batch); any grid and any split of
 * the batch. Every tensor's checksum is verified. Errors name the file and the tensor, and
 * the previous checkpoint of the directory when there is one. loaded (optional) receives the
 * checkpoint's path. */
zoe_status zoe_trainer_load(zoe_trainer *tr, const char *path, char *loaded, size_t cap);

/* Whether checkpoints can be saved under dir, before a run: an existing writable directory, or
 * a new one a save can make (its parent a writable directory). Nothing is left behind. No MPI. */
zoe_status zoe_checkpoint_dir_check(const char *dir);
/* zoe_checkpoint_dir_check, and a dir that already holds complete checkpoints is refused unless
 * resume (--resume's value, "" or NULL for none) names dir or one of its checkpoints: two runs'
 * steps would mix. No MPI. */
zoe_status zoe_checkpoint_dir_check_run(const char *dir, const char *resume);
/* Bytes one checkpoint of this trainer takes on disk (its files, params-in-use counted under
 * DPU, and room for trainer.json). No MPI. */
zoe_status zoe_trainer_checkpoint_bytes(zoe_trainer *tr, uint64_t *bytes);
/* ZOE_OK when need bytes are free on the file system of dir (or of the directory that will
 * hold it); else names dir, need and free. No MPI. */
zoe_status zoe_checkpoint_room_check(const char *dir, uint64_t need);
/* One run at a time saves into a directory: an exclusive flock on dir/.zoe-save.lock, not
 * waiting, held until release (or the process ends). dir is created if needed (one level), and
 * removed again at release when nothing was saved in it. A directory in use is refused naming
 * the holder. No MPI: the rank that saves takes it. */
typedef struct zoe_checkpoint_lock zoe_checkpoint_lock;
zoe_status zoe_checkpoint_lock_acquire(const char *dir, zoe_checkpoint_lock **out);
void zoe_checkpoint_lock_release(zoe_checkpoint_lock *lock);
/* Resolves path to a checkpoint directory as zoe_trainer_load does. No MPI. */
zoe_status zoe_checkpoint_resolve(const char *path, char *out, size_t cap);
/* zoe-ckpt info: step, model shape, the grid it was written at, files and sizes. No MPI. */
zoe_status zoe_checkpoint_info(const char *path, FILE *out);
/* zoe-ckpt verify: every file's header and size and every tensor's checksum, one process.
 * Fails naming the first bad file and tensor. */
zoe_status zoe_checkpoint_verify(const char *path, FILE *progress);
/* zoe-ckpt export --hf: a Hugging Face directory (config.json and model.safetensors) of the
 * checkpoint's family from its fp32 master weights: GPT2LMHeadModel (Conv1D [in, out] weights,
 * q/k/v split per head, the tied head) or LlamaForCausalLM (q/k/v/o, gate/up/down, its RoPE
 * theta and scaling, lm_head unless tied), transformers' names and layouts through the same
 * mapping as the import (engine/hf/hf.h). out_dir is created; existing files in it are replaced,
 * each written under a temporary name (FILE.tmp) and renamed once complete, so a failed export
 * (a full disk) leaves the files that were there and no partial one. */
zoe_status zoe_checkpoint_export_hf(const char *path, const char *out_dir);

/* Stop requests for training loops: zoe_stop_signals_install() makes SIGTERM, SIGINT and
 * SIGUSR1 set a flag (a second SIGINT ends the process at once, exit status 130); in a process
 * that Open MPI started, so does a SIGCONT from its parent (mpirun or orted), the first signal
 * of mpirun's kill sequence (docs/multi-node.md, "Signals"). The first signal is kept.
 * zoe_stop_requested() is collective over comm: 1 on every rank when any rank was signalled,
 * so all ranks stop at the same step boundary. Returns the signal number through *signo.
 * zoe_stop_signal_name() says what a stop's signal number means, for a message. */
void zoe_stop_signals_install(void);
int zoe_stop_requested(MPI_Comm comm, int *signo);
const char *zoe_stop_signal_name(int signo);

#ifdef __cplusplus
}
#endif
#endif
