/* For the plan's tests of --max-model: its run, and the largest member of GPT-3's family with the
 * plan of the family's next member, so that a test can hold the answer to be the largest. */
#ifndef ZOE_TESTS_PLAN_MAX_MODEL_TESTING_H
#define ZOE_TESTS_PLAN_MAX_MODEL_TESTING_H

#include "testing.h"
#include "zoe/plan.h"

/* zoe-plan --max-model's run: seq 2048, vocabulary 50257, micro-batch 1, recompute. */
static inline void max_model_run(zoe_plan_config *p) {
    p->model.seq_len = ZOE_PLAN_MAX_MODEL_SEQ_LEN, p->model.vocab = ZOE_PLAN_MAX_MODEL_VOCAB;
    p->micro_batch = ZOE_PLAN_MAX_MODEL_MICRO_BATCH, p->recompute = ZOE_PLAN_MAX_MODEL_RECOMPUTE;
}

/* The largest member that fits p, its plan, and the plan of the next (p->tp more layers); 0 when
 * none fits. */
static inline int max_model_and_next(const zoe_plan_config *p, zoe_model_config *best,
                                     zoe_plan_result *r, zoe_plan_result *next) {
    if (!CHECK_OK(zoe_plan_max_model(p, best, r))) return 0;
    zoe_plan_config n = *p;
    zoe_plan_family_member(best, best->layers + p->tp, &n.model);
    return CHECK_OK(zoe_plan(&n, next));
}

#endif
