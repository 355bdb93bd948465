// Magi's FSDP2-style front end, in one include: FullyShard/DeviceMesh (fully_shard.h),
// FsdpTrainer (trainer.h), FsdpInference (inference.h). Each compiles ONE graph for the
// whole step of the rank through magi/compiler: all-gathers, forward, loss, backward,
// reduce-scatters and AdamW on the local shards, collectives of every group in the one
// graph (no per-layer graph breaks), so passes can move them across layers.
#ifndef MAGI_FRONTEND_FSDP_FSDP_H_
#define MAGI_FRONTEND_FSDP_FSDP_H_

#include "magi/frontend/fsdp/fully_shard.h"
#include "magi/frontend/fsdp/inference.h"
#include "magi/frontend/fsdp/materialize.h"
#include "magi/frontend/fsdp/mesh_communicators.h"
#include "magi/frontend/fsdp/trainer.h"

#endif  // MAGI_FRONTEND_FSDP_FSDP_H_
