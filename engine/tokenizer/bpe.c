/* BPE: the hash maps behind the vocabulary, the merges and the word cache, and the merge loop
 * of one word. The loop is the one of `tokenizers`: a min-heap of candidate merges ordered by
 * (rank, position), stale entries skipped when popped, so a word of n symbols costs
 * O(n log n) and ties go to the leftmost pair.
 *
 * Explained in docs/data.md, "A tokenizer.json and JSON lines". */
#include <stdlib.h>
#include <string.h>
#include "engine/tokenizer/tokenizer_impl.h"

/* FNV-1a over the bytes, then a final mix so that the low bits index well. */
static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 33);
}

void zoe_str_map_free(zoe_str_map *m) {
    free(m->slots);
    free(m->key_off);
    free(m->key_len);
    free(m->values);
    free(m->keys);
    memset(m, 0, sizeof *m);
}

void zoe_str_map_clear(zoe_str_map *m) {
    if (m->slots) memset(m->slots, 0, (m->mask + 1) * sizeof *m->slots);
    m->count = 0;
    m->keys_len = 0;
}

static int find_slot(const zoe_str_map *m, const char *key, size_t len, size_t *slot) {
    size_t i = (size_t)hash_bytes(key, len) & m->mask;
    for (;; i = (i + 1) & m->mask) {
        uint32_t e = m->slots[i];
        if (e == 0) {
            *slot = i;
            return 0;
        }
        e--;
        if (m->key_len[e] == len && memcmp(m->keys + m->key_off[e], key, len) == 0) {
            *slot = i;
            return 1;
        }
    }
}

static int grow(zoe_str_map *m) {
    size_t cap = m->capacity ? 2 * m->capacity : 64;
    size_t *off = realloc(m->key_off, cap * sizeof *off);
    if (off) m->key_off = off;
    uint32_t *klen = realloc(m->key_len, cap * sizeof *klen);
    if (klen) m->key_len = klen;
    int32_t *vals = realloc(m->values, cap * sizeof *vals);
    if (vals) m->values = vals;
    uint32_t *slots = calloc(2 * cap, sizeof *slots);
    if (!off || !klen || !vals || !slots) {
        free(slots);
        return 1;
    }
    free(m->slots);
    m->slots = slots;
    m->mask = 2 * cap - 1;
    m->capacity = cap;
    for (size_t e = 0; e < m->count; e++) {
        size_t i = (size_t)hash_bytes(m->keys + m->key_off[e], m->key_len[e]) & m->mask;
        while (m->slots[i]) i = (i + 1) & m->mask;
        m->slots[i] = (uint32_t)e + 1;
    }
    return 0;
}

int zoe_str_map_put(zoe_str_map *m, const char *key, size_t len, int32_t value) {
    size_t slot;
    if (m->slots && find_slot(m, key, len, &slot)) {
        m->values[m->slots[slot] - 1] = value;
        return 0;
    }
    if (m->count == m->capacity && grow(m)) return 1;
    if (m->keys_len + len > m->keys_cap) {
        size_t cap = m->keys_cap ? m->keys_cap : 4096;
        while (cap < m->keys_len + len) cap *= 2;
        char *keys = realloc(m->keys, cap);
        if (!keys) return 1;
        m->keys = keys;
        m->keys_cap = cap;
    }
    find_slot(m, key, len, &slot);
    size_t e = m->count++;
    memcpy(m->keys + m->keys_len, key, len);
    m->key_off[e] = m->keys_len;
    m->key_len[e] = (uint32_t)len;
    m->values[e] = value;
    m->keys_len += len;
    m->slots[slot] = (uint32_t)e + 1;
    return 0;
}

int32_t zoe_str_map_get(const zoe_str_map *m, const char *key, size_t len) {
    size_t slot;
    if (!m->slots || !find_slot(m, key, len, &slot)) return -1;
    return m->values[m->slots[slot] - 1];
}

/* ---- merges ---- */

static uint64_t pair_key(int32_t left, int32_t right) {
    return (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
}

static size_t pair_slot(uint64_t key, size_t mask) {
    key ^= key >> 31;
    key *= 0x9e3779b97f4a7c15ull;
    return (size_t)(key ^ (key >> 29)) & mask;
}

int zoe_merge_map_init(zoe_merge_map *m, size_t n) {
    size_t cap = 64;
    while (cap < 2 * n + 2) cap *= 2;
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return 1;
    for (size_t i = 0; i < cap; i++) m->slots[i] = (zoe_merge){.rank = -1};
    m->mask = cap - 1;
    return 0;
}

void zoe_merge_map_put(zoe_merge_map *m, int32_t left, int32_t right, int32_t rank,
                       int32_t merged) {
    uint64_t key = pair_key(left, right);
    size_t i = pair_slot(key, m->mask);
    while (m->slots[i].rank >= 0 && m->slots[i].pair != key) i = (i + 1) & m->mask;
    m->slots[i] = (zoe_merge){.pair = key, .rank = rank, .merged = merged};
}

const zoe_merge *zoe_merge_find(const zoe_merge_map *m, int32_t left, int32_t right) {
    if (!m->slots) return NULL;
    uint64_t key = pair_key(left, right);
    for (size_t i = pair_slot(key, m->mask);; i = (i + 1) & m->mask) {
        if (m->slots[i].rank < 0) return NULL;
        if (m->slots[i].pair == key) return &m->slots[i];
    }
}

/* ---- one word ---- */

void zoe_bpe_scratch_free(zoe_bpe_scratch *sc) {
    free(sc->sym);
    free(sc->heap);
    memset(sc, 0, sizeof *sc);
}

static int reserve(zoe_bpe_scratch *sc, size_t n) {
    if (n <= sc->cap) return 0;
    size_t cap = sc->cap ? sc->cap : 64;
    while (cap < n) cap *= 2;
    zoe_bpe_symbol *sym = realloc(sc->sym, cap * sizeof *sym);
    if (!sym) return 1;
    sc->sym = sym;
    sc->cap = cap;
    return 0;
}

static int heap_less(const zoe_bpe_candidate *a, const zoe_bpe_candidate *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_swap(zoe_bpe_scratch *sc, size_t a, size_t b) {
    zoe_bpe_candidate t = sc->heap[a];
    sc->heap[a] = sc->heap[b];
    sc->heap[b] = t;
}

static int heap_push(zoe_bpe_scratch *sc, int32_t rank, int32_t pos, int32_t merged) {
    if (sc->heap_len == sc->heap_cap) {
        size_t cap = sc->heap_cap ? 2 * sc->heap_cap : 64;
        zoe_bpe_candidate *heap = realloc(sc->heap, cap * sizeof *heap);
        if (!heap) return 1;
        sc->heap = heap;
        sc->heap_cap = cap;
    }
    size_t i = sc->heap_len++;
    sc->heap[i] = (zoe_bpe_candidate){.rank = rank, .pos = pos, .merged = merged};
    while (i > 0 && heap_less(&sc->heap[i], &sc->heap[(i - 1) / 2])) {
        heap_swap(sc, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
    return 0;
}

static void heap_pop(zoe_bpe_scratch *sc) {
    heap_swap(sc, 0, --sc->heap_len);
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < sc->heap_len && heap_less(&sc->heap[l], &sc->heap[m])) m = l;
        if (r < sc->heap_len && heap_less(&sc->heap[r], &sc->heap[m])) m = r;
        if (m == i) break;
        heap_swap(sc, i, m);
        i = m;
    }
}

static int push_pair(const zoe_tokenizer *tok, zoe_bpe_scratch *sc, int32_t pos) {
    int32_t nx = sc->sym[pos].next;
    if (nx < 0) return 0;
    const zoe_merge *m = zoe_merge_find(&tok->merges, sc->sym[pos].id, sc->sym[nx].id);
    return m ? heap_push(sc, m->rank, pos, m->merged) : 0;
}

/* The byte-level character of byte b, UTF-8 encoded (two bytes at most). */
static size_t byte_level_utf8(unsigned char b, unsigned char out[2]) {
    uint32_t c = b;
    if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) {
        uint32_t k = 0; /* rank of b among the bytes that are not printable */
        for (uint32_t x = 0; x < b; x++)
            k += !((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
        c = 256 + k;
    }
    if (c < 0x80) {
        out[0] = (unsigned char)c;
        return 1;
    }
    out[0] = (unsigned char)(0xC0 | c >> 6);
    out[1] = (unsigned char)(0x80 | (c & 0x3F));
    return 2;
}

/* The initial symbols of a word, as `tokenizers` makes them: each character (a byte, for
 * byte-level) its vocabulary id; else its bytes as <0xXX> tokens (byte_fallback); else unk,
 * which waits until the next known character and, with fuse_unk, swallows the unknown ones in
 * between (so byte-fallback tokens can land before a pending unk, as there); else nothing. */
static size_t initial_symbols(const zoe_tokenizer *tok, zoe_bpe_scratch *sc, const unsigned char *w,
                              size_t len) {
    size_t n = 0;
    int pending_unk = 0;
    for (size_t i = 0; i < len;) {
        size_t start = i;
        int32_t id;
        unsigned char mapped[2];
        const unsigned char *bytes = w + start;
        size_t n_bytes;
        if (tok->byte_level) {
            id = tok->byte_ids[w[i++]];
            n_bytes = byte_level_utf8(w[start], mapped);
            bytes = mapped;
        } else {
            zoe_utf8_next(w, &i);
            n_bytes = i - start;
            id = zoe_str_map_get(&tok->vocab, (const char *)w + start, n_bytes);
        }
        if (id >= 0) {
            if (pending_unk) sc->sym[n++].id = tok->unk;
            pending_unk = 0;
            sc->sym[n++].id = id;
            continue;
        }
        if (tok->byte_fallback) {
            int all = 1;
            for (size_t k = 0; k < n_bytes; k++) all &= tok->fallback_ids[bytes[k]] >= 0;
            if (all) {
                for (size_t k = 0; k < n_bytes; k++) sc->sym[n++].id = tok->fallback_ids[bytes[k]];
                continue;
            }
        }
        if (tok->unk < 0) continue;
        if (pending_unk && !tok->fuse_unk) sc->sym[n++].id = tok->unk;
        pending_unk = 1;
    }
    if (pending_unk) sc->sym[n++].id = tok->unk;
    return n;
}

long zoe_bpe_word(const zoe_tokenizer *tok, zoe_bpe_scratch *sc, const unsigned char *word,
                  size_t len, int32_t *out) {
    if (tok->ignore_merges) {
        int32_t id = zoe_str_map_get(&tok->vocab, (const char *)word, len);
        if (id >= 0) {
            out[0] = id;
            return 1;
        }
    }
    if (reserve(sc, 4 * len + 1)) return -1;
    size_t n = initial_symbols(tok, sc, word, len);
    zoe_bpe_symbol *sym = sc->sym;
    sc->heap_len = 0;
    for (size_t i = 0; i < n; i++) {
        sym[i].prev = (int32_t)i - 1;
        sym[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++)
        if (push_pair(tok, sc, (int32_t)i)) return -1;
    while (sc->heap_len > 0) {
        zoe_bpe_candidate top = sc->heap[0];
        heap_pop(sc);
        /* Stale: the symbol was merged away, or its right neighbour changed. */
        int32_t pos = top.pos, right = sym[pos].next;
        if (sym[pos].id < 0 || right < 0) continue;
        const zoe_merge *m = zoe_merge_find(&tok->merges, sym[pos].id, sym[right].id);
        if (!m || m->merged != top.merged) continue;
        sym[pos].id = top.merged;
        sym[right].id = -1;
        sym[pos].next = sym[right].next;
        if (sym[right].next >= 0) sym[sym[right].next].prev = pos;
        if (sym[pos].prev >= 0 && push_pair(tok, sc, sym[pos].prev)) return -1;
        if (push_pair(tok, sc, pos)) return -1;
    }
    long count = 0;
    for (int32_t i = n ? 0 : -1; i >= 0; i = sym[i].next) out[count++] = sym[i].id;
    return count;
}
