/* The process-wide logger: levels from ZOE_LOG (debug|info|warn|error, default info), lines
 * prefixed with the rank and its (tp, dp) coordinates once a grid exists.
 *
 * Explained in docs/train.md, "Threads". */
#ifndef ZOE_LOG_H
#define ZOE_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum zoe_log_level {
    ZOE_LOG_DEBUG = 0,
    ZOE_LOG_INFO = 1,
    ZOE_LOG_WARN = 2,
    ZOE_LOG_ERROR = 3,
    ZOE_LOG_OFF = 4,
} zoe_log_level;

#if defined(__GNUC__)
#define ZOE_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define ZOE_PRINTF(fmt, args)
#endif

void zoe_log(zoe_log_level level, const char *fmt, ...) ZOE_PRINTF(2, 3);
/* The level in force (read from ZOE_LOG on first use). */
zoe_log_level zoe_log_get_level(void);
void zoe_log_set_level(zoe_log_level level);
/* Sets the prefix "[zoe r<rank> tp<tp> dp<dp>]"; the grid calls it. Negative tp/dp omit them. */
void zoe_log_set_rank(int rank, int tp_rank, int dp_rank);

#ifdef __cplusplus
}
#endif
#endif
