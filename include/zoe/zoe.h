/* zoe: tensor parallelism x ZeRO-Offload training in C. The one header a program includes.
 *
 * Explained in docs/library.md. */
#ifndef ZOE_ZOE_H
#define ZOE_ZOE_H

#include "zoe/status.h"
#include "zoe/log.h"
#include "zoe/dtype.h"
#include "zoe/device.h"
#include "zoe/gpu.h"
#include "zoe/comm.h"
#include "zoe/grid.h"
#include "zoe/topology.h"
#include "zoe/optimizer.h"
#include "zoe/adam.h"
#include "zoe/cli.h"
#include "zoe/data.h"
#include "zoe/model.h"
#include "zoe/train.h"
#include "zoe/plan.h"
#include "zoe/checkpoint.h"
#include "zoe/generate.h"

#define ZOE_VERSION_MAJOR 0
#define ZOE_VERSION_MINOR 1
#define ZOE_VERSION_PATCH 0

#endif
