/* The process-wide logger: the level from ZOE_LOG, each line tagged with the rank and its (tp,
 * dp), written whole under a lock so threads never interleave.
 *
 * Explained in docs/train.md, "Threads" (ZOE_LOG). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "zoe/log.h"

/* The one process-wide global of the library: the logger's level and prefix. */
static struct {
    pthread_once_t initialised; /* ZOE_LOG is read once, whichever thread logs first */
    zoe_log_level level;
    char prefix[64];
} logger = {PTHREAD_ONCE_INIT, ZOE_LOG_INFO, "[zoe]"};

static void read_level(void) {
    const char *env = getenv("ZOE_LOG");
    if (!env || !*env) return;
    static const char *names[] = {"debug", "info", "warn", "error", "off"};
    for (int i = 0; i < 5; i++)
        if (strcasecmp(env, names[i]) == 0) {
            logger.level = (zoe_log_level)i;
            return;
        }
    if (strcasecmp(env, "warning") == 0) {
        logger.level = ZOE_LOG_WARN;
        return;
    }
    /* Once per process: this runs once. */
    fprintf(stderr,
            "%s warn: ZOE_LOG='%s' is not debug, info, warn, error or off; logging at info\n",
            logger.prefix, env);
}

static void logger_init(void) {
    pthread_once(&logger.initialised, read_level);
}

zoe_log_level zoe_log_get_level(void) {
    logger_init();
    return logger.level;
}

void zoe_log_set_level(zoe_log_level level) {
    logger_init();
    logger.level = level;
}

void zoe_log_set_rank(int rank, int tp_rank, int dp_rank) {
    if (tp_rank < 0 || dp_rank < 0)
        snprintf(logger.prefix, sizeof logger.prefix, "[zoe r%d]", rank);
    else
        snprintf(logger.prefix, sizeof logger.prefix, "[zoe r%d tp%d dp%d]", rank, tp_rank,
                 dp_rank);
}

void zoe_log(zoe_log_level level, const char *fmt, ...) {
    logger_init();
    if (level < logger.level || level >= ZOE_LOG_OFF) return;
    static const char *tags[] = {"debug", "info", "warn", "error"};
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* One fprintf per line keeps lines of concurrent ranks from interleaving mid-line. */
    fprintf(stderr, "%s %s: %s\n", logger.prefix, tags[level], msg);
}
