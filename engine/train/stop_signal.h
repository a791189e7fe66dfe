/* Internal to engine/train: the stop flag as this process holds it, without the collective
 * agreement of zoe_stop_requested (zoe/checkpoint.h). The stall watchdog's thread reads it to
 * end a rank that got a stop signal but cannot reach a step boundary (--stop-grace).
 *
 * Explained in docs/multi-node.md, "Signals". */
#ifndef ZOE_ENGINE_STOP_SIGNAL_H
#define ZOE_ENGINE_STOP_SIGNAL_H

#include "zoe/checkpoint.h"

/* The first stop signal this process got (0: none); async-signal-safe and thread-safe. */
int zoe_stop_signal_pending(void);

#endif
