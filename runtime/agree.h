/* Internal: a failure on some ranks made every rank's, before a collective that the failing ones
 * would not reach (a checkpoint's rounds, the weight stream's gather after its drive reads).
 *
 * Explained in docs/architecture.md, "Where errors go". */
#ifndef ZOE_RUNTIME_AGREE_H
#define ZOE_RUNTIME_AGREE_H

#include <mpi.h>
#include "zoe/status.h"

/* Collective over comm: every rank learns whether any failed, with the status and message of the
 * lowest failing rank (a rank that only stops because another failed says nothing useful). */
zoe_status zoe_agree(MPI_Comm comm, zoe_status st);

#endif
