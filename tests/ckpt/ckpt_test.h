/* Checkpoint tests' shared harness: a small GPT trained on the demo corpus through the public
 * trainer API, as zoe-train drives it, and comparisons of checkpoint files. */
#ifndef ZOE_TESTS_CKPT_TEST_H
#define ZOE_TESTS_CKPT_TEST_H

#include "testing.h"
#include "zoe/checkpoint.h"
#include "zoe/data.h"
#include "zoe/train.h"

/* A 2-layer GPT (hidden 64, 4 heads, seq 32, byte vocabulary), global batch 8 sequences. */
void ckpt_test_config(zoe_train_config *c, int tp, int dp, int grad_accum, float dropout,
                      int dpu_warmup);

typedef struct ckpt_session {
    zoe_train_config cfg;
    zoe_trainer *tr;
    zoe_dataset *ds;
    zoe_loader *loader;
    int32_t *tokens, *targets;
    /* Steps run by ckpt_session_steps whose exact-DPU speculation held, and those redone (the
     * speculated update undone and done again): which paths of the schedule a case exercised. */
    int speculated_steps, redone_steps;
} ckpt_session;

zoe_status ckpt_session_open(ckpt_session *s, MPI_Comm comm, const zoe_train_config *cfg,
                             const char *corpus);
/* Steps from the trainer's current step up to (not including) `to`; losses[step] each. */
zoe_status ckpt_session_steps(ckpt_session *s, int to, float *losses);
void ckpt_session_close(ckpt_session *s);

/* A fresh directory made by rank 0, its name on every rank of comm. */
void ckpt_test_tmpdir(MPI_Comm comm, char *out, size_t cap);
/* Removes the directory once every rank of comm is done with it (rank 0 removes it). */
void ckpt_test_rmdir(MPI_Comm comm, const char *dir);
/* 1 when file in both checkpoint directories holds the same tensors with the same bytes. */
int ckpt_test_same_tensors(const char *dir_a, const char *dir_b, const char *file);
/* CHECKs that the model, optimizer and (in both or neither) weights-in-use files of two
 * checkpoint directories hold the same tensors with the same bytes; what names the case. */
void ckpt_test_same_files(const char *dir_a, const char *dir_b, const char *what);
/* 1 when file in both directories holds tensors of the same names and values, each widened to
 * fp32 from its own dtype (F32 or BF16) and compared bit for bit; *bf16_a and *bf16_b count the
 * tensors stored in BF16 in each. */
int ckpt_test_same_values(const char *dir_a, const char *dir_b, const char *file, int *bf16_a,
                          int *bf16_b);
/* Copies checkpoint directory src (int8 moments as held, written at TP 1) to dst as an older zoe
 * wrote it: the int8 moments' values in F32, no scales, trainer.json's sizes and checksums to
 * match. Rank 0 only; 1 on success. */
int ckpt_test_write_legacy_int8(const char *src, const char *dst);
/* The bytes of one tensor of a checkpoint file (malloc'ed; *n set), or NULL. */
void *ckpt_test_read_tensor(const char *path, const char *tensor, size_t *n);

#endif
