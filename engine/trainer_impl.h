/* Internal to engine/ and its tests: the parts of a trainer that the public header hides. */
#ifndef ZOE_ENGINE_TRAINER_IMPL_H
#define ZOE_ENGINE_TRAINER_IMPL_H

#include "zoe/grid.h"
#include "zoe/optimizer.h"
#include "zoe/train.h"

/* The trainer's offload optimizer (tests drive it to build reference schedules). */
zoe_optimizer *zoe_trainer_optimizer(zoe_trainer *tr);

/* For checkpoints (engine/checkpoint.c). */
typedef struct zoe_gpt zoe_gpt;
zoe_gpt *zoe_trainer_gpt(zoe_trainer *tr);
zoe_grid *zoe_trainer_grid(zoe_trainer *tr);
zoe_stream *zoe_trainer_stream(zoe_trainer *tr);
const zoe_train_config *zoe_trainer_config(const zoe_trainer *tr);
void zoe_trainer_set_steps_done(zoe_trainer *tr, int steps);

#endif
