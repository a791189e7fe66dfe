/* Internal: recording failures. zoe_fail() stores the message for zoe_last_error() and returns
 * the status so a failing path reads `return zoe_fail(ZOE_ERR_..., "tp=%d ...", tp);`. */
#ifndef ZOE_RUNTIME_ERROR_H
#define ZOE_RUNTIME_ERROR_H

#include "zoe/log.h"
#include "zoe/status.h"

zoe_status zoe_fail(zoe_status status, const char *fmt, ...) ZOE_PRINTF(2, 3);
void zoe_clear_error(void);

/* Propagates a failing status from a call whose own message is already recorded. */
#define ZOE_TRY(expr)                                                                              \
    do {                                                                                           \
        zoe_status zoe_try_status_ = (expr);                                                       \
        if (zoe_try_status_ != ZOE_OK) return zoe_try_status_;                                     \
    } while (0)

#endif
