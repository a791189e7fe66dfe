/* What a run's configuration makes: the model's configuration, the optimizer's tensor list and
 * configuration, the share of state offloaded, the checkpoint's staging size. The trainer builds
 * its parts from these and the plan sizes a run with the same functions, so both see the same
 * model and optimizer, and neither reaches into the other.
 *
 * Explained in docs/architecture.md, "engine/ inside"; docs/plan.md. */
#ifndef ZOE_ENGINE_SIZING_H
#define ZOE_ENGINE_SIZING_H

#include <stddef.h>
#include "models/gpt.h"
#include "zoe/optimizer.h"
#include "zoe/train.h"

/* The GPT configuration of a run. */
zoe_gpt_config zoe_train_gpt_config(const zoe_train_config *c);
/* The optimizer's tensor list for g (zoe_gpt_num_tensors(g) entries; names borrowed from g). */
void zoe_train_param_tensors(const zoe_gpt *g, int tp_rank, zoe_param_tensor *tensors);
void zoe_train_optimizer_config(const zoe_train_config *c, const zoe_gpt *g,
                                zoe_optimizer_config *oc);
/* The share of optimizer state offloaded to the host: 0 with --offload none. */
float zoe_train_offload_ratio(const zoe_train_config *c);
/* The optimizer state dtype of a zoe_train_state_dtype value. */
zoe_dtype zoe_train_state_dtype_of(int state_dtype);
/* The bytes one round of a checkpoint's collective I/O stages per rank: 64 MiB, or the test
 * hook ZOE_CKPT_TEST_ROUND_BYTES (engine/checkpoint/mpi_io.h) when it is at least 64. */
size_t zoe_ckpt_round_bytes(void);

#endif
