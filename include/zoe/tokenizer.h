/* Tokenizers: the byte-level one zoe's demo uses, and byte-level BPE read from a Hugging Face
 * tokenizer.json (GPT-2, Llama-3 and most current models), behind one handle.
 *
 * BPE encodes as the `tokenizers` package does with add_special_tokens=False: the added tokens
 * (special or not) are cut out of the text first, leftmost-longest; the rest goes through the
 * pre-tokenizer (ByteLevel with its GPT-2 regex, or Split with the GPT-2, Llama-3 or Qwen2
 * pattern, in a Sequence or alone) and the BPE merges. Text that is not valid UTF-8 is read as
 * Python's bytes.decode("utf-8", errors="replace") reads it: every maximal invalid subpart
 * becomes U+FFFD, so zoe encodes raw bytes exactly as `tokenizers` encodes the decoded string.
 * Nothing is normalised (a tokenizer.json with a normalizer is refused), no post-processor runs
 * (no BOS is added), and decode skips special tokens (skip_special_tokens=True).
 *
 * Explained in docs/data.md. */
#ifndef ZOE_TOKENIZER_H
#define ZOE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "zoe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Byte-level tokenizer: token b < 256 is the byte b; 256 is end-of-document. ---- */

#define ZOE_BYTE_EOD        256
#define ZOE_BYTE_VOCAB_SIZE 257 /* the model pads its vocabulary up from this */

typedef struct zoe_tokenizer zoe_tokenizer;

zoe_status zoe_tokenizer_create_bytes(zoe_tokenizer **out);

/* Reads a tokenizer.json file. eod_token names the end-of-document token (an added token's
 * content or a vocabulary entry); NULL picks the first special added token among
 * "<|endoftext|>", "<|end_of_text|>", "</s>" and "<eos>", and leaves none (eod -1) when there is
 * no such token. Fails naming the file and the bad field: a JSON syntax error, a wrong type, a
 * model other than BPE, a normalizer or pre-tokenizer zoe does not implement, a merge of tokens
 * not in the vocabulary. */
zoe_status zoe_tokenizer_load_json(const char *path, const char *eod_token, zoe_tokenizer **out);
/* The same from len bytes of JSON in memory; `name` is used in messages. */
zoe_status zoe_tokenizer_parse_json(const char *json, size_t len, const char *name,
                                    const char *eod_token, zoe_tokenizer **out);
void zoe_tokenizer_destroy(zoe_tokenizer *tok);

/* One past the largest token id (the model's vocabulary must be at least this). */
int32_t zoe_tokenizer_vocab_size(const zoe_tokenizer *tok);
/* The end-of-document token, or -1 when the tokenizer has none. */
int32_t zoe_tokenizer_eod(const zoe_tokenizer *tok);
/* The most tokens encode can produce for len bytes of text (size the token buffer with it). */
size_t zoe_tokenizer_max_tokens(const zoe_tokenizer *tok, size_t len);
/* Encodes len bytes into at most cap tokens; *n_tokens is the count written. Thread-safe (a
 * tokenizer is read-only once made); an encoder below is faster for many calls. The byte
 * tokenizer keeps every byte (decode(encode(x)) == x for any bytes). */
zoe_status zoe_tokenizer_encode(const zoe_tokenizer *tok, const char *text, size_t len,
                                int32_t *tokens, size_t cap, size_t *n_tokens);
/* Decodes n tokens into at most cap bytes; *len is the count written (no terminating NUL).
 * Special tokens (EOD among them) produce no bytes: split at them first to keep document
 * boundaries. Fails naming the token for an id outside the vocabulary. */
zoe_status zoe_tokenizer_decode(const zoe_tokenizer *tok, const int32_t *tokens, size_t n,
                                char *text, size_t cap, size_t *len);

/* An encoder: one thread's scratch space and word cache over a tokenizer, which must outlive
 * it. Use one per thread. */
typedef struct zoe_encoder zoe_encoder;
zoe_status zoe_encoder_create(const zoe_tokenizer *tok, zoe_encoder **out);
void zoe_encoder_destroy(zoe_encoder *enc);
/* As zoe_tokenizer_encode. */
zoe_status zoe_encoder_encode(zoe_encoder *enc, const char *text, size_t len, int32_t *tokens,
                              size_t cap, size_t *n_tokens);

#ifdef __cplusplus
}
#endif
#endif
