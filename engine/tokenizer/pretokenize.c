/* What comes before BPE: Unicode classes, UTF-8 repair, and the pre-tokenizer patterns of
 * byte-level BPE tokenizers, written out by hand.
 *
 * Each pattern is an alternation matched leftmost-first with backtracking, as Oniguruma (the
 * engine inside `tokenizers`) matches it; the functions below take the alternatives in the
 * pattern's order and resolve each greedy run and its backtracking directly:
 *   GPT-2   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   Llama-3 (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+      (Qwen2: \p{N} for \p{N}{1,3})
 * \s+(?!\S) backtracks off a whitespace run's last character when a non-space follows, so that
 * character joins the next word; \s*[\r\n]+ ends at the run's last line break.
 *
 * Explained in docs/data.md, "A tokenizer.json and JSON lines". */
#include <stdlib.h>
#include <string.h>
#include "engine/tokenizer/tokenizer_impl.h"

static const char *const gpt2_regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char *const llama3_regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *const qwen2_regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

int zoe_pattern_from_regex(const char *regex) {
    if (strcmp(regex, gpt2_regex) == 0) return ZOE_PATTERN_GPT2;
    if (strcmp(regex, llama3_regex) == 0) return ZOE_PATTERN_LLAMA3;
    if (strcmp(regex, qwen2_regex) == 0) return ZOE_PATTERN_QWEN2;
    return -1;
}

/* ---- classes ---- */

static int in_table(const zoe_unicode_table *t, uint32_t c) {
    size_t lo = 0, hi = t->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c < t->ranges[mid].first)
            hi = mid;
        else if (c > t->ranges[mid].last)
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

int zoe_cp_class_astral(uint32_t c) {
    return (in_table(&zoe_unicode_classes[ZOE_UCLASS_LETTER], c) ? ZOE_CP_LETTER : 0) |
           (in_table(&zoe_unicode_classes[ZOE_UCLASS_NUMBER], c) ? ZOE_CP_NUMBER : 0) |
           (in_table(&zoe_unicode_classes[ZOE_UCLASS_SPACE], c) ? ZOE_CP_SPACE : 0);
}

int zoe_unicode_init(zoe_tokenizer *tok) {
    tok->bmp_class = calloc(0x10000, 1);
    if (!tok->bmp_class) return 1;
    static const int bits[ZOE_UCLASS_COUNT] = {ZOE_CP_LETTER, ZOE_CP_NUMBER, ZOE_CP_SPACE};
    for (int k = 0; k < ZOE_UCLASS_COUNT; k++) {
        const zoe_unicode_table *t = &zoe_unicode_classes[k];
        for (size_t r = 0; r < t->count && t->ranges[r].first < 0x10000; r++) {
            uint32_t last = t->ranges[r].last < 0xFFFF ? t->ranges[r].last : 0xFFFF;
            for (uint32_t c = t->ranges[r].first; c <= last; c++) tok->bmp_class[c] |= bits[k];
        }
    }
    return 0;
}

/* ---- UTF-8 ---- */

uint32_t zoe_utf8_next(const unsigned char *s, size_t *i) {
    unsigned char b = s[*i];
    if (b < 0x80) {
        *i += 1;
        return b;
    }
    if (b < 0xE0) {
        uint32_t c = (uint32_t)(b & 0x1F) << 6 | (s[*i + 1] & 0x3F);
        *i += 2;
        return c;
    }
    if (b < 0xF0) {
        uint32_t c =
            (uint32_t)(b & 0x0F) << 12 | (uint32_t)(s[*i + 1] & 0x3F) << 6 | (s[*i + 2] & 0x3F);
        *i += 3;
        return c;
    }
    uint32_t c = (uint32_t)(b & 0x07) << 18 | (uint32_t)(s[*i + 1] & 0x3F) << 12 |
                 (uint32_t)(s[*i + 2] & 0x3F) << 6 | (s[*i + 3] & 0x3F);
    *i += 4;
    return c;
}

/* Bytes of the valid sequence at s[i] (1 to 4), or 0 when it is invalid; then *bad is the
 * length of its maximal subpart (the lead byte and the continuations valid so far). */
static size_t sequence_at(const unsigned char *s, size_t len, size_t i, size_t *bad) {
    unsigned char b = s[i];
    *bad = 1;
    if (b < 0x80) return 1;
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF; /* range of the second byte */
    if (b >= 0xC2 && b <= 0xDF)
        need = 2;
    else if (b >= 0xE0 && b <= 0xEF) {
        need = 3;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F; /* no surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 4;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
    } else {
        return 0;
    }
    for (size_t k = 1; k < need; k++) {
        if (i + k >= len) return 0;
        unsigned char c = s[i + k];
        if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return 0;
        *bad = k + 1;
    }
    return need;
}

size_t zoe_utf8_valid_prefix(const unsigned char *s, size_t len) {
    size_t i = 0, bad;
    while (i < len) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t n = sequence_at(s, len, i, &bad);
        if (n == 0) return i;
        i += n;
    }
    return len;
}

size_t zoe_utf8_sanitize(const unsigned char *s, size_t len, unsigned char *out) {
    size_t i = 0, o = 0, bad;
    while (i < len) {
        size_t n = sequence_at(s, len, i, &bad);
        if (n) {
            memcpy(out + o, s + i, n);
            o += n, i += n;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3, i += bad;
        }
    }
    return o;
}

/* ---- the patterns ---- */

typedef struct cursor {
    const zoe_tokenizer *tok;
    const unsigned char *s;
    size_t len;
} cursor;

/* Class bits of the character at i; *end is where the next one starts. */
static int class_at(const cursor *c, size_t i, uint32_t *cp, size_t *end) {
    size_t j = i;
    uint32_t u = zoe_utf8_next(c->s, &j);
    if (cp) *cp = u;
    *end = j;
    return zoe_cp_class(c->tok, u);
}

#define CLASS_ANY (ZOE_CP_LETTER | ZOE_CP_NUMBER | ZOE_CP_SPACE)

/* The end of the run from i of characters whose class bits under `mask` equal `want`; at most
 * max characters. */
static size_t run_end(const cursor *c, size_t i, int mask, int want, size_t max) {
    for (size_t n = 0; i < c->len && n < max; n++) {
        size_t end;
        if ((class_at(c, i, NULL, &end) & mask) != want) break;
        i = end;
    }
    return i;
}

static int is_other(int cls) {
    return (cls & CLASS_ANY) == 0;
}

/* 's 't 're 've 'm 'll 'd after the apostrophe at pos: the end, or 0. Case-insensitive as
 * Oniguruma folds: S, and the long s U+017F, fold to s; the other letters only to ASCII. */
static size_t contraction(const cursor *c, size_t pos, int fold) {
    size_t i = pos + 1;
    if (i >= c->len) return 0;
    size_t end;
    uint32_t a, b = 0;
    class_at(c, i, &a, &end);
    if (fold && a == 0x17F) a = 's';
    if (fold && a >= 'A' && a <= 'Z') a += 32;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return end;
    if (end >= c->len) return 0;
    size_t end2;
    class_at(c, end, &b, &end2);
    if (fold && b >= 'A' && b <= 'Z') b += 32;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return end2;
    return 0;
}

/* \s+(?!\S) then \s+ over the whitespace run [pos, run): the run without its last character
 * when a non-space follows and the run holds two or more, else the whole run. */
static size_t space_run(const cursor *c, size_t pos, size_t run) {
    if (run == c->len) return run;
    size_t last = run - 1;
    while ((c->s[last] & 0xC0) == 0x80) last--;
    return last > pos ? last : run;
}

static size_t match_gpt2(const cursor *c, size_t pos) {
    uint32_t cp;
    size_t next;
    int cls = class_at(c, pos, &cp, &next);
    if (cp == '\'') {
        size_t e = contraction(c, pos, 0);
        if (e) return e;
    }
    if (cp == ' ' && next < c->len) {
        size_t after;
        int cls2 = class_at(c, next, NULL, &after);
        if (cls2 & ZOE_CP_LETTER) return run_end(c, next, ZOE_CP_LETTER, ZOE_CP_LETTER, SIZE_MAX);
        if (cls2 & ZOE_CP_NUMBER) return run_end(c, next, ZOE_CP_NUMBER, ZOE_CP_NUMBER, SIZE_MAX);
        if (is_other(cls2)) return run_end(c, next, CLASS_ANY, 0, SIZE_MAX);
    }
    if (cls & ZOE_CP_LETTER) return run_end(c, pos, ZOE_CP_LETTER, ZOE_CP_LETTER, SIZE_MAX);
    if (cls & ZOE_CP_NUMBER) return run_end(c, pos, ZOE_CP_NUMBER, ZOE_CP_NUMBER, SIZE_MAX);
    if (is_other(cls)) return run_end(c, pos, CLASS_ANY, 0, SIZE_MAX);
    return space_run(c, pos, run_end(c, pos, ZOE_CP_SPACE, ZOE_CP_SPACE, SIZE_MAX));
}

static size_t line_breaks_end(const cursor *c, size_t i) {
    while (i < c->len && (c->s[i] == '\r' || c->s[i] == '\n')) i++;
    return i;
}

static size_t match_llama3(const cursor *c, size_t pos, size_t max_digits) {
    uint32_t cp;
    size_t next;
    int cls = class_at(c, pos, &cp, &next);
    if (cp == '\'') {
        size_t e = contraction(c, pos, 1);
        if (e) return e;
    }
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (cls & ZOE_CP_LETTER) return run_end(c, pos, ZOE_CP_LETTER, ZOE_CP_LETTER, SIZE_MAX);
    int cls2 = 0;
    size_t after = next;
    if (next < c->len) cls2 = class_at(c, next, NULL, &after);
    if (!(cls & ZOE_CP_NUMBER) && cp != '\r' && cp != '\n' && next < c->len &&
        (cls2 & ZOE_CP_LETTER))
        return run_end(c, next, ZOE_CP_LETTER, ZOE_CP_LETTER, SIZE_MAX);
    /* \p{N}{1,3} */
    if (cls & ZOE_CP_NUMBER) return run_end(c, pos, ZOE_CP_NUMBER, ZOE_CP_NUMBER, max_digits);
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    if (cp == ' ' && next < c->len && is_other(cls2))
        return line_breaks_end(c, run_end(c, next, CLASS_ANY, 0, SIZE_MAX));
    if (is_other(cls)) return line_breaks_end(c, run_end(c, pos, CLASS_ANY, 0, SIZE_MAX));
    /* \s*[\r\n]+ : to the run's last line break */
    size_t run = run_end(c, pos, ZOE_CP_SPACE, ZOE_CP_SPACE, SIZE_MAX);
    for (size_t j = run; j > pos; j--)
        if (c->s[j - 1] == '\r' || c->s[j - 1] == '\n') return j;
    return space_run(c, pos, run);
}

size_t zoe_pattern_match(const zoe_tokenizer *tok, zoe_split_pattern p, const unsigned char *s,
                         size_t len, size_t pos) {
    cursor c = {tok, s, len};
    switch (p) {
    case ZOE_PATTERN_GPT2:
        return match_gpt2(&c, pos);
    case ZOE_PATTERN_LLAMA3:
        return match_llama3(&c, pos, 3);
    case ZOE_PATTERN_QWEN2:
        return match_llama3(&c, pos, 1);
    }
    return len;
}
