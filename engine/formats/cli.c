/* The command line as every zoe program reads it: numbers as JSON writes them, byte sizes with
 * their units, and "--name VALUE" options given at most once (zoe/cli.h). Below every concept of
 * the engine, so that a tool that reads datasets (zoe-data) needs nothing of the trainer to read
 * its flags.
 *
 * Explained in docs/train.md, "Options". */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "runtime/error.h"
#include "zoe/cli.h"

/* A decimal number as JSON writes one: -?digits[.digits][e[+-]digits]. strtod alone would also
 * take " 5", "+2", "0x3", "inf" and "nan", none of which a user means as a setting. */
static int is_decimal(const char *t) {
    if (*t == '-') t++;
    if (!isdigit((unsigned char)*t)) return 0;
    while (isdigit((unsigned char)*t)) t++;
    if (*t == '.') {
        t++;
        if (!isdigit((unsigned char)*t)) return 0;
        while (isdigit((unsigned char)*t)) t++;
    }
    if (*t == 'e' || *t == 'E') {
        t++;
        if (*t == '+' || *t == '-') t++;
        if (!isdigit((unsigned char)*t)) return 0;
        while (isdigit((unsigned char)*t)) t++;
    }
    return *t == '\0';
}

int zoe_parse_number(const char *text, double *out) {
    if (!text || !is_decimal(text)) return 0;
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (*end || errno || !isfinite(v)) return 0;
    *out = v;
    return 1;
}

int zoe_parse_u64(const char *text, uint64_t *out) {
    if (!text || !*text) return 0;
    int digits = 1;
    for (const char *t = text; *t; t++) digits &= isdigit((unsigned char)*t) != 0;
    if (digits) { /* exact: a seed above 2^53 survives trainer.json, which writes it so */
        char *end;
        errno = 0;
        unsigned long long v = strtoull(text, &end, 10);
        if (*end || errno) return 0; /* ERANGE: above 2^64 - 1 */
        *out = (uint64_t)v;
        return 1;
    }
    /* otherwise a number that is an integer a double holds exactly ("1e3", JSON's 1234.0) */
    double v = 0;
    if (!zoe_parse_number(text, &v) || v != floor(v) || v < 0 || v > 9007199254740992.0) return 0;
    *out = (uint64_t)v;
    return 1;
}

/* The units of a size, as numfmt --from=iec and most tools' memory flags read them: K, M, G
 * and T are binary, like KiB ... TiB; KB ... TB are decimal. */
static const struct {
    const char *name;
    double bytes;
} size_units[] = {
    {"B", 1.0},    {"KiB", 0x1p10}, {"MiB", 0x1p20}, {"GiB", 0x1p30}, {"TiB", 0x1p40},
    {"K", 0x1p10}, {"M", 0x1p20},   {"G", 0x1p30},   {"T", 0x1p40},   {"KB", 1e3},
    {"MB", 1e6},   {"GB", 1e9},     {"TB", 1e12},
};

int zoe_parse_size(const char *text, uint64_t *out) {
    if (!text) return 0;
    if (zoe_parse_u64(text, out)) return 1;
    size_t n = strspn(text, "0123456789.");
    if (n == 0 || n >= 63) return 0;
    char number[64];
    memcpy(number, text, n);
    number[n] = '\0';
    double v = 0;
    if (!zoe_parse_number(number, &v)) return 0;
    for (size_t u = 0; u < sizeof size_units / sizeof size_units[0]; u++) {
        if (strcasecmp(text + n, size_units[u].name) != 0) continue;
        double bytes = v * size_units[u].bytes; /* exact for every whole size below 2^53 */
        if (bytes != floor(bytes) || bytes > 18446744073709549568.0) return 0;
        *out = (uint64_t)bytes;
        return 1;
    }
    return 0;
}

int zoe_cli_once(char **argv, int i, const char *name) {
    size_t n = strlen(name);
    for (int j = 1; j < i; j++)
        if (strncmp(argv[j], name, n) == 0 && (argv[j][n] == '\0' || argv[j][n] == '='))
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "option %s given twice", name), -1;
    return 0;
}

int zoe_cli_value(int argc, char **argv, int *i, const char *name, zoe_cli_repeat repeat,
                  const char **value) {
    const char *arg = argv[*i];
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0 || (arg[n] != '\0' && arg[n] != '=')) return 0;
    if (repeat == ZOE_CLI_ONCE && zoe_cli_once(argv, *i, name) != 0) return -1;
    if (arg[n] == '=') {
        *value = arg + n + 1;
        return 1;
    }
    if (*i + 1 >= argc)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "option %s needs a value", name), -1;
    *value = argv[++*i];
    return 1;
}
