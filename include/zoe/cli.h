/* The command line as every zoe program reads it: numbers as JSON writes them, byte sizes with
 * their units, "--name VALUE" options given at most once. The tools share these so that a
 * value one program refuses is refused by all, with the same line.
 *
 * Explained in docs/train.md, "Bad input". */
#ifndef ZOE_CLI_H
#define ZOE_CLI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Numbers as every zoe program reads them from its command line: a decimal number as JSON writes
 * one (-?digits[.digits][e[+-]digits], finite), so " 5", "+2", "0x10", "inf" and "1e999" are not
 * numbers; and an unsigned 64-bit integer: decimal digits, at most 2^64 - 1 (" -1" is not
 * 2^64 - 1), or such a number that is a whole one up to 2^53 ("1e3"). 1 and *out set when text
 * is one, else 0 and *out untouched. */
int zoe_parse_number(const char *text, double *out);
int zoe_parse_u64(const char *text, uint64_t *out);
/* A size in bytes (--device-memory): what zoe_parse_u64 reads, or a decimal number with a unit,
 * its case ignored: B; KiB, MiB, GiB, TiB or K, M, G, T (powers of 1024); KB, MB, GB, TB (of
 * 1000). "512MiB", "1.5GiB", "30G"; the bytes must come out whole ("0.1KiB" is not a size), and
 * " 5MiB", "5 MiB", "-1M" are not sizes. 1 and *out set when text is one, else 0. */
int zoe_parse_size(const char *text, uint64_t *out);

/* Options as every zoe program reads them from its command line: "--name VALUE" or
 * "--name=VALUE", each option at most once (as the JSON config refuses a repeated key) unless the
 * program collects it (zoe-data's --input). zoe_cli_value: 0 when argv[*i] is not the option
 * `name` ("--seed"); 1 when it is, with *value set and *i moved past a separate VALUE; -1 when its
 * value is missing ("option --seed needs a value") or it came before, with the message in
 * zoe_last_error(). zoe_cli_once: the repeat check alone, for an option without a value
 * (argv[i] is `name`): -1 and "option --json given twice" when an earlier argument is `name`
 * too, alone or with "=VALUE", else 0. An earlier argument that is another option's value and
 * reads as `name` counts as a repeat: such a value is better given as --other=VALUE. */
typedef enum { ZOE_CLI_ONCE, ZOE_CLI_MANY } zoe_cli_repeat;
int zoe_cli_value(int argc, char **argv, int *i, const char *name, zoe_cli_repeat repeat,
                  const char **value);
int zoe_cli_once(char **argv, int i, const char *name);

#ifdef __cplusplus
}
#endif

#endif
