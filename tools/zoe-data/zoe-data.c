/* zoe-data: converts UTF-8 text into the Megatron indexed format (PREFIX.bin + PREFIX.idx) with
 * the byte-level tokenizer, and inspects datasets. Every failure prints one line naming the
 * bad value and exits 2; a failed conversion leaves no output files behind. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "zoe/data.h"

#define EXIT_BAD 2

static const char usage[] =
    "usage: zoe-data --input FILE.txt [--input FILE ...] --output-prefix PREFIX\n"
    "                [--split-docs blank-line|line|file] [--dtype uint16|int32]\n"
    "       zoe-data --inspect PREFIX|FILE.txt\n"
    "       zoe-data --help\n"
    "\n"
    "Converts UTF-8 text into a Megatron indexed dataset (PREFIX.bin + PREFIX.idx) with the\n"
    "byte-level tokenizer: token b < 256 is byte b, 256 ends every document (vocab 257).\n"
    "  --input FILE          a text file (repeat for several, read in order)\n"
    "  --output-prefix P     writes P.bin and P.idx (atomically: temp names, then rename)\n"
    "  --split-docs MODE     documents are paragraphs between blank lines (default), lines,\n"
    "                        or whole files\n"
    "  --dtype T             token type in P.bin: uint16 (default) or int32\n"
    "  --inspect PATH        prints the statistics of an indexed dataset or a text file\n"
    "Exits 2 on any error, with one line on stderr naming the bad value.\n";

typedef struct options {
    const char **inputs;
    int n_inputs;
    const char *prefix, *inspect;
    zoe_doc_split split;
    zoe_token_dtype dtype;
    int help;
} options;

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "zoe-data: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return EXIT_BAD;
}

static int fail_zoe(void) {
    return fail("%s", zoe_last_error());
}

/* "--name VALUE" or "--name=VALUE": the value, or NULL when this argument is not --name. */
static const char *option_value(int argc, char **argv, int *i, const char *name, int *missing) {
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0) return NULL;
    if (argv[*i][n] == '=') return argv[*i] + n + 1;
    if (argv[*i][n] != '\0') return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

static int parse(int argc, char **argv, options *o) {
    *o = (options){.split = ZOE_SPLIT_BLANK_LINE, .dtype = ZOE_TOKENS_UINT16};
    o->inputs = calloc((size_t)argc, sizeof *o->inputs);
    if (!o->inputs) return fail("out of memory");
    for (int i = 1; i < argc; i++) {
        const char *v;
        int missing = 0;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            o->help = 1;
        } else if ((v = option_value(argc, argv, &i, "--input", &missing))) {
            o->inputs[o->n_inputs++] = v;
        } else if ((v = option_value(argc, argv, &i, "--output-prefix", &missing))) {
            o->prefix = v;
        } else if ((v = option_value(argc, argv, &i, "--inspect", &missing))) {
            o->inspect = v;
        } else if ((v = option_value(argc, argv, &i, "--split-docs", &missing))) {
            if (zoe_doc_split_parse(v, &o->split) != ZOE_OK)
                return fail("--split-docs '%s' unknown (expected blank-line, line or file)", v);
        } else if ((v = option_value(argc, argv, &i, "--dtype", &missing))) {
            if (zoe_token_dtype_parse(v, &o->dtype) != ZOE_OK)
                return fail("--dtype '%s' unknown (expected uint16 or int32)", v);
        } else if (missing) {
            return fail("option '%s' needs a value (see zoe-data --help)", argv[i]);
        } else {
            return fail("unknown option '%s' (see zoe-data --help)", argv[i]);
        }
    }
    if (o->help) return 0;
    if (o->inspect && (o->n_inputs || o->prefix))
        return fail("--inspect cannot be combined with --input or --output-prefix");
    if (!o->inspect && o->n_inputs == 0) return fail("no --input given (see zoe-data --help)");
    if (!o->inspect && !o->prefix) return fail("no --output-prefix given (see zoe-data --help)");
    if (!o->inspect && !o->prefix[0])
        return fail("--output-prefix is empty: give a path such as data/corpus");
    return 0;
}

/* Opens every input first, so a missing file fails before any output exists; an input that
 * is one of the outputs (PREFIX.bin or PREFIX.idx, by path or through a link) would be
 * overwritten, so it is refused too. */
static int check_inputs(const options *o) {
    char bin[4096], idx[4096];
    snprintf(bin, sizeof bin, "%s.bin", o->prefix);
    snprintf(idx, sizeof idx, "%s.idx", o->prefix);
    struct stat out_bin, out_idx;
    int have_bin = stat(bin, &out_bin) == 0, have_idx = stat(idx, &out_idx) == 0;
    for (int i = 0; i < o->n_inputs; i++) {
        FILE *f = fopen(o->inputs[i], "rb");
        if (!f) return fail("cannot read input '%s': %s", o->inputs[i], strerror(errno));
        struct stat in;
        int same = fstat(fileno(f), &in) == 0 &&
                   ((have_bin && in.st_dev == out_bin.st_dev && in.st_ino == out_bin.st_ino) ||
                    (have_idx && in.st_dev == out_idx.st_dev && in.st_ino == out_idx.st_ino));
        fclose(f);
        if (same || strcmp(o->inputs[i], bin) == 0 || strcmp(o->inputs[i], idx) == 0)
            return fail("--input '%s' is also an output of --output-prefix '%s': it would be "
                        "overwritten",
                        o->inputs[i], o->prefix);
    }
    return 0;
}

/* SIGINT/SIGTERM during a conversion: the temporary outputs go, then the signal does what it
 * would have done. The handler reads only these two paths, set before any file exists. */
static const char *volatile temp_bin, *volatile temp_idx;

static void remove_temporaries_and_die(int sig) {
    if (temp_bin) unlink(temp_bin);
    if (temp_idx) unlink(temp_idx);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Held from before the writer makes its files until the handler knows their names. */
static void hold_signals(int hold) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigprocmask(hold ? SIG_BLOCK : SIG_UNBLOCK, &set, NULL);
}

static void on_signals_remove(const zoe_dataset_writer *w) {
    const char *bin, *idx;
    zoe_dataset_writer_temp_paths(w, &bin, &idx);
    temp_bin = bin, temp_idx = idx;
    struct sigaction sa = {.sa_handler = remove_temporaries_and_die};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static void on_signals_default(void) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    temp_bin = temp_idx = NULL;
}

static int convert(const options *o) {
    int rc = check_inputs(o);
    if (rc != 0) return rc;
    zoe_tokenizer *tok = NULL;
    zoe_dataset_writer *w = NULL;
    hold_signals(1);
    if (zoe_tokenizer_create_bytes(&tok) != ZOE_OK ||
        zoe_dataset_writer_create(o->prefix, o->dtype, &w) != ZOE_OK)
        rc = fail_zoe();
    if (rc == 0) on_signals_remove(w);
    hold_signals(0);
    for (int i = 0; rc == 0 && i < o->n_inputs; i++)
        if (zoe_dataset_writer_add_text_file(w, tok, o->inputs[i], o->split) != ZOE_OK)
            rc = fail_zoe();
    if (rc == 0 && zoe_dataset_writer_documents(w) == 0)
        rc = fail("no documents in the input ('%s' ...): every file is empty or blank",
                  o->inputs[0]);
    if (rc == 0 && zoe_dataset_writer_finish(w) != ZOE_OK) rc = fail_zoe();
    if (rc == 0)
        printf("zoe-data: wrote %s.bin and %s.idx: %lld documents, %lld tokens (%s, byte-level "
               "vocab %d, EOD %d) from %d file%s, split %s\n",
               o->prefix, o->prefix, (long long)zoe_dataset_writer_documents(w),
               (long long)zoe_dataset_writer_tokens(w), zoe_token_dtype_name(o->dtype),
               ZOE_BYTE_VOCAB_SIZE, ZOE_BYTE_EOD, o->n_inputs, o->n_inputs == 1 ? "" : "s",
               zoe_doc_split_name(o->split));
    on_signals_default();
    zoe_dataset_writer_destroy(w); /* removes the temporary files unless finished */
    zoe_tokenizer_destroy(tok);
    return rc;
}

/* Token statistics over the whole stream, read in chunks. */
typedef struct stream_stats {
    int32_t min, max;
    int64_t eod;
} stream_stats;

static zoe_status scan_tokens(const zoe_dataset *ds, stream_stats *s) {
    enum { CHUNK = 1 << 16 };
    int32_t *chunk = malloc(CHUNK * sizeof *chunk);
    if (!chunk) return ZOE_ERR_OUT_OF_MEMORY;
    *s = (stream_stats){.min = INT32_MAX, .max = INT32_MIN};
    int64_t total = zoe_dataset_tokens(ds);
    zoe_status st = ZOE_OK;
    for (int64_t off = 0; st == ZOE_OK && off < total; off += CHUNK) {
        int64_t n = total - off < CHUNK ? total - off : CHUNK;
        st = zoe_dataset_read(ds, off, n, chunk);
        for (int64_t i = 0; st == ZOE_OK && i < n; i++) {
            if (chunk[i] < s->min) s->min = chunk[i];
            if (chunk[i] > s->max) s->max = chunk[i];
            s->eod += chunk[i] == ZOE_BYTE_EOD;
        }
    }
    free(chunk);
    return st;
}

static int inspect(const char *path) {
    zoe_dataset *ds;
    if (zoe_dataset_open(path, &ds) != ZOE_OK) return fail_zoe();
    int64_t docs = zoe_dataset_documents(ds), min_len = INT64_MAX, max_len = 0;
    for (int64_t d = 0; d < docs; d++) {
        int64_t off, len;
        zoe_dataset_document(ds, d, &off, &len);
        if (len < min_len) min_len = len;
        if (len > max_len) max_len = len;
    }
    stream_stats s;
    if (scan_tokens(ds, &s) != ZOE_OK) {
        zoe_dataset_destroy(ds);
        return fail_zoe();
    }
    int64_t tokens = zoe_dataset_tokens(ds);
    printf("dataset:    %s\n", zoe_dataset_name(ds));
    printf("dtype:      %s (Megatron code %d)\n", zoe_token_dtype_name(zoe_dataset_dtype(ds)),
           (int)zoe_dataset_dtype(ds));
    printf("documents:  %lld\n", (long long)docs);
    printf("sequences:  %lld\n", (long long)zoe_dataset_sequences(ds));
    printf("tokens:     %lld\n", (long long)tokens);
    if (docs > 0)
        printf("doc length: min %lld, mean %.1f, max %lld tokens\n", (long long)min_len,
               (double)tokens / (double)docs, (long long)max_len);
    if (tokens > 0) printf("token ids:  %d .. %d\n", s.min, s.max);
    if (tokens > 0 && s.min >= 0 && s.max < ZOE_BYTE_VOCAB_SIZE)
        printf("byte-level: yes (vocab %d), %lld EOD tokens\n", ZOE_BYTE_VOCAB_SIZE,
               (long long)s.eod);
    else
        printf("byte-level: no (ids outside [0, %d)): use the vocabulary it was made with\n",
               ZOE_BYTE_VOCAB_SIZE);
    zoe_dataset_destroy(ds);
    return 0;
}

int main(int argc, char **argv) {
    options o;
    int rc = parse(argc, argv, &o);
    if (rc == 0 && (o.help || argc == 1)) fputs(usage, o.help ? stdout : stderr);
    if (rc == 0 && argc == 1)
        rc = EXIT_BAD;
    else if (rc == 0 && !o.help)
        rc = o.inspect ? inspect(o.inspect) : convert(&o);
    free(o.inputs);
    return rc;
}
