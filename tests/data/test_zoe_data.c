/* zoe-data end to end, run as a program: the demo corpus converts and reads back as exactly its
 * text (documents joined by the blank lines between them); random UTF-8 lines from two files
 * convert to int32 and decode line by line; --inspect prints the counts; every bad input exits
 * 2 with one stderr line naming the value and leaves the output directory as it was.
 * Arguments: the zoe-data binary and data/demo-corpus.txt. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "data_util.h"
#include "zoe/data.h"

extern char **environ;

static const char *zoe_data, *corpus;
static char logs[256], out[256];

typedef struct run_result {
    int code;
    char *out, *err;
} run_result;

static run_result run(const char *const *args) {
    char *argv[32];
    int n = 0;
    argv[n++] = (char *)zoe_data;
    for (; args[n - 1]; n++) argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    char out_path[512], err_path[512];
    snprintf(out_path, sizeof out_path, "%s/stdout", logs);
    snprintf(err_path, sizeof err_path, "%s/stderr", logs);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    run_result r = {.code = -1};
    if (posix_spawn(&pid, zoe_data, &fa, NULL, argv, environ) == 0) {
        int status;
        waitpid(pid, &status, 0);
        r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    posix_spawn_file_actions_destroy(&fa);
    r.out = read_file(out_path, NULL);
    r.err = read_file(err_path, NULL);
    if (!r.out) r.out = calloc(1, 1);
    if (!r.err) r.err = calloc(1, 1);
    return r;
}

static void done(run_result *r) {
    free(r->out);
    free(r->err);
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* A failing run: exit 2, stdout empty, one stderr line naming `value`, out/ unchanged. */
static void expect_bad(const char *what, const char *const *args, const char *value,
                       int entries_before) {
    run_result r = run(args);
    char list[256];
    int entries = dir_entries(out, list, sizeof list);
    CHECK(r.code == 2, "%s: exit %d, want 2 (stderr '%s')", what, r.code, r.err);
    CHECK(count_lines(r.err) == 1 && strstr(r.err, value) && strncmp(r.err, "zoe-data: ", 10) == 0,
          "%s: stderr should be one 'zoe-data: ' line naming '%s': '%s'", what, value, r.err);
    CHECK(r.out[0] == '\0', "%s: stdout not empty: '%s'", what, r.out);
    CHECK(entries == entries_before, "%s: out/ holds %d entries, want %d: %s", what, entries,
          entries_before, list);
    done(&r);
}

static int64_t token_count_in(const char *s, const char *label) {
    const char *p = strstr(s, label);
    return p ? strtoll(p + strlen(label), NULL, 10) : -1;
}

/* The corpus's paragraphs are separated by exactly one blank line and it ends with one, so
 * decoding each document and appending "\n\n" must rebuild the file byte for byte. */
static void demo_corpus_round_trip(void) {
    char prefix[512];
    snprintf(prefix, sizeof prefix, "%s/demo", out);
    run_result r = run((const char *const[]){"--input", corpus, "--output-prefix", prefix, NULL});
    CHECK(r.code == 0 && r.err[0] == '\0', "convert demo corpus: exit %d '%s'", r.code, r.err);
    size_t len;
    char *text = read_file(corpus, &len);
    zoe_dataset *ds;
    zoe_tokenizer *tok;
    CHECK_OK(zoe_tokenizer_create_bytes(&tok));
    if (text && CHECK_OK(zoe_dataset_open_indexed(prefix, &ds))) {
        int64_t docs = zoe_dataset_documents(ds), tokens = zoe_dataset_tokens(ds);
        CHECK(token_count_in(r.out, "idx: ") == docs && strstr(r.out, "tokens") &&
                  token_count_in(r.out, "documents, ") == tokens,
              "stdout names %lld documents and %lld tokens: '%s'", (long long)docs,
              (long long)tokens, r.out);
        int32_t *t = malloc((size_t)tokens * sizeof *t);
        char *rebuilt = malloc((size_t)tokens + 2 * (size_t)docs + 1);
        size_t used = 0, n;
        CHECK_OK(zoe_dataset_read(ds, 0, tokens, t));
        for (int64_t d = 0; d < docs; d++) {
            int64_t off, dl;
            CHECK_OK(zoe_dataset_document(ds, d, &off, &dl));
            CHECK(t[off + dl - 1] == ZOE_BYTE_EOD, "document %lld ends in EOD", (long long)d);
            CHECK_OK(
                zoe_tokenizer_decode(tok, t + off, (size_t)dl, rebuilt + used, (size_t)dl, &n));
            used += n;
            memcpy(rebuilt + used, "\n\n", 2), used += 2;
        }
        CHECK(used == len && memcmp(rebuilt, text, len) == 0,
              "decoded documents rebuild the corpus (%zu of %zu bytes)", used, len);
        zoe_dataset *txt;
        if (CHECK_OK(zoe_dataset_open_text(corpus, ZOE_SPLIT_BLANK_LINE, &txt))) {
            int32_t *u = malloc((size_t)tokens * sizeof *u);
            CHECK(zoe_dataset_tokens(txt) == tokens, "text and indexed token counts agree");
            if (zoe_dataset_tokens(txt) == tokens) {
                CHECK_OK(zoe_dataset_read(txt, 0, tokens, u));
                CHECK(memcmp(t, u, (size_t)tokens * sizeof *t) == 0,
                      "open_text and zoe-data give the same token stream");
            }
            free(u);
            zoe_dataset_destroy(txt);
        }
        free(t);
        free(rebuilt);
        zoe_dataset_destroy(ds);
    }
    done(&r);

    r = run((const char *const[]){"--inspect", prefix, NULL});
    CHECK(r.code == 0 && strstr(r.out, "documents:") && strstr(r.out, "uint16") &&
              strstr(r.out, "byte-level: yes"),
          "--inspect: exit %d '%s'", r.code, r.out);
    done(&r);
    zoe_tokenizer_destroy(tok);
    free(text);
}

/* Two files of random UTF-8 lines, --split-docs line --dtype int32: document i is line i. */
static void random_lines_round_trip(test_rng *rng) {
    enum { FILES = 2, LINES = 50, MAXLEN = 120 };
    char lines[FILES * LINES][MAXLEN + 1], path[FILES][512], prefix[512];
    for (int f = 0; f < FILES; f++) {
        snprintf(path[f], sizeof path[f], "%s/lines%d.txt", logs, f);
        char *buf = malloc(LINES * (MAXLEN + 1));
        size_t used = 0;
        for (int i = 0; i < LINES; i++) {
            char *l = lines[f * LINES + i];
            size_t n = (size_t)test_rng_int(rng, 1, MAXLEN);
            random_utf8(rng, l, n);
            for (size_t k = 0; k < n; k++)
                if ((unsigned char)l[k] < 0x20) l[k] = 'c'; /* no newlines or blank lines */
            l[0] = 'L', l[n] = '\0';
            memcpy(buf + used, l, n), used += n;
            buf[used++] = '\n';
        }
        write_file(path[f], buf, used);
        free(buf);
    }
    snprintf(prefix, sizeof prefix, "%s/lines", out);
    run_result r =
        run((const char *const[]){"--input", path[0], "--input", path[1], "--split-docs", "line",
                                  "--dtype", "int32", "--output-prefix", prefix, NULL});
    CHECK(r.code == 0, "convert lines: exit %d '%s'", r.code, r.err);
    done(&r);
    zoe_dataset *ds;
    zoe_tokenizer *tok;
    CHECK_OK(zoe_tokenizer_create_bytes(&tok));
    if (CHECK_OK(zoe_dataset_open_indexed(prefix, &ds))) {
        CHECK(zoe_dataset_dtype(ds) == ZOE_TOKENS_INT32 &&
                  zoe_dataset_documents(ds) == FILES * LINES,
              "int32 with %d documents: %lld", FILES * LINES, (long long)zoe_dataset_documents(ds));
        for (int64_t d = 0; d < zoe_dataset_documents(ds) && d < FILES * LINES; d++) {
            int64_t off, dl;
            int32_t t[MAXLEN + 1];
            char text[MAXLEN + 1];
            size_t n = 0;
            CHECK_OK(zoe_dataset_document(ds, d, &off, &dl));
            if (dl > MAXLEN + 1) dl = MAXLEN + 1;
            CHECK_OK(zoe_dataset_read(ds, off, dl, t));
            CHECK_OK(zoe_tokenizer_decode(tok, t, (size_t)dl, text, sizeof text, &n));
            CHECK(n == strlen(lines[d]) && memcmp(text, lines[d], n) == 0,
                  "document %lld decodes to line %lld", (long long)d, (long long)d);
        }
        zoe_dataset_destroy(ds);
    }
    zoe_tokenizer_destroy(tok);
}

static void bad_inputs(void) {
    char prefix[512], missing[512], empty[512];
    snprintf(prefix, sizeof prefix, "%s/bad", out);
    snprintf(missing, sizeof missing, "%s/missing.txt", logs);
    snprintf(empty, sizeof empty, "%s/empty.txt", logs);
    write_file(empty, " \n\n", 3);
    int before = dir_entries(out, NULL, 0);
    expect_bad("unknown option", (const char *const[]){"--bogus", NULL}, "'--bogus'", before);
    expect_bad("missing input",
               (const char *const[]){"--input", missing, "--output-prefix", prefix, NULL}, missing,
               before);
    expect_bad("missing second input",
               (const char *const[]){"--input", corpus, "--input", missing, "--output-prefix",
                                     prefix, NULL},
               missing, before);
    expect_bad("bad dtype",
               (const char *const[]){"--input", corpus, "--output-prefix", prefix, "--dtype",
                                     "int8", NULL},
               "'int8'", before);
    expect_bad("bad split",
               (const char *const[]){"--input", corpus, "--output-prefix", prefix,
                                     "--split-docs=para", NULL},
               "'para'", before);
    expect_bad("missing value", (const char *const[]){"--input", corpus, "--output-prefix", NULL},
               "option --output-prefix needs a value", before);
    expect_bad("input is a directory",
               (const char *const[]){"--input", logs, "--output-prefix", prefix, NULL}, logs,
               before);
    expect_bad("only blank input",
               (const char *const[]){"--input", empty, "--output-prefix", prefix, NULL}, empty,
               before);
    char unwritable[512];
    snprintf(unwritable, sizeof unwritable, "%s/no-such-dir/x", out);
    expect_bad("unwritable output",
               (const char *const[]){"--input", corpus, "--output-prefix", unwritable, NULL},
               "no-such-dir", before);
    expect_bad("inspect missing", (const char *const[]){"--inspect", missing, NULL}, missing,
               before);

    /* A failed run over an existing dataset leaves the old files intact. */
    char demo[512], idx_path[600];
    snprintf(demo, sizeof demo, "%s/demo", out);
    snprintf(idx_path, sizeof idx_path, "%s.idx", demo);
    size_t len_before, len_after;
    char *idx_before = read_file(idx_path, &len_before);
    expect_bad(
        "failed overwrite",
        (const char *const[]){"--input", corpus, "--input", logs, "--output-prefix", demo, NULL},
        logs, before);
    char *idx_after = read_file(idx_path, &len_after);
    CHECK(idx_before && idx_after && len_before == len_after &&
              memcmp(idx_before, idx_after, len_before) == 0,
          "failed overwrite kept the old %s", idx_path);
    free(idx_before);
    free(idx_after);

    /* Output prefixes that cannot be one: empty, a directory, the input itself. */
    expect_bad("empty prefix",
               (const char *const[]){"--input", corpus, "--output-prefix", "", NULL},
               "--output-prefix is empty", before);
    expect_bad("directory prefix",
               (const char *const[]){"--input", corpus, "--output-prefix", out, NULL},
               "is a directory", before);
    char slash[600];
    snprintf(slash, sizeof slash, "%s/", out);
    expect_bad("prefix ending in /",
               (const char *const[]){"--input", corpus, "--output-prefix", slash, NULL},
               "is a directory", before);
    char demo_bin[600];
    snprintf(demo_bin, sizeof demo_bin, "%s.bin", demo);
    expect_bad("output is the input",
               (const char *const[]){"--input", demo_bin, "--output-prefix", demo, NULL},
               "is also an output", before);

    run_result r = run((const char *const[]){"--help", NULL});
    CHECK(r.code == 0 && strstr(r.out, "usage: zoe-data"), "--help: exit %d", r.code);
    done(&r);
}

static int count_temporaries(const char *dir) {
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) n += strstr(e->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

/* SIGINT or SIGTERM in the middle of a conversion: no temporary file stays behind. And the
 * temporaries of a killed run (a PID that is gone) are removed by the next conversion to the
 * same prefix, while a live PID's stay. */
static void signals_and_stale_files(void) {
    char big[512], prefix[512];
    snprintf(big, sizeof big, "%s/big.txt", logs);
    snprintf(prefix, sizeof prefix, "%s/big", out);
    FILE *f = fopen(big, "w");
    char line[101];
    memset(line, 'z', 100), line[100] = '\n';
    for (int i = 0; i < 600000; i++) fwrite(line, 1, sizeof line, f); /* 60 MB: about a second */
    fclose(f);
    int sigs[2] = {SIGINT, SIGTERM};
    for (int k = 0; k < 2; k++) {
        char *argv[] = {(char *)zoe_data, "--input", big, "--output-prefix", prefix, NULL};
        pid_t pid;
        if (posix_spawn(&pid, zoe_data, NULL, NULL, argv, environ) != 0) continue;
        int seen = 0;
        for (int i = 0; i < 20000 && !seen; i++) { /* up to 20 s for the temporaries to appear */
            seen = count_temporaries(out) > 0;
            if (!seen) nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
        }
        kill(pid, sigs[k]);
        int status;
        waitpid(pid, &status, 0);
        CHECK(seen && WIFSIGNALED(status) && WTERMSIG(status) == sigs[k],
              "signal %d: conversion seen %d, status %d", sigs[k], seen, status);
        CHECK(count_temporaries(out) == 0, "signal %d left %d temporary files", sigs[k],
              count_temporaries(out));
    }
    unlink(big);
    char stale[600], live[600];
    snprintf(stale, sizeof stale, "%s/small.bin.tmp.%d", out, 999999999);
    snprintf(live, sizeof live, "%s/small.idx.tmp.%ld", out, (long)getpid());
    write_file(stale, "x", 1);
    write_file(live, "x", 1);
    snprintf(prefix, sizeof prefix, "%s/small", out);
    run_result r = run((const char *const[]){"--input", corpus, "--output-prefix", prefix, NULL});
    CHECK(r.code == 0, "conversion next to stale files: exit %d: %s", r.code, r.err);
    CHECK(access(stale, F_OK) != 0, "a dead run's temporary stayed: %s", stale);
    CHECK(access(live, F_OK) == 0, "a live run's temporary was removed: %s", live);
    done(&r);
    unlink(live);
    char path[600];
    snprintf(path, sizeof path, "%s.bin", prefix), unlink(path);
    snprintf(path, sizeof path, "%s.idx", prefix), unlink(path);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    if (argc < 3) {
        fprintf(stderr, "usage: test_zoe_data ZOE_DATA_BINARY DEMO_CORPUS\n");
        return 2;
    }
    zoe_data = argv[1], corpus = argv[2];
    tmpdir_create(logs);
    tmpdir_create(out);
    test_rng rng;
    test_rng_seed(&rng, 77);
    demo_corpus_round_trip();
    random_lines_round_trip(&rng);
    bad_inputs();
    signals_and_stale_files();
    tmpdir_remove(out);
    tmpdir_remove(logs);
    return test_finish("test_zoe_data");
}
