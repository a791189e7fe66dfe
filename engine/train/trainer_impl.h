/* Internal to engine/ and its tests: the parts of a trainer that the public header hides.
 *
 * Explained in docs/architecture.md, "One step, following the data". */
#ifndef ZOE_ENGINE_TRAINER_IMPL_H
#define ZOE_ENGINE_TRAINER_IMPL_H

#include "engine/train/watchdog.h"
#include "models/gpt.h"
#include "zoe/grid.h"
#include "zoe/optimizer.h"
#include "zoe/train.h"

/* The trainer's offload optimizer (tests drive it to build reference schedules). */
zoe_optimizer *zoe_trainer_optimizer(zoe_trainer *tr);
/* The trainer's device (tests read its allocation counters). */
zoe_device *zoe_trainer_device(zoe_trainer *tr);

/* For checkpoints (engine/checkpoint/checkpoint.c). */
typedef struct zoe_gpt zoe_gpt;
zoe_gpt *zoe_trainer_gpt(zoe_trainer *tr);
zoe_grid *zoe_trainer_grid(zoe_trainer *tr);
zoe_stream *zoe_trainer_stream(zoe_trainer *tr);
const zoe_train_config *zoe_trainer_config(const zoe_trainer *tr);
void zoe_trainer_set_steps_done(zoe_trainer *tr, int steps);
/* The Hugging Face config.json the model came from, compact JSON: --init-from's, or the record
 * of a loaded checkpoint (trainer.json's "hf_config"); NULL for a model zoe initialised. Every
 * save records it, so a resumed or resharded run exports it too (zoe-ckpt export --hf). */
const char *zoe_trainer_hf_config(const zoe_trainer *tr);
zoe_status zoe_trainer_set_hf_config(zoe_trainer *tr, const char *json);
/* Where the rank is, for the watchdog: ZOE_PHASE_SAVE or _LOAD while a checkpoint is written or
 * read, ZOE_PHASE_BETWEEN after. A save settles a pending stop signal (--stop-grace): it is
 * what a stop leads to, and may take longer than the grace. */
void zoe_trainer_watch(zoe_trainer *tr, zoe_step_phase phase);

#endif
