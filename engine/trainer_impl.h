/* Internal to engine/ and its tests: the parts of a trainer that the public header hides. */
#ifndef ZOE_ENGINE_TRAINER_IMPL_H
#define ZOE_ENGINE_TRAINER_IMPL_H

#include "zoe/optimizer.h"
#include "zoe/train.h"

/* The trainer's offload optimizer (tests drive it to build reference schedules). */
zoe_optimizer *zoe_trainer_optimizer(zoe_trainer *tr);

#endif
