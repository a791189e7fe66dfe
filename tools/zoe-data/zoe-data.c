/* zoe-data: converts text or JSON lines into the Megatron indexed format (PREFIX.bin +
 * PREFIX.idx) with the byte-level tokenizer or a tokenizer.json (byte-level BPE), and inspects
 * datasets. Every failure prints one line naming the
 * bad value and exits 2; a failed conversion leaves no output files behind.
 *
 * Explained in docs/data.md. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "zoe/cli.h"
#include "zoe/data.h"

#define EXIT_BAD 2

static const char usage[] =
    "usage: zoe-data --input FILE [--input FILE ...] --output-prefix PREFIX\n"
    "                [--tokenizer tokenizer.json [--append-eod] [--eod-token STR]]\n"
    "                [--json-key KEY] [--input-format auto|text|jsonl]\n"
    "                [--split-docs blank-line|line|file] [--dtype auto|uint16|int32]\n"
    "                [--threads N]\n"
    "       zoe-data --inspect PREFIX|FILE.txt\n"
    "       zoe-data --help\n"
    "\n"
    "Converts UTF-8 text or JSON lines into a Megatron indexed dataset (PREFIX.bin + PREFIX.idx).\n"
    "Without --tokenizer, the byte-level tokenizer: token b < 256 is byte b, 256 ends every\n"
    "document (vocab 257). With --tokenizer, the byte-level BPE of a Hugging Face tokenizer.json\n"
    "(GPT-2, Llama-3 ...), encoding exactly as the tokenizers package does (no special tokens\n"
    "added; invalid UTF-8 read as U+FFFD).\n"
    "  --input FILE          an input file (repeat for several, read in order)\n"
    "  --output-prefix P     writes P.bin and P.idx (atomically: temp names, then rename)\n"
    "  --tokenizer FILE      a tokenizer.json (byte-level BPE)\n"
    "  --append-eod          end every document with the end-of-document token (always on for\n"
    "                        the byte-level tokenizer)\n"
    "  --eod-token STR       that token (default: <|endoftext|>, <|end_of_text|>, </s> or <eos>,\n"
    "                        whichever is a special token of the tokenizer)\n"
    "  --input-format F      text, jsonl, or auto (default): .jsonl and .json files are JSON "
    "lines\n"
    "  --json-key KEY        JSON lines: the key of each object's document (default text)\n"
    "  --split-docs MODE     text: documents are paragraphs between blank lines (default), lines,\n"
    "                        or whole files\n"
    "  --dtype T             token type in P.bin: auto (default: uint16 when the vocabulary fits,\n"
    "                        else int32), uint16 or int32\n"
    "  --threads N           encoding threads (default: OpenMP's, OMP_NUM_THREADS)\n"
    "  --inspect PATH        prints the statistics of an indexed dataset or a text file\n"
    "Progress (documents, MB/s, ETA) goes to stderr when it is a terminal. Exits 2 on any error,\n"
    "with one line on stderr naming the bad value.\n";

enum { FORMAT_AUTO, FORMAT_TEXT, FORMAT_JSONL };

typedef struct options {
    const char **inputs;
    int n_inputs;
    const char *prefix, *inspect, *tokenizer, *eod_token, *json_key;
    zoe_doc_split split;
    zoe_token_dtype dtype;
    int auto_dtype, format, append_eod, threads;
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

/* "--name VALUE" or "--name=VALUE" (zoe_cli_value's rule): the value, or NULL when this argument
 * is not --name or is refused (*refused set, the reason in zoe_last_error()). */
static const char *option_value(int argc, char **argv, int *i, const char *name, int *refused) {
    const char *v = NULL;
    zoe_cli_repeat repeat = strcmp(name, "--input") == 0 ? ZOE_CLI_MANY : ZOE_CLI_ONCE;
    int found = zoe_cli_value(argc, argv, i, name, repeat, &v);
    if (found < 0) *refused = 1;
    return found > 0 ? v : NULL;
}

static int parse(int argc, char **argv, options *o) {
    *o = (options){.split = ZOE_SPLIT_BLANK_LINE,
                   .dtype = ZOE_TOKENS_UINT16,
                   .auto_dtype = 1,
                   .json_key = "text"};
    o->inputs = calloc((size_t)argc, sizeof *o->inputs);
    if (!o->inputs) return fail("out of memory");
    for (int i = 1; i < argc; i++) {
        const char *v;
        int refused = 0;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            o->help = 1;
        } else if ((v = option_value(argc, argv, &i, "--input", &refused))) {
            o->inputs[o->n_inputs++] = v;
        } else if ((v = option_value(argc, argv, &i, "--output-prefix", &refused))) {
            o->prefix = v;
        } else if ((v = option_value(argc, argv, &i, "--inspect", &refused))) {
            o->inspect = v;
        } else if ((v = option_value(argc, argv, &i, "--split-docs", &refused))) {
            if (zoe_doc_split_parse(v, &o->split) != ZOE_OK)
                return fail("--split-docs '%s' unknown (expected blank-line, line or file)", v);
        } else if ((v = option_value(argc, argv, &i, "--dtype", &refused))) {
            o->auto_dtype = strcmp(v, "auto") == 0;
            if (!o->auto_dtype && zoe_token_dtype_parse(v, &o->dtype) != ZOE_OK)
                return fail("--dtype '%s' unknown (expected auto, uint16 or int32)", v);
        } else if ((v = option_value(argc, argv, &i, "--tokenizer", &refused))) {
            o->tokenizer = v;
        } else if ((v = option_value(argc, argv, &i, "--eod-token", &refused))) {
            o->eod_token = v;
        } else if ((v = option_value(argc, argv, &i, "--json-key", &refused))) {
            o->json_key = v;
        } else if ((v = option_value(argc, argv, &i, "--input-format", &refused))) {
            static const char *const names[] = {"auto", "text", "jsonl"};
            o->format = -1;
            for (int k = 0; k < 3; k++)
                if (strcmp(v, names[k]) == 0) o->format = k;
            if (o->format < 0)
                return fail("--input-format '%s' unknown (expected auto, text or jsonl)", v);
        } else if ((v = option_value(argc, argv, &i, "--threads", &refused))) {
            double n = 0;
            if (!zoe_parse_number(v, &n) || n != floor(n) || n < 1 || n > 4096)
                return fail("--threads '%s' is not a count in [1, 4096]", v);
            o->threads = (int)n;
        } else if (refused) {
            return fail("%s (see zoe-data --help)", zoe_last_error());
        } else if (strcmp(argv[i], "--append-eod") == 0) {
            if (zoe_cli_once(argv, i, "--append-eod") != 0)
                return fail("%s (see zoe-data --help)", zoe_last_error());
            o->append_eod = 1;
        } else {
            return fail("unknown option '%s' (see zoe-data --help)", argv[i]);
        }
    }
    if (o->help) return 0;
    if (o->inspect && (o->n_inputs || o->prefix))
        return fail("--inspect cannot be combined with --input or --output-prefix");
    if (!o->inspect && o->n_inputs == 0) return fail("no --input given (see zoe-data --help)");
    if (!o->inspect && !o->prefix) return fail("no --output-prefix given (see zoe-data --help)");
    if (o->eod_token && !o->tokenizer)
        return fail("--eod-token '%s' needs --tokenizer (the byte-level EOD is %d)", o->eod_token,
                    ZOE_BYTE_EOD);
    if (!o->inspect && !o->prefix[0])
        return fail("--output-prefix is empty: give a path such as data/corpus");
    return 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int is_jsonl(const options *o, const char *path) {
    if (o->format != FORMAT_AUTO) return o->format == FORMAT_JSONL;
    return ends_with(path, ".jsonl") || ends_with(path, ".json");
}

/* Opens every input first, so a missing file fails before any output exists, and sums their
 * sizes; an input that is one of the outputs (PREFIX.bin or PREFIX.idx, by path or through a
 * link) would be overwritten, so it is refused too. */
static int check_inputs(const options *o, long long *total) {
    *total = 0;
    char bin[4096], idx[4096];
    snprintf(bin, sizeof bin, "%s.bin", o->prefix);
    snprintf(idx, sizeof idx, "%s.idx", o->prefix);
    struct stat out_bin, out_idx;
    int have_bin = stat(bin, &out_bin) == 0, have_idx = stat(idx, &out_idx) == 0;
    for (int i = 0; i < o->n_inputs; i++) {
        FILE *f = fopen(o->inputs[i], "rb");
        if (!f) return fail("cannot read input '%s': %s", o->inputs[i], strerror(errno));
        struct stat in;
        int have_in = fstat(fileno(f), &in) == 0;
        if (have_in && S_ISREG(in.st_mode)) *total += (long long)in.st_size;
        int same =
            have_in && ((have_bin && in.st_dev == out_bin.st_dev && in.st_ino == out_bin.st_ino) ||
                        (have_idx && in.st_dev == out_idx.st_dev && in.st_ino == out_idx.st_ino));
        fclose(f);
        if (same || strcmp(o->inputs[i], bin) == 0 || strcmp(o->inputs[i], idx) == 0)
            return fail("--input '%s' is also an output of --output-prefix '%s': it would be "
                        "overwritten",
                        o->inputs[i], o->prefix);
    }
    return 0;
}

/* The live line on a terminal: documents, MB/s, ETA from the bytes still to read. */
typedef struct progress {
    int live;
    long long total, done_files; /* input bytes: all, and of the files finished */
    double started, shown;
} progress;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void show_progress(void *user, int64_t docs, int64_t bytes) {
    progress *p = user;
    double t = now_s();
    if (!p->live || t - p->shown < 0.25) return;
    p->shown = t;
    double done = (double)(p->done_files + bytes), rate = done / (t - p->started + 1e-9);
    double eta = rate > 0 ? ((double)p->total - done) / rate : 0;
    fprintf(stderr, "\rzoe-data: %lld documents, %.1f of %.1f MB, %.1f MB/s, ETA %d:%02d   ",
            (long long)docs, done / 1e6, (double)p->total / 1e6, rate / 1e6, (int)eta / 60,
            (int)eta % 60);
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
    long long total;
    int rc = check_inputs(o, &total);
    if (rc != 0) return rc;
    zoe_tokenizer *tok = NULL;
    zoe_dataset_writer *w = NULL;
    zoe_status st = o->tokenizer ? zoe_tokenizer_load_json(o->tokenizer, o->eod_token, &tok)
                                 : zoe_tokenizer_create_bytes(&tok);
    if (st != ZOE_OK) return fail_zoe();
    int32_t vocab = zoe_tokenizer_vocab_size(tok);
    zoe_token_dtype dtype = o->dtype;
    if (o->auto_dtype) dtype = vocab <= 65536 ? ZOE_TOKENS_UINT16 : ZOE_TOKENS_INT32;
    if (dtype == ZOE_TOKENS_UINT16 && vocab > 65536)
        rc = fail("--dtype uint16 cannot hold the %d tokens of '%s' (use int32 or auto)", vocab,
                  o->tokenizer);
    hold_signals(1);
    if (rc == 0 && zoe_dataset_writer_create(o->prefix, dtype, &w) != ZOE_OK) rc = fail_zoe();
    if (rc == 0) on_signals_remove(w);
    hold_signals(0);
    progress prog = {.live = isatty(fileno(stderr)), .total = total, .started = now_s()};
    for (int i = 0; rc == 0 && i < o->n_inputs; i++) {
        zoe_input_options in = {.split = o->split,
                                .json_key = is_jsonl(o, o->inputs[i]) ? o->json_key : NULL,
                                .append_eod = o->append_eod || !o->tokenizer,
                                .threads = o->threads,
                                .progress = show_progress,
                                .progress_user = &prog};
        if (zoe_dataset_writer_add_file(w, tok, o->inputs[i], &in) != ZOE_OK) rc = fail_zoe();
        FILE *f = rc == 0 ? fopen(o->inputs[i], "rb") : NULL;
        if (f && fseek(f, 0, SEEK_END) == 0) prog.done_files += ftell(f);
        if (f) fclose(f);
    }
    if (prog.live && prog.shown > 0) fprintf(stderr, "\n");
    if (rc == 0 && zoe_dataset_writer_documents(w) == 0)
        rc = fail("no documents in the input ('%s' ...): every file is empty or blank",
                  o->inputs[0]);
    if (rc == 0 && zoe_dataset_writer_finish(w) != ZOE_OK) rc = fail_zoe();
    double secs = now_s() - prog.started;
    if (rc == 0)
        printf("zoe-data: wrote %s.bin and %s.idx: %lld documents, %lld tokens (%s, %s vocab %d, "
               "EOD %d) from %d file%s (%.1f MB in %.1f s, %.1f MB/s)\n",
               o->prefix, o->prefix, (long long)zoe_dataset_writer_documents(w),
               (long long)zoe_dataset_writer_tokens(w), zoe_token_dtype_name(dtype),
               o->tokenizer ? "BPE" : "byte-level", vocab,
               o->append_eod || !o->tokenizer ? zoe_tokenizer_eod(tok) : -1, o->n_inputs,
               o->n_inputs == 1 ? "" : "s", (double)total / 1e6, secs,
               (double)total / 1e6 / (secs > 0 ? secs : 1e-9));
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
