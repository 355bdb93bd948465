// The plan hash: a fingerprint of what a compiled step does, so two runs (or two ranks)
// can show they ran the same plan.
//
//   std::string hash = PlanHash(compiled.module(), options);     // "9f86d081884c7d65"
//   std::string summary = DescribeCollectives(compiled.graph()); // "8 all-gathers (1.18 MB), ..."
//
// What it covers: the canonical text of the compiled module (magi/ir/printer.h), which
// holds the sharding, every collective with its bucket and the exact shapes, so the
// sizes, of what it moves, the schedule, recompute decisions and the partition graphs;
// and the options that change how that module runs (the primary backend and its
// options, the partition backends, deterministic mode). The cost model, budget and
// search options are left out: what they decided is in the module.
// What it is: 64-bit FNV-1a of that text, as 16 hex digits. It is the same in every
// process and on every machine (unlike absl::Hash, seeded per process). It is a
// fingerprint against accidents, not a cryptographic digest.
#ifndef MAGI_COMPILER_PLAN_HASH_H_
#define MAGI_COMPILER_PLAN_HASH_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "magi/base/fnv1a.h"
#include "magi/compiler/compile_options.h"
#include "magi/ir/module.h"

namespace magi {

// The text PlanHash hashes for `options` (one "key=value" per line, fixed order).
std::string CanonicalRunOptions(const CompileOptions& options);

// 16 lowercase hex digits of Fnv1a64(a version tag + PrintModule(module) + CanonicalRunOptions(options)).
std::string PlanHash(const Module& module, const CompileOptions& options);

// "N all-gathers (X MB), M reduce-scatters (Y MB)": the collectives the graph starts, by
// kind in a fixed order, with the bytes each kind moves in (its inputs), per step.
std::string DescribeCollectives(const Graph& graph);

}  // namespace magi

#endif  // MAGI_COMPILER_PLAN_HASH_H_
