/* The configuration's strictness: duplicate keys (micro-batch and micro_batch are one key), text
 * after the JSON object, a directory as --config, numbers that strtod would take but a user
 * does not mean (0x3, +2, " 5", inf), JSON values of the wrong type, and structs of another
 * version. Each case must fail with a message naming the problem. Also zoe-train's rows of
 * test_cli_rules.sh, through the parser zoe-train calls (each mpiexec start costs a second or
 * two; the script keeps two zoe-train rows for the program's own exit 2).
 * Usage: test_config_strict CORPUS DEMO_CONFIG */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "testing.h"
#include "zoe/train.h"

static zoe_status parse_argv(int argc, char **argv) {
    zoe_train_config c;
    zoe_train_config_defaults(&c);
    int help, list;
    return zoe_train_config_parse_args(&c, argc, argv, &help, &list);
}

static void expect_flag_error(const char *name, const char *value, const char *fragment) {
    char *argv[] = {"zoe-train", (char *)name, (char *)value};
    zoe_status st = parse_argv(3, argv);
    CHECK(st == ZOE_ERR_INVALID_ARGUMENT, "%s '%s' should fail (status %d)", name, value, (int)st);
    CHECK(strstr(zoe_last_error(), fragment) != NULL, "%s '%s': message '%s' lacks '%s'", name,
          value, zoe_last_error(), fragment);
}

/* zoe-train --data CORPUS followed by the row's arguments is refused (zoe-train exits 2 on any
 * parse error) with a message of one line, zoe-train's line on stderr, that contains want. */
static void expect_train_args_error(const char *corpus, const char *want, int n, char **row) {
    enum { ROW_MAX = 4 };
    char *argv[3 + ROW_MAX] = {"zoe-train", "--data", (char *)corpus};
    if (n > ROW_MAX) {
        CHECK(0, "a row of %d arguments: ROW_MAX is %d", n, ROW_MAX);
        return;
    }
    for (int i = 0; i < n; i++) argv[3 + i] = row[i];
    zoe_status st = parse_argv(3 + n, argv);
    const char *msg = zoe_last_error();
    CHECK(st != ZOE_OK, "zoe-train %s ... should be refused", row[0]);
    CHECK(strstr(msg, want) != NULL && strchr(msg, '\n') == NULL,
          "zoe-train %s ...: message '%s' is not one line containing '%s'", row[0], msg, want);
}

/* The zoe-train rows of tests/engine/test_cli_rules.sh: numbers by one rule, each option once,
 * an option without its value named. */
static void cli_rules_rows(const char *corpus, const char *demo_config) {
    const char *numbers[] = {" 2", "+2", "0x2", "0x1p1", "2e0x", "1e999", "nan", "-1"};
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++)
        expect_train_args_error(corpus, numbers[i], 2,
                                (char *[]){"--micro-batch", (char *)numbers[i]});
    const char *seeds[] = {" -1", "-1", "18446744073709551616", "0x10", "1.5", "+5", " 0.5"};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++)
        expect_train_args_error(corpus, seeds[i], 2, (char *[]){"--seed", (char *)seeds[i]});
    expect_train_args_error(corpus, "option --lr given twice", 3,
                            (char *[]){"--lr", "1e-3", "--lr=2e-3"});
    expect_train_args_error(corpus, "option --recompute given twice", 2,
                            (char *[]){"--recompute", "--recompute=false"});
    expect_train_args_error(corpus, "option --data given twice", 2,
                            (char *[]){"--data", (char *)corpus});
    expect_train_args_error(
        corpus, "option --config given twice", 4,
        (char *[]){"--config", (char *)demo_config, "--config", (char *)demo_config});
    expect_train_args_error(corpus, "option --lr needs a value", 1, (char *[]){"--lr"});
}

static void expect_json_error(const char *path, const char *json, const char *fragment) {
    FILE *f = fopen(path, "w");
    fputs(json, f);
    fclose(f);
    zoe_train_config c;
    zoe_train_config_defaults(&c);
    zoe_status st = zoe_train_config_load_json(&c, path);
    CHECK(st != ZOE_OK, "config %s should fail", json);
    CHECK(strstr(zoe_last_error(), fragment) != NULL, "config %s: message '%s' lacks '%s'", json,
          zoe_last_error(), fragment);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    if (argc < 3) {
        fprintf(stderr, "usage: test_config_strict CORPUS DEMO_CONFIG\n");
        return 2;
    }
    cli_rules_rows(argv[1], argv[2]);
    char dir[] = "/tmp/zoe_cfg_strict_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char json[256];
    snprintf(json, sizeof json, "%s/run.json", dir);

    /* numbers: decimal only, as JSON writes them */
    expect_flag_error("--tp", "0x3", "'0x3' is not a number");
    expect_flag_error("--tp", "+2", "'+2' is not a number");
    expect_flag_error("--tp", " 5", "' 5' is not a number");
    expect_flag_error("--tp", "5 ", "'5 ' is not a number");
    expect_flag_error("--lr", "inf", "'inf' is not a number");
    expect_flag_error("--lr", "nan", "'nan' is not a number");
    expect_flag_error("--lr", ".5", "'.5' is not a number");
    expect_flag_error("--lr", "1e", "'1e' is not a number");
    char *ok_argv[] = {"zoe-train", "--lr", "2.5e-4", "--warmup", "3", "--min-lr", "-0"};
    CHECK_OK(parse_argv(7, ok_argv));

    /* JSON */
    expect_json_error(json, "{\"tp\": 1, \"tp\": 2}", "key \"tp\" is given twice");
    expect_json_error(json, "{\"micro-batch\": 2, \"micro_batch\": 3}",
                      "key \"micro_batch\" is given twice (also as \"micro-batch\")");
    expect_json_error(json, "{\"tp\": 1} {\"tp\": 2}", "text after the JSON object at byte 10");
    expect_json_error(json, "{\"tp\": 1} x", "text after the JSON object");
    expect_json_error(json, "{\"tp\": 1,", "is not valid JSON");
    expect_json_error(json, "[1, 2]", "is not a JSON object");
    expect_json_error(json, "{\"tp\": \" 5\"}", "key \"tp\" needs a number");
    expect_json_error(json, "{\"tp\": \"2\"}", "key \"tp\" needs a number");
    expect_json_error(json, "{\"recompute\": 1}", "key \"recompute\" needs true or false");
    expect_json_error(json, "{\"dtype\": 16}", "key \"dtype\" needs a string");
    expect_json_error(json, "{\"tp\": 0}", "--tp=0 is out of range");
    /* a directory: refused before anything is allocated for it (once malloc(2^63)) */
    zoe_train_config c;
    zoe_train_config_defaults(&c);
    CHECK(zoe_train_config_load_json(&c, dir) == ZOE_ERR_IO, "a directory as config");
    CHECK(strstr(zoe_last_error(), "is a directory, not a JSON file") != NULL, "message '%s'",
          zoe_last_error());
    CHECK(zoe_train_config_load_json(&c, "/dev/null") == ZOE_ERR_IO, "/dev/null as config");
    char *dir_argv[] = {"zoe-train", "--config", dir};
    CHECK(parse_argv(3, dir_argv) == ZOE_ERR_IO, "--config DIR");
    /* the JSON that is right still loads */
    FILE *f = fopen(json, "w");
    fputs(" {\"micro_batch\": 3, \"lr\": 1e-3, \"recompute\": true, \"dtype\": \"bf16\"}\n", f);
    fclose(f);
    CHECK_OK(zoe_train_config_load_json(&c, json));
    CHECK(c.micro_batch == 3 && c.recompute == 1 && c.dtype == ZOE_BF16, "good JSON applied");

    /* versioned structs */
    zoe_train_config hand = ZOE_TRAIN_CONFIG_INITIALIZER;
    CHECK(hand.struct_size == sizeof hand && hand.api_version == ZOE_API_VERSION, "initializer");
    CHECK(zoe_train_config_validate(&hand, 1) == ZOE_ERR_INVALID_ARGUMENT, "all-zero struct");
    CHECK(strstr(zoe_last_error(), "--layers=0 is out of range") != NULL, "zero struct: '%s'",
          zoe_last_error());
    zoe_train_config_defaults(&c);
    CHECK_OK(zoe_train_config_validate(&c, 1));
    c.struct_size -= 8; /* a caller built against an older, shorter struct */
    CHECK(zoe_train_config_validate(&c, 1) == ZOE_ERR_INVALID_ARGUMENT, "old struct size");
    CHECK(strstr(zoe_last_error(), "struct_size") != NULL, "'%s'", zoe_last_error());
    zoe_train_config_defaults(&c);
    c.api_version = ZOE_API_VERSION + 1;
    CHECK(zoe_train_config_validate(&c, 1) == ZOE_ERR_INVALID_ARGUMENT, "other API version");
    CHECK(zoe_train_config_defaults_for(&c, sizeof c - 4, ZOE_API_VERSION) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "defaults for a struct of another size");
    zoe_optimizer_config oc = ZOE_OPTIMIZER_CONFIG_INITIALIZER;
    CHECK(oc.struct_size == sizeof oc && oc.api_version == ZOE_API_VERSION, "optimizer init");
    CHECK_OK(zoe_optimizer_config_default(&oc));
    CHECK(oc.beta1 > 0.89f && oc.beta1 < 0.91f && oc.struct_size == sizeof oc,
          "optimizer defaults");

    unlink(json), rmdir(dir);
    return test_finish("test_config_strict");
}
