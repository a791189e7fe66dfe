/* Reading a Hugging Face tokenizer.json into the tables of a BPE tokenizer. Every field zoe
 * relies on is checked for its type, and every setting zoe does not implement is refused by
 * name, so a file either encodes exactly as `tokenizers` encodes it or does not load.
 *
 * Explained in docs/data.md, "A tokenizer.json and JSON lines". */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/formats/json_file.h"
#include "engine/tokenizer/tokenizer_impl.h"
#include "runtime/error.h"
#include "zoe/log.h"

typedef struct loader {
    const char *name;
    zoe_tokenizer *tok;
    zoe_str_map raw;             /* token string as written -> id */
    char **strings;              /* per id, the token string (NULL for a hole) */
    int32_t byte_of_char[0x144]; /* inverse byte-level map, -1 off the alphabet */
} loader;

#define BAD(...) zoe_fail(ZOE_ERR_INVALID_ARGUMENT, __VA_ARGS__)

static int printable(unsigned b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

/* GPT-2's bytes_to_unicode: printable bytes are their own character, the others take
 * U+0100 onwards in byte order. */
static void init_byte_level(loader *ld) {
    for (int c = 0; c < 0x144; c++) ld->byte_of_char[c] = -1;
    int k = 0;
    for (int b = 0; b < 256; b++) ld->byte_of_char[printable((unsigned)b) ? b : 256 + k++] = b;
}

/* The bytes a byte-level token string stands for; 0 when a character is off the alphabet. */
static int byte_level_bytes(const loader *ld, const char *s, size_t len, char *out,
                            size_t *out_len) {
    size_t o = 0, i = 0;
    const unsigned char *u = (const unsigned char *)s;
    if (zoe_utf8_valid_prefix(u, len) != len) return 0;
    while (i < len) {
        uint32_t c = zoe_utf8_next(u, &i);
        if (c >= 0x144 || ld->byte_of_char[c] < 0) return 0;
        out[o++] = (char)ld->byte_of_char[c];
    }
    *out_len = o;
    return 1;
}

static const cJSON *field(const cJSON *obj, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static int is_null_or_missing(const cJSON *v) {
    return !v || cJSON_IsNull(v);
}

/* An optional bool: absent or null is `dflt`. */
static zoe_status get_bool(const loader *ld, const cJSON *obj, const char *path, const char *key,
                           int dflt, int *out) {
    const cJSON *v = field(obj, key);
    if (is_null_or_missing(v)) {
        *out = dflt;
        return ZOE_OK;
    }
    if (!cJSON_IsBool(v)) return BAD("'%s': %s.%s must be true or false", ld->name, path, key);
    *out = cJSON_IsTrue(v);
    return ZOE_OK;
}

static const char *type_of(const cJSON *obj) {
    const cJSON *t = field(obj, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* ---- pre-tokenizer ---- */

static zoe_status add_step(loader *ld, zoe_pretok_step step) {
    zoe_tokenizer *tok = ld->tok;
    if (tok->n_steps == ZOE_PRETOK_MAX_STEPS)
        return BAD("'%s': pre_tokenizer has more than %d steps", ld->name, ZOE_PRETOK_MAX_STEPS);
    tok->steps[tok->n_steps++] = step;
    return ZOE_OK;
}

static zoe_status read_pretok(loader *ld, const cJSON *p, const char *path, int depth) {
    if (is_null_or_missing(p)) return ZOE_OK;
    const char *type = type_of(p);
    if (!cJSON_IsObject(p) || !type)
        return BAD("'%s': %s must be an object with a string \"type\"", ld->name, path);
    if (ld->tok->byte_level)
        return BAD("'%s': %s (%s) comes after ByteLevel; zoe reads ByteLevel last", ld->name, path,
                   type);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = field(p, "pretokenizers");
        if (!cJSON_IsArray(list) || depth > 0)
            return BAD("'%s': %s.pretokenizers must be an array (not nested)", ld->name, path);
        int i = 0;
        for (const cJSON *it = list->child; it; it = it->next, i++) {
            char sub[96];
            snprintf(sub, sizeof sub, "%s.pretokenizers[%d]", path, i);
            ZOE_TRY(read_pretok(ld, it, sub, depth + 1));
        }
        return ZOE_OK;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        int prefix = 0, regex = 0;
        ZOE_TRY(get_bool(ld, p, path, "add_prefix_space", 1, &prefix));
        ZOE_TRY(get_bool(ld, p, path, "use_regex", 1, &regex));
        if (prefix) ZOE_TRY(add_step(ld, (zoe_pretok_step){.kind = ZOE_PRETOK_PREFIX_SPACE}));
        if (regex)
            ZOE_TRY(add_step(
                ld, (zoe_pretok_step){.kind = ZOE_PRETOK_SPLIT, .pattern = ZOE_PATTERN_GPT2}));
        ld->tok->byte_level = 1;
        return ZOE_OK;
    }
    if (strcmp(type, "Split") == 0) {
        const cJSON *pat = field(p, "pattern"), *behavior = field(p, "behavior");
        const cJSON *regex = cJSON_IsObject(pat) ? field(pat, "Regex") : NULL;
        int invert = 0;
        ZOE_TRY(get_bool(ld, p, path, "invert", 0, &invert));
        if (!cJSON_IsString(regex))
            return BAD("'%s': %s.pattern must be {\"Regex\": \"...\"} (string patterns are not "
                       "supported)",
                       ld->name, path);
        int kind = zoe_pattern_from_regex(regex->valuestring);
        if (kind < 0)
            return BAD("'%s': %s.pattern.Regex \"%.60s\" is not one zoe implements (GPT-2, "
                       "Llama-3, Qwen2)",
                       ld->name, path, regex->valuestring);
        if (!cJSON_IsString(behavior) || invert ||
            (strcmp(behavior->valuestring, "Isolated") != 0 &&
             strcmp(behavior->valuestring, "Removed") != 0))
            return BAD("'%s': %s.behavior must be \"Isolated\" or \"Removed\" without invert",
                       ld->name, path);
        return add_step(ld, (zoe_pretok_step){.kind = ZOE_PRETOK_SPLIT,
                                              .pattern = (zoe_split_pattern)kind,
                                              .remove = behavior->valuestring[0] == 'R'});
    }
    return BAD("'%s': %s type \"%s\" is not supported (ByteLevel, Split, Sequence)", ld->name, path,
               type);
}

static int decoder_has_byte_level(const cJSON *d) {
    const char *type = type_of(d);
    if (!type) return 0;
    if (strcmp(type, "ByteLevel") == 0) return 1;
    if (strcmp(type, "Sequence") != 0) return 0;
    const cJSON *list = field(d, "decoders");
    for (const cJSON *it = cJSON_IsArray(list) ? list->child : NULL; it; it = it->next)
        if (decoder_has_byte_level(it)) return 1;
    return 0;
}

/* ---- vocabulary, merges, added tokens ---- */

/* Unlisted ids a vocabulary may skip: the id-indexed arrays stay within ~9 MiB of its size. */
enum { ZOE_TOKENIZER_MAX_ID_GAP = 1 << 20 };

static zoe_status note_id(loader *ld, int64_t id, const char *what) {
    if (id < 0 || id >= INT32_MAX)
        return BAD("'%s': %s has id %lld outside [0, 2^31 - 1)", ld->name, what, (long long)id);
    if (id + 1 > ld->tok->vocab_size) ld->tok->vocab_size = (int32_t)id + 1;
    return ZOE_OK;
}

static zoe_status read_vocab_ids(loader *ld, const cJSON *vocab, const cJSON *added) {
    if (!cJSON_IsObject(vocab)) return BAD("'%s': model.vocab must be an object", ld->name);
    for (const cJSON *it = vocab->child; it; it = it->next) {
        int64_t id;
        if (!zoe_json_int64(it, &id))
            return BAD("'%s': model.vocab[\"%.40s\"] must be an integer id", ld->name, it->string);
        ZOE_TRY(note_id(ld, id, "a model.vocab entry"));
    }
    if (!is_null_or_missing(added) && !cJSON_IsArray(added))
        return BAD("'%s': added_tokens must be an array", ld->name);
    int i = 0;
    for (const cJSON *it = added ? added->child : NULL; it; it = it->next, i++) {
        int64_t id;
        if (!cJSON_IsObject(it) || !zoe_json_int64(field(it, "id"), &id) ||
            !cJSON_IsString(field(it, "content")))
            return BAD("'%s': added_tokens[%d] needs an integer \"id\" and a string "
                       "\"content\"",
                       ld->name, i);
        ZOE_TRY(note_id(ld, id, "an added token"));
    }
    /* Ids index arrays of vocab_size entries: a file listing a few tokens with one id near 2^31
     * would have zoe allocate gigabytes. Real vocabularies are dense; reserved ranges are
     * listed as tokens. */
    int64_t listed = i;
    for (const cJSON *it = vocab->child; it; it = it->next) listed++;
    if (ld->tok->vocab_size > listed + ZOE_TOKENIZER_MAX_ID_GAP)
        return BAD("'%s': the largest id is %d but only %lld tokens are listed (ids must be "
                   "dense, with at most %d unlisted)",
                   ld->name, ld->tok->vocab_size - 1, (long long)listed, ZOE_TOKENIZER_MAX_ID_GAP);
    return ZOE_OK;
}

static zoe_status keep_string(loader *ld, int32_t id, const char *s) {
    if (ld->strings[id]) return ZOE_OK; /* an added token repeating its vocabulary entry */
    size_t n = strlen(s);
    ld->strings[id] = malloc(n + 1);
    if (!ld->strings[id]) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "'%s': token %d", ld->name, id);
    memcpy(ld->strings[id], s, n + 1);
    return ZOE_OK;
}

static zoe_status read_vocab(loader *ld, const cJSON *vocab) {
    zoe_tokenizer *tok = ld->tok;
    char buf[1024];
    for (const cJSON *it = vocab->child; it; it = it->next) {
        int32_t id = (int32_t)it->valuedouble;
        size_t len = strlen(it->string), blen;
        if (len == 0)
            return BAD("'%s': model.vocab has an empty key (id %d); a key holding \\u0000 "
                       "reads as one, since cJSON ends strings at NUL",
                       ld->name, id);
        if (zoe_str_map_put(&ld->raw, it->string, len, id))
            return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "'%s': vocabulary", ld->name);
        ZOE_TRY(keep_string(ld, id, it->string));
        const char *key = it->string;
        size_t key_len = len;
        if (tok->byte_level) {
            /* Off the byte alphabet BPE never forms the token; it only decodes. */
            if (len > sizeof buf || !byte_level_bytes(ld, it->string, len, buf, &blen)) continue;
            key = buf, key_len = blen;
            if (blen == 1) tok->byte_ids[(unsigned char)buf[0]] = id;
        }
        if (zoe_str_map_put(&tok->vocab, key, key_len, id))
            return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "'%s': vocabulary", ld->name);
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        tok->fallback_ids[b] = zoe_str_map_get(&ld->raw, name, strlen(name));
    }
    return ZOE_OK;
}

static zoe_status read_merge(loader *ld, const cJSON *m, int rank, const char **a, size_t *alen,
                             const char **b, size_t *blen) {
    if (cJSON_IsString(m)) {
        const char *s = m->valuestring, *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' '))
            return BAD("'%s': model.merges[%d] \"%.40s\" is not two tokens split by one space",
                       ld->name, rank, s);
        *a = s, *alen = (size_t)(sp - s), *b = sp + 1, *blen = strlen(sp + 1);
        return ZOE_OK;
    }
    if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
        cJSON_IsString(m->child->next)) {
        *a = m->child->valuestring, *alen = strlen(*a);
        *b = m->child->next->valuestring, *blen = strlen(*b);
        return ZOE_OK;
    }
    return BAD("'%s': model.merges[%d] must be a string \"a b\" or an array [\"a\", \"b\"]",
               ld->name, rank);
}

static zoe_status read_merges(loader *ld, const cJSON *merges) {
    zoe_tokenizer *tok = ld->tok;
    if (is_null_or_missing(merges))
        merges = NULL;
    else if (!cJSON_IsArray(merges))
        return BAD("'%s': model.merges must be an array", ld->name);
    int n = merges ? cJSON_GetArraySize(merges) : 0;
    if (zoe_merge_map_init(&tok->merges, (size_t)n))
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "'%s': %d merges", ld->name, n);
    char joined[2048];
    int rank = 0;
    for (const cJSON *m = merges ? merges->child : NULL; m; m = m->next, rank++) {
        const char *a = NULL, *b = NULL;
        size_t alen = 0, blen = 0;
        ZOE_TRY(read_merge(ld, m, rank, &a, &alen, &b, &blen));
        if (alen + blen > sizeof joined)
            return BAD("'%s': model.merges[%d] is longer than %zu bytes", ld->name, rank,
                       sizeof joined);
        memcpy(joined, a, alen);
        memcpy(joined + alen, b, blen);
        int32_t ia = zoe_str_map_get(&ld->raw, a, alen), ib = zoe_str_map_get(&ld->raw, b, blen);
        int32_t ij = zoe_str_map_get(&ld->raw, joined, alen + blen);
        if (ia < 0 || ib < 0 || ij < 0)
            return BAD("'%s': model.merges[%d] \"%.*s\" + \"%.*s\": %s is not in model.vocab",
                       ld->name, rank, (int)alen, a, (int)blen, b,
                       ia < 0   ? "the first token"
                       : ib < 0 ? "the second token"
                                : "their join");
        zoe_merge_map_put(&tok->merges, ia, ib, rank, ij);
    }
    return ZOE_OK;
}

static zoe_status read_added(loader *ld, const cJSON *added) {
    zoe_tokenizer *tok = ld->tok;
    int n = added ? cJSON_GetArraySize(added) : 0;
    tok->added = calloc(n ? (size_t)n : 1, sizeof *tok->added);
    if (!tok->added) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "'%s': added tokens", ld->name);
    int i = 0;
    for (const cJSON *it = added ? added->child : NULL; it; it = it->next, i++) {
        zoe_added_token *t = &tok->added[tok->n_added];
        char path[48];
        snprintf(path, sizeof path, "added_tokens[%d]", i);
        const char *content = field(it, "content")->valuestring;
        int single_word = 0;
        ZOE_TRY(get_bool(ld, it, path, "single_word", 0, &single_word));
        ZOE_TRY(get_bool(ld, it, path, "lstrip", 0, &t->lstrip));
        ZOE_TRY(get_bool(ld, it, path, "rstrip", 0, &t->rstrip));
        ZOE_TRY(get_bool(ld, it, path, "special", 0, &t->special));
        ZOE_TRY(get_bool(ld, it, path, "normalized", !t->special, &t->normalized));
        if (single_word)
            return BAD("'%s': %s (\"%.40s\") has single_word, which zoe does not implement",
                       ld->name, path, content);
        t->id = (int32_t)field(it, "id")->valuedouble;
        t->len = strlen(content);
        if (t->len == 0) continue; /* matches nothing */
        t->content = malloc(t->len + 1);
        if (!t->content) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "'%s': %s", ld->name, path);
        memcpy(t->content, content, t->len + 1);
        tok->added_first[(unsigned char)content[0]] = 1;
        tok->n_added++;
        ZOE_TRY(keep_string(ld, t->id, content));
        if (t->special) tok->is_special[t->id] = 1;
    }
    return ZOE_OK;
}

/* Per id, the bytes decode writes: byte-level characters mapped back (a token off the
 * alphabet as written, as the ByteLevel decoder does), <0xXX> as its byte with byte fallback,
 * else the string itself. */
static zoe_status build_decoded(loader *ld) {
    zoe_tokenizer *tok = ld->tok;
    size_t total = 0, n = (size_t)tok->vocab_size;
    for (size_t i = 0; i < n; i++) total += ld->strings[i] ? strlen(ld->strings[i]) : 0;
    tok->decoded_off = malloc((n + 1) * sizeof *tok->decoded_off);
    tok->decoded = malloc(total ? total : 1);
    if (!tok->decoded_off || !tok->decoded)
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "'%s': decoding table", ld->name);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        tok->decoded_off[i] = o;
        const char *s = ld->strings[i];
        if (!s) continue;
        size_t len = strlen(s), blen;
        unsigned hex;
        char end;
        if (tok->decode_bytes && byte_level_bytes(ld, s, len, tok->decoded + o, &blen)) {
            o += blen;
        } else if (tok->byte_fallback && len == 6 && sscanf(s, "<0x%2X%c", &hex, &end) == 2 &&
                   end == '>') {
            tok->decoded[o++] = (char)hex;
        } else {
            memcpy(tok->decoded + o, s, len);
            o += len;
        }
    }
    tok->decoded_off[n] = o;
    return ZOE_OK;
}

static zoe_status pick_eod(loader *ld, const char *eod_token) {
    zoe_tokenizer *tok = ld->tok;
    static const char *const defaults[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"};
    tok->eod = -1;
    for (int k = 0; k < (eod_token ? 1 : 4) && tok->eod < 0; k++) {
        const char *want = eod_token ? eod_token : defaults[k];
        for (int i = 0; i < tok->n_added && tok->eod < 0; i++)
            if ((eod_token || tok->added[i].special) && strcmp(tok->added[i].content, want) == 0)
                tok->eod = tok->added[i].id;
        if (tok->eod < 0 && eod_token) tok->eod = zoe_str_map_get(&ld->raw, want, strlen(want));
    }
    if (eod_token && tok->eod < 0)
        return BAD("'%s': end-of-document token \"%s\" is neither an added token nor in "
                   "model.vocab",
                   ld->name, eod_token);
    return ZOE_OK;
}

static zoe_status read_model(loader *ld, const cJSON *root) {
    zoe_tokenizer *tok = ld->tok;
    const cJSON *model = field(root, "model");
    if (!cJSON_IsObject(model)) return BAD("'%s': no \"model\" object", ld->name);
    const char *type = type_of(model);
    if (!type) return BAD("'%s': model.type is missing (zoe reads \"BPE\")", ld->name);
    if (strcmp(type, "BPE") != 0)
        return BAD("'%s': model.type \"%s\" is not supported (zoe reads \"BPE\")", ld->name, type);
    const cJSON *dropout = field(model, "dropout");
    if (!is_null_or_missing(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        return BAD("'%s': model.dropout must be null (BPE dropout is random)", ld->name);
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        const cJSON *v = field(model, affixes[k]);
        if (!is_null_or_missing(v) && !(cJSON_IsString(v) && v->valuestring[0] == '\0'))
            return BAD("'%s': model.%s is set, which zoe does not implement", ld->name, affixes[k]);
    }
    ZOE_TRY(get_bool(ld, model, "model", "fuse_unk", 0, &tok->fuse_unk));
    ZOE_TRY(get_bool(ld, model, "model", "byte_fallback", 0, &tok->byte_fallback));
    ZOE_TRY(get_bool(ld, model, "model", "ignore_merges", 0, &tok->ignore_merges));
    const cJSON *vocab = field(model, "vocab"), *added = field(root, "added_tokens");
    ZOE_TRY(read_vocab_ids(ld, vocab, added));
    if (tok->vocab_size == 0) return BAD("'%s': model.vocab is empty", ld->name);
    ld->strings = calloc((size_t)tok->vocab_size, sizeof *ld->strings);
    tok->is_special = calloc((size_t)tok->vocab_size, 1);
    if (!ld->strings || !tok->is_special)
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "'%s': %d tokens", ld->name, tok->vocab_size);
    ZOE_TRY(read_vocab(ld, vocab));
    ZOE_TRY(read_merges(ld, field(model, "merges")));
    const cJSON *unk = field(model, "unk_token");
    tok->unk = -1;
    if (cJSON_IsString(unk)) {
        tok->unk = zoe_str_map_get(&ld->raw, unk->valuestring, strlen(unk->valuestring));
        if (tok->unk < 0)
            return BAD("'%s': model.unk_token \"%s\" is not in model.vocab", ld->name,
                       unk->valuestring);
    } else if (!is_null_or_missing(unk)) {
        return BAD("'%s': model.unk_token must be a string or null", ld->name);
    }
    return read_added(ld, is_null_or_missing(added) ? NULL : added);
}

static zoe_status read_root(loader *ld, const cJSON *root, const char *eod_token) {
    zoe_tokenizer *tok = ld->tok;
    if (!cJSON_IsObject(root)) return BAD("'%s' is not a JSON object", ld->name);
    const cJSON *norm = field(root, "normalizer");
    if (!is_null_or_missing(norm))
        return BAD("'%s': normalizer \"%s\" is not supported (zoe reads byte-level BPE "
                   "without a normalizer)",
                   ld->name, type_of(norm) ? type_of(norm) : "?");
    if (!is_null_or_missing(field(root, "truncation")))
        zoe_log(ZOE_LOG_WARN, "'%s': truncation is ignored (zoe encodes whole documents)",
                ld->name);
    ZOE_TRY(read_pretok(ld, field(root, "pre_tokenizer"), "pre_tokenizer", 0));
    const cJSON *decoder = field(root, "decoder");
    tok->decode_bytes = decoder_has_byte_level(decoder);
    tok->decode_join = is_null_or_missing(decoder);
    for (int b = 0; b < 256; b++) tok->byte_ids[b] = tok->fallback_ids[b] = -1;
    ZOE_TRY(read_model(ld, root));
    ZOE_TRY(build_decoded(ld));
    ZOE_TRY(pick_eod(ld, eod_token));
    if (zoe_unicode_init(tok)) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "'%s': tables", ld->name);
    return ZOE_OK;
}

zoe_status zoe_tokenizer_parse_json(const char *json, size_t len, const char *name,
                                    const char *eod_token, zoe_tokenizer **out) {
    *out = NULL;
    zoe_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "tokenizer '%s'", name);
    tok->kind = ZOE_TOKENIZER_BPE;
    loader ld = {.name = name, .tok = tok};
    init_byte_level(&ld);
    cJSON *root = cJSON_ParseWithLength(json, len);
    zoe_status st;
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at && at >= json && at <= json + len ? (size_t)(at - json) : len;
        st = BAD("'%s': not valid JSON (error near byte %zu of %zu)", name, off, len);
    } else {
        st = read_root(&ld, root, eod_token);
    }
    cJSON_Delete(root);
    if (ld.strings)
        for (int32_t i = 0; i < tok->vocab_size; i++) free(ld.strings[i]);
    free(ld.strings);
    zoe_str_map_free(&ld.raw);
    if (st != ZOE_OK) {
        zoe_tokenizer_destroy(tok);
        return st;
    }
    *out = tok;
    return ZOE_OK;
}

zoe_status zoe_tokenizer_load_json(const char *path, const char *eod_token, zoe_tokenizer **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return zoe_fail(ZOE_ERR_IO, "cannot open tokenizer '%s': %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 1 << 20;
            char *t = realloc(text, cap);
            if (!t) {
                free(text);
                fclose(f);
                return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "tokenizer '%s': %zu bytes", path, cap);
            }
            text = t;
        }
        size_t got = fread(text + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    zoe_status st = err ? zoe_fail(ZOE_ERR_IO, "cannot read tokenizer '%s'", path)
                        : zoe_tokenizer_parse_json(text, len, path, eod_token, out);
    free(text);
    return st;
}
