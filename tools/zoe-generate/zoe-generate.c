/* zoe-generate: continues a prompt with a model from a zoe checkpoint, at any TP under mpirun
 * (one replica: the world size is --tp). Uses the public API only.
 *   mpirun -np 2 zoe-generate --checkpoint ckpt --prompt "ROMEO:" --max-new-tokens 200
 * Byte-level text when the checkpoint was trained on zoe's byte tokens (the demo), a
 * tokenizer.json (--tokenizer) otherwise. The continuation goes to stdout, a summary line to
 * stderr. Exit status: 0 ok, 2 bad usage, a missing or unreadable checkpoint, 1 a failure after
 * the model was built, or an MPI that cannot start (Open MPI's own lines say why).
 *
 * Explained in docs/generate.md. */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "zoe/generate.h"
#include "zoe/tokenizer.h"
#include "zoe/zoe.h"

#define EXIT_FAILED 1
#define EXIT_USAGE  2

typedef struct options {
    zoe_generate_config gen;
    char tokenizer[ZOE_PATH_MAX];
    char prompt_file[ZOE_PATH_MAX];
    const char *prompt;
    char backend[16];
    int help;
} options;

typedef enum opt_kind { OPT_PATH, OPT_TEXT, OPT_INT, OPT_FLOAT, OPT_U64, OPT_WORD } opt_kind;

/* The options, each once: its name, where its value goes, its range, and its help. */
typedef struct opt_spec {
    const char *name;
    opt_kind kind;
    size_t offset;
    double lo, hi; /* numbers: the accepted range */
    const char *help;
} opt_spec;

#define AT(field) offsetof(options, field)
static const opt_spec specs[] = {
    {"checkpoint", OPT_PATH, AT(gen.checkpoint), 0, 0,
     "checkpoint directory, or a directory of them (its newest)"},
    {"tokenizer", OPT_PATH, AT(tokenizer), 0, 0,
     "tokenizer.json of the model's data (not needed for byte-level checkpoints)"},
    {"prompt", OPT_TEXT, AT(prompt), 0, 0, "the text to continue"},
    {"prompt-file", OPT_PATH, AT(prompt_file), 0, 0, "read the prompt from a file instead"},
    {"max-new-tokens", OPT_INT, AT(gen.max_new_tokens), 1, INT_MAX, "tokens to generate at most"},
    {"temperature", OPT_FLOAT, AT(gen.sampling.temperature), 0, 100, "0: greedy (argmax)"},
    {"top-k", OPT_INT, AT(gen.sampling.top_k), 0, INT_MAX, "keep the k most likely (0: all)"},
    {"top-p", OPT_FLOAT, AT(gen.sampling.top_p), 1e-9, 1,
     "keep the most likely tokens up to this probability (1: all)"},
    {"seed", OPT_U64, AT(gen.seed), 0, 0, "seed of the sampling draws"},
    {"tp", OPT_INT, AT(gen.tp), 1, INT_MAX, "tensor-parallel size; must be the world size"},
    {"backend", OPT_WORD, AT(backend), 0, 0, "cpu or cuda"},
};
#define NUM_SPECS ((int)(sizeof specs / sizeof specs[0]))

static void defaults(options *o) {
    *o = (options){.gen = (zoe_generate_config)ZOE_GENERATE_CONFIG_INITIALIZER};
    o->gen.max_new_tokens = 200;
    o->gen.sampling = (zoe_sampling){.temperature = 0.8f, .top_k = 0, .top_p = 0.95f};
    o->gen.seed = 1234;
    snprintf(o->backend, sizeof o->backend, "cpu");
}

static void print_help(void) {
    options d;
    defaults(&d);
    printf(
        "usage: mpirun -np TP zoe-generate --checkpoint DIR (--prompt TEXT | --prompt-file F) "
        "[options]\n\nContinues the prompt with the checkpoint's model through a key-value cache "
        "and prints\nthe continuation; a summary line goes to stderr. Options (default in "
        "brackets):\n");
    for (int i = 0; i < NUM_SPECS; i++) {
        const opt_spec *s = &specs[i];
        const char *base = (const char *)&d + s->offset;
        char value[64] = "";
        if (s->kind == OPT_INT) snprintf(value, sizeof value, "%d", *(const int *)base);
        if (s->kind == OPT_FLOAT) snprintf(value, sizeof value, "%g", (double)*(const float *)base);
        if (s->kind == OPT_U64)
            snprintf(value, sizeof value, "%llu", (unsigned long long)*(const uint64_t *)base);
        if (s->kind == OPT_WORD || s->kind == OPT_PATH) snprintf(value, sizeof value, "%s", base);
        if (!strcmp(s->name, "tp")) snprintf(value, sizeof value, "the world size");
        if (!value[0]) snprintf(value, sizeof value, "(none)");
        printf("  --%-16s %s [%s]\n", s->name, s->help, value);
    }
}

/* One value into its field; a message naming the option and the value when it does not fit. */
static int set_value(options *o, const opt_spec *s, const char *v, char *err, size_t cap) {
    char *base = (char *)o + s->offset;
    if (s->kind == OPT_PATH || s->kind == OPT_WORD) {
        size_t size = s->kind == OPT_PATH ? ZOE_PATH_MAX : sizeof o->backend;
        if (strlen(v) >= size) return snprintf(err, cap, "--%s: value too long", s->name), -1;
        snprintf(base, size, "%s", v);
        return 0;
    }
    if (s->kind == OPT_TEXT) return *(const char **)base = v, 0;
    if (s->kind == OPT_U64) {
        uint64_t u = 0;
        if (!zoe_parse_u64(v, &u))
            return snprintf(err, cap, "--%s '%s': not an integer in [0, 2^64 - 1]", s->name, v), -1;
        *(uint64_t *)base = u;
        return 0;
    }
    double x = 0;
    if (!zoe_parse_number(v, &x) || (s->kind == OPT_INT && x != floor(x)))
        return snprintf(err, cap, "--%s %s: not a%s number", s->name, v,
                        s->kind == OPT_INT ? "n integer" : ""),
               -1;
    if (x < s->lo || x > s->hi)
        return snprintf(err, cap, "--%s %s: outside [%g, %g]", s->name, v, s->lo, s->hi), -1;
    if (s->kind == OPT_INT)
        *(int *)base = (int)x;
    else
        *(float *)base = (float)x;
    return 0;
}

static int parse(int argc, char **argv, options *o, char *err, size_t cap) {
    defaults(o);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            o->help = 1;
            return 0;
        }
        const char *arg = argv[i], *v = NULL;
        const opt_spec *s = NULL;
        for (int k = 0; !s && k < NUM_SPECS; k++) {
            char flag[64];
            snprintf(flag, sizeof flag, "--%s", specs[k].name);
            int found = zoe_cli_value(argc, argv, &i, flag, ZOE_CLI_ONCE, &v);
            if (found < 0) return snprintf(err, cap, "%s (see --help)", zoe_last_error()), -1;
            if (found) s = &specs[k];
        }
        if (!s) return snprintf(err, cap, "unknown option '%s' (see --help)", arg), -1;
        if (set_value(o, s, v, err, cap) != 0) return -1;
    }
    if (!o->gen.checkpoint[0]) return snprintf(err, cap, "--checkpoint DIR is required"), -1;
    if (!o->prompt == !o->prompt_file[0])
        return snprintf(err, cap, "give exactly one of --prompt TEXT and --prompt-file FILE"), -1;
    if (o->prompt && !o->prompt[0]) return snprintf(err, cap, "--prompt is empty"), -1;
    if (!strcmp(o->backend, "cpu"))
        o->gen.backend = ZOE_BACKEND_CPU;
    else if (!strcmp(o->backend, "cuda"))
        o->gen.backend = ZOE_BACKEND_CUDA;
    else
        return snprintf(err, cap, "--backend %s: not cpu or cuda", o->backend), -1;
    return 0;
}

/* The prompt file's bytes (NUL-terminated; *len without it). */
static char *read_prompt(const char *path, size_t *len, char *err, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return snprintf(err, cap, "--prompt-file %s: cannot open it", path), NULL;
    size_t size = 0, got;
    char *text = NULL, chunk[65536];
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        char *grown = realloc(text, size + got + 1);
        if (!grown) break;
        text = grown;
        memcpy(text + size, chunk, got);
        size += got;
    }
    fclose(f);
    if (!size) {
        free(text);
        return snprintf(err, cap, "--prompt-file %s: empty or unreadable", path), NULL;
    }
    text[size] = '\0';
    *len = size;
    return text;
}

typedef struct run {
    zoe_tokenizer *tok;
    zoe_generator *gen;
    char *prompt_text;
    int32_t *prompt, *out;
    char *text;
} run;

static void run_free(run *r) {
    zoe_generator_destroy(r->gen);
    zoe_tokenizer_destroy(r->tok);
    free(r->prompt_text), free(r->prompt), free(r->out), free(r->text);
}

/* Every rank judges its input alike (the same options and files everywhere): rank 0 names bad
 * input. A failure after the model was built may be one rank's own (an allocation): every rank
 * that has it says so, naming itself. */
static int finish(run *r, int rank, int code, const char *what) {
    if (code == EXIT_USAGE && rank == 0) fprintf(stderr, "zoe-generate: %s\n", what);
    if (code == EXIT_FAILED) fprintf(stderr, "zoe-generate: rank %d: %s\n", rank, what);
    run_free(r);
    MPI_Finalize();
    return code;
}

/* This process's rank as its launcher numbered it, readable before MPI starts: Open MPI's mpirun,
 * PMIx and PMI launchers (srun among them) say it in the environment; 0 when started alone. */
static int launcher_rank(void) {
    static const char *const names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
                                        "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        char *end = NULL;
        long rank = v ? strtol(v, &end, 10) : 0;
        if (v && end != v && *end == '\0') return (int)rank;
    }
    return 0;
}

int main(int argc, char **argv) {
    /* The command line is judged before MPI starts, so that a bad one is named (exit 2) even
     * where MPI cannot start: a failed MPI_Init ends the process inside Open MPI with exit 1
     * and Open MPI's lines only. Every rank judges alike; the launcher's rank 0 speaks. */
    options o;
    char err[ZOE_PATH_MAX + 256] = "";
    int bad = parse(argc, argv, &o, err, sizeof err) != 0;
    if (bad || o.help) {
        if (bad && launcher_rank() == 0) fprintf(stderr, "zoe-generate: %s\n", err);
        if (!bad && launcher_rank() == 0) print_help();
        return bad ? EXIT_USAGE : 0;
    }
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    run r = {0};
    size_t len = o.prompt ? strlen(o.prompt) : 0;
    if (o.prompt_file[0] && !(r.prompt_text = read_prompt(o.prompt_file, &len, err, sizeof err)))
        return finish(&r, rank, EXIT_USAGE, err);
    const char *prompt = o.prompt ? o.prompt : r.prompt_text;
    if (zoe_generator_create(MPI_COMM_WORLD, &o.gen, &r.gen) != ZOE_OK)
        return finish(&r, rank, EXIT_USAGE, zoe_last_error());
    const zoe_model_config *m = zoe_generator_model(r.gen);
    if (!o.tokenizer[0] && !zoe_generator_byte_tokens(r.gen)) {
        snprintf(err, sizeof err,
                 "%s was not trained on byte tokens (vocabulary %d): give its --tokenizer "
                 "tokenizer.json",
                 o.gen.checkpoint, m->vocab);
        return finish(&r, rank, EXIT_USAGE, err);
    }
    zoe_status st = o.tokenizer[0] ? zoe_tokenizer_load_json(o.tokenizer, NULL, &r.tok)
                                   : zoe_tokenizer_create_bytes(&r.tok);
    if (st != ZOE_OK) return finish(&r, rank, EXIT_USAGE, zoe_last_error());
    if (zoe_tokenizer_vocab_size(r.tok) > m->vocab) {
        snprintf(err, sizeof err,
                 "--tokenizer %s has %d tokens, more than the model's vocabulary %d", o.tokenizer,
                 zoe_tokenizer_vocab_size(r.tok), m->vocab);
        return finish(&r, rank, EXIT_USAGE, err);
    }
    size_t cap = zoe_tokenizer_max_tokens(r.tok, len), n_prompt = 0;
    r.prompt = malloc((cap ? cap : 1) * sizeof *r.prompt);
    r.out = malloc((size_t)o.gen.max_new_tokens * sizeof *r.out);
    if (!r.prompt || !r.out) return finish(&r, rank, EXIT_FAILED, "out of memory");
    if (zoe_tokenizer_encode(r.tok, prompt, len, r.prompt, cap, &n_prompt) != ZOE_OK)
        return finish(&r, rank, EXIT_USAGE, zoe_last_error());
    int64_t n_out = 0;
    double t0 = MPI_Wtime();
    if (zoe_generator_generate(r.gen, r.prompt, (int64_t)n_prompt, zoe_tokenizer_eod(r.tok), r.out,
                               &n_out) != ZOE_OK)
        return finish(&r, rank, EXIT_FAILED, zoe_last_error());
    double seconds = MPI_Wtime() - t0;
    size_t text_cap = (size_t)n_out * 256 + 1, text_len = 0;
    r.text = malloc(text_cap);
    if (!r.text) return finish(&r, rank, EXIT_FAILED, "out of memory");
    if (zoe_tokenizer_decode(r.tok, r.out, (size_t)n_out, r.text, text_cap, &text_len) != ZOE_OK)
        return finish(&r, rank, EXIT_FAILED, zoe_last_error());
    if (rank == 0) {
        fwrite(r.text, 1, text_len, stdout);
        printf("\n");
        fflush(stdout);
        fprintf(stderr,
                "zoe-generate: %lld tokens after a prompt of %zu in %.2f s (%.1f tokens/s), "
                "TP %d, %s\n",
                (long long)n_out, n_prompt, seconds, seconds > 0 ? (double)n_out / seconds : 0.0,
                world, o.gen.sampling.temperature == 0.0f ? "greedy" : "sampled");
    }
    return finish(&r, rank, 0, "");
}
