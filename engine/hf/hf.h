/* Hugging Face model directories in: config.json (GPT2LMHeadModel or LlamaForCausalLM) and
 * model.safetensors, or model.safetensors.index.json with its shards, read through the one
 * safetensors reader (engine/formats/safetensors.h). The mapping of zoe's tensors to transformers'
 * names and layouts is written once here (zoe_hf_source), for the import and the export.
 *
 * Explained in docs/hf.md. */
#ifndef ZOE_ENGINE_HF_H
#define ZOE_ENGINE_HF_H

#include <stdint.h>
#include "zoe/status.h"
#include "zoe/train.h"

typedef struct zoe_gpt zoe_gpt;

/* The model shape of dir/config.json; errors name the file and the key (an unknown
 * architecture, a missing size, an activation or bias zoe does not have). seq_len is
 * n_positions (GPT-2, which is also max_positions, the position table's rows) or
 * max_position_embeddings (Llama). */
zoe_status zoe_hf_read_config(const char *dir, zoe_model_config *out);
/* dir/config.json as compact JSON text (*out, the caller frees): every key, the ones zoe reads
 * and the ones it does not (token ids, the context length, rope scaling ...), which checkpoints
 * keep for the export to give back. */
zoe_status zoe_hf_config_text(const char *dir, char **out);

/* How one zoe tensor's global element (i, j) comes from the Hugging Face tensors:
 *  COPY       hf[i, j] (1-D: hf[i]); rows past the HF tensor's are zero (vocabulary padding);
 *             GPT-2's position table is copied whole (max_positions rows);
 *  TRANSPOSE  hf[j, i] (GPT-2's Conv1D weights are [in, out]);
 *  QKV_WEIGHT GPT-2's c_attn [C, 3C] whose columns are [q | k | v] head-major, where zoe's rows
 *             are [head][q, k, v][head_dim]: hf[j, col(i)];
 *  QKV_BIAS   hf[col(i)];
 *  KV         Llama's k_proj and v_proj [kv_heads * head_dim, C] into zoe's [kv_heads][2][hd];
 *  GATE_UP    Llama's gate_proj and up_proj [ffn, C] into zoe's [ffn][2] (interleaved). */
typedef enum zoe_hf_kind {
    ZOE_HF_COPY,
    ZOE_HF_TRANSPOSE,
    ZOE_HF_QKV_WEIGHT,
    ZOE_HF_QKV_BIAS,
    ZOE_HF_KV,
    ZOE_HF_GATE_UP,
} zoe_hf_kind;

typedef struct zoe_hf_source {
    zoe_hf_kind kind;
    int count;           /* HF tensors: 1, or 2 for KV and GATE_UP */
    char hf[2][128];     /* their names */
    int64_t shape[2][2]; /* their expected shapes ([n, 1] and ndim 1 for vectors) */
    int ndim;
} zoe_hf_source;

/* The HF source of zoe tensor `name` (global shape rows x cols) in a model of shape m; fails
 * for a name the family does not have. */
zoe_status zoe_hf_source_of(const zoe_model_config *m, const char *name, int64_t rows, int64_t cols,
                            zoe_hf_source *out);
/* For source s, where zoe's global row i comes from: HF tensor *which, its row (or, when
 * *transposed, its column) *index; *index = -1 for a padding row (zeros). */
void zoe_hf_row_origin(const zoe_model_config *m, const zoe_hf_source *s, int64_t i, int *which,
                       int64_t *index, int *transposed);

/* Checks dir against the model zoe builds from it at TP size tp: every tensor present with its
 * shape and an F32, BF16 or F16 dtype, no tensor left unused (the causal-mask buffers of old
 * GPT-2 files and a tied head's copy excepted), heads (and KV heads) divisible by tp. Reads
 * headers only. Errors name the file and the tensor. */
zoe_status zoe_hf_check(const char *dir, const zoe_model_config *m, int tp);

/* Writes this rank's shard of every tensor of g from dir into its bound weights: each file is
 * memory-mapped and only the rows and columns of the rank's shard are read. The range form
 * writes tensors [first, first + n) alone (streamed weights: a unit at a time). */
zoe_status zoe_hf_load(zoe_gpt *g, const char *dir);
zoe_status zoe_hf_load_tensors(zoe_gpt *g, const char *dir, int first, int n);

#endif
