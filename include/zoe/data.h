/* Training data: the Megatron indexed dataset (.bin + .idx, validated at open, the .bin read
 * with pread; written atomically), tokenizing text or JSON lines into it, and the loader that
 * cuts the token stream into sequences and deals them out to data-parallel ranks.
 *
 * The token stream of a dataset is its documents back to back, in file order. With the byte
 * tokenizer, zoe-data (and zoe_dataset_open_text) end every document with its end-of-document
 * token; with a tokenizer.json, --append-eod does, as Megatron's preprocess_data.py does; so
 * the stream reads doc0 EOD doc1 EOD ...; datasets written elsewhere are used as stored.
 * Sequence i of the loader is the window of seq_len + 1 tokens starting at stream position
 * i * seq_len: inputs are its first seq_len tokens, targets its last seq_len (inputs shifted by
 * one), and windows run across document boundaries.
 *
 * Explained in docs/data.md. */
#ifndef ZOE_DATA_H
#define ZOE_DATA_H

#include <stddef.h>
#include <stdint.h>
#include "zoe/status.h"
#include "zoe/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Datasets ---- */

/* Token element types of the .bin file; the values are Megatron's dtype codes in the .idx. */
typedef enum zoe_token_dtype {
    ZOE_TOKENS_INT32 = 4,
    ZOE_TOKENS_UINT16 = 8,
} zoe_token_dtype;

/* "uint16" / "int32", or "unknown". */
const char *zoe_token_dtype_name(zoe_token_dtype dtype);
/* Parses "uint16" or "int32"; the message names any other value. */
zoe_status zoe_token_dtype_parse(const char *name, zoe_token_dtype *out);

/* How a text file splits into documents: at runs of blank (empty or whitespace-only) lines, at
 * every line, or one document per file. A document's bytes are kept exactly; only the
 * separating newlines and blank lines are dropped, and blank (whitespace-only) documents are
 * skipped. */
typedef enum zoe_doc_split {
    ZOE_SPLIT_BLANK_LINE = 0,
    ZOE_SPLIT_LINE = 1,
    ZOE_SPLIT_FILE = 2,
} zoe_doc_split;

/* "blank-line" / "line" / "file". */
const char *zoe_doc_split_name(zoe_doc_split split);
zoe_status zoe_doc_split_parse(const char *name, zoe_doc_split *out);

typedef struct zoe_dataset zoe_dataset;

/* Opens PREFIX.idx + PREFIX.bin, memory-mapped, and validates the header (magic MMIDIDX,
 * version 1, dtype code), the array sizes against the file lengths, the document indices and
 * the sequence pointers; a failure names the file and the bad field. */
zoe_status zoe_dataset_open_indexed(const char *prefix, zoe_dataset **out);
/* Reads a UTF-8 text file and tokenises it in memory with the byte tokenizer, ending every
 * document with ZOE_BYTE_EOD (stored as uint16). */
zoe_status zoe_dataset_open_text(const char *path, zoe_doc_split split, zoe_dataset **out);
/* PATH.idx exists: indexed dataset PATH; PATH ends in .idx or .bin: the indexed dataset of the
 * prefix; otherwise a text file split at blank lines. */
zoe_status zoe_dataset_open(const char *path, zoe_dataset **out);
void zoe_dataset_destroy(zoe_dataset *ds);

/* Pure getters, which cannot fail: NULL or -1 for a NULL dataset. The prefix or text path it
 * was opened from, its token dtype, tokens, documents and sequences. */
const char *zoe_dataset_name(const zoe_dataset *ds);
zoe_token_dtype zoe_dataset_dtype(const zoe_dataset *ds);
int64_t zoe_dataset_tokens(const zoe_dataset *ds);
int64_t zoe_dataset_documents(const zoe_dataset *ds);
/* Megatron's sequences (zoe writes one per document). */
int64_t zoe_dataset_sequences(const zoe_dataset *ds);
/* Copies stream tokens [offset, offset + count) into out as int32. */
zoe_status zoe_dataset_read(const zoe_dataset *ds, int64_t offset, int64_t count, int32_t *out);
/* Checks every token of the stream against [0, vocab_size) in one pass: the message names the
 * first one outside, its stream position and its document. An empty dataset fails too. */
zoe_status zoe_dataset_check_tokens(const zoe_dataset *ds, int32_t vocab_size);
/* Where document doc lies in the stream. */
zoe_status zoe_dataset_document(const zoe_dataset *ds, int64_t doc, int64_t *offset,
                                int64_t *length);
/* Documents [first, first + count) of ds as a dataset of their own: their tokens back to back
 * as in ds, document 0 being ds's document `first`. Reads through ds, which must outlive it;
 * destroy it with zoe_dataset_destroy. Its name is ds's with " documents A-B" after it. */
zoe_status zoe_dataset_subset(const zoe_dataset *ds, int64_t first, int64_t count,
                              zoe_dataset **out);
/* zoe-train --split T,V (T + V = 100, both > 0): of `documents`, the first
 * round(documents * T / 100) train and the rest validate, as Megatron-LM splits a dataset by
 * documents in order; a function of the document count only, so the same at every grid and
 * batch split. Fails, naming the split and the count, when either part would be empty. */
zoe_status zoe_dataset_split_documents(int64_t documents, int split_train, int split_val,
                                       int64_t *train_documents);

/* ---- Writing the indexed format ---- */

typedef struct zoe_dataset_writer zoe_dataset_writer;

/* Starts PREFIX.bin and PREFIX.idx under temporary names (PREFIX.bin.tmp.PID ...) that
 * zoe_dataset_writer_finish renames into place; destroying an unfinished writer removes them,
 * so a failed run leaves no half-written dataset, and temporaries of killed runs (a PID no
 * longer alive) are removed here. An empty prefix or a directory is refused. */
zoe_status zoe_dataset_writer_create(const char *prefix, zoe_token_dtype dtype,
                                     zoe_dataset_writer **out);
/* Appends one document (one Megatron sequence). Tokens must fit the dtype. */
zoe_status zoe_dataset_writer_add_document(zoe_dataset_writer *w, const int32_t *tokens, int64_t n);
/* How input becomes documents and tokens. Documents are encoded by an OpenMP team and
 * appended in input order (the output does not depend on the thread count). */
typedef void (*zoe_input_progress)(void *user, int64_t documents, int64_t input_bytes);
typedef struct zoe_input_options {
    zoe_doc_split split;  /* text input: how it splits into documents */
    const char *json_key; /* non-NULL: JSON lines, each non-blank line an object whose string
                           * under this key is one document (Megatron's preprocess_data.py) */
    int append_eod;       /* end every document with the tokenizer's EOD (it must have one) */
    int threads;          /* encoding threads; 0: OpenMP's default */
    zoe_input_progress progress; /* optional: after each batch, documents written so far and
                                  * the input bytes consumed of this call */
    void *progress_user;
    /* The longest document taken, in bytes; 0: ZOE_MAX_DOCUMENT_BYTES. A longer one is refused
     * from its length, before it is encoded, naming it. */
    size_t max_document_bytes;
} zoe_input_options;
/* The .idx stores a document's tokens as an int32 count, and a byte-level tokenizer may make a
 * token of every byte: up to this length every document's tokens can be counted. */
#define ZOE_MAX_DOCUMENT_BYTES ((size_t)INT32_MAX - 1)

/* Tokenises len bytes of input (named `name` in messages: a bad JSON line is named by its
 * number) into documents and appends them. */
zoe_status zoe_dataset_writer_add_input(zoe_dataset_writer *w, const zoe_tokenizer *tok,
                                        const char *text, size_t len, const char *name,
                                        const zoe_input_options *opt);
/* The same for a whole file (memory-mapped while it is read). */
zoe_status zoe_dataset_writer_add_file(zoe_dataset_writer *w, const zoe_tokenizer *tok,
                                       const char *path, const zoe_input_options *opt);
/* Text split at `split`, every document followed by EOD (add_input with append_eod). */
zoe_status zoe_dataset_writer_add_text(zoe_dataset_writer *w, const zoe_tokenizer *tok,
                                       const char *text, size_t len, zoe_doc_split split);
zoe_status zoe_dataset_writer_add_text_file(zoe_dataset_writer *w, const zoe_tokenizer *tok,
                                            const char *path, zoe_doc_split split);
/* Writes the index, flushes both files and renames them into place. With no document added it
 * writes the empty dataset (no sequences, document_indices [0]), which reads back as 0
 * documents and 0 tokens. */
zoe_status zoe_dataset_writer_finish(zoe_dataset_writer *w);
/* The temporary names the writer writes under until finish (for a program's signal handler,
 * which must remove them before it dies: unlink is async-signal-safe). */
void zoe_dataset_writer_temp_paths(const zoe_dataset_writer *w, const char **bin, const char **idx);
void zoe_dataset_writer_destroy(zoe_dataset_writer *w);
/* Pure getters: documents and tokens added so far; -1 for a NULL writer. */
int64_t zoe_dataset_writer_documents(const zoe_dataset_writer *w);
int64_t zoe_dataset_writer_tokens(const zoe_dataset_writer *w);

/* ---- The loader ---- */

/* One step's global batch is dp_size * grad_accum * micro_batch sequences. DP rank r takes the
 * contiguous share [r * grad_accum * micro_batch, (r + 1) * grad_accum * micro_batch) of it,
 * micro-batch by micro-batch. The loader has no tp_rank: the TP ranks of a DP group pass the
 * same arguments and so read the same tokens. */
typedef struct zoe_loader_config {
    int64_t seq_len;    /* tokens per row */
    int micro_batch;    /* rows per fetch */
    int dp_size;        /* data-parallel ranks */
    int dp_rank;        /* this rank's index in [0, dp_size) */
    int grad_accum;     /* micro-steps per step */
    uint64_t seed;      /* the order of sequences; epoch e is shuffled with (seed, e) */
    int32_t vocab_size; /* > 0: fetch fails on a token outside [0, vocab_size); 0: unchecked */
} zoe_loader_config;

typedef struct zoe_loader zoe_loader;

/* The dataset must outlive the loader. Fails when the dataset holds fewer sequences than one
 * global batch. */
zoe_status zoe_loader_create(const zoe_dataset *ds, const zoe_loader_config *cfg, zoe_loader **out);
void zoe_loader_destroy(zoe_loader *loader);
/* Sequences the dataset yields: (tokens - 1) / seq_len. */
int64_t zoe_loader_sequences(const zoe_loader *loader);
/* Whole global batches per epoch; an epoch's leftover sequences (fewer than a global batch) are
 * skipped, and reshuffling makes them differ from epoch to epoch. */
int64_t zoe_loader_steps_per_epoch(const zoe_loader *loader);
/* The dataset sequence in row `row` of micro-batch micro_step of step `step` on this rank: a
 * pure function of the configuration and the arguments (a keyed permutation per epoch, no
 * state), so any rank can compute any other's and a resumed run continues exactly. */
zoe_status zoe_loader_sequence_index(const zoe_loader *loader, int64_t step, int micro_step,
                                     int row, int64_t *sequence);
/* Fills tokens and targets, each [micro_batch, seq_len] row-major int32, for micro-batch
 * micro_step in [0, grad_accum) of step >= 0. Thread-safe (the loader is read-only). */
zoe_status zoe_loader_fetch(const zoe_loader *loader, int64_t step, int micro_step, int32_t *tokens,
                            int32_t *targets);

#ifdef __cplusplus
}
#endif
#endif
