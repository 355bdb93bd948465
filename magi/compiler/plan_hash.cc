#include "magi/compiler/plan_hash.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "magi/ir/collectives.h"
#include "magi/ir/printer.h"

namespace magi {
namespace {

// Bumped when the hashed text changes meaning, so old and new hashes never compare equal.
constexpr absl::string_view kPlanHashVersion = "magi-plan-v1\n";

std::string KindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather:
      return "all-gather";
    case CollectiveKind::kReduceScatter:
      return "reduce-scatter";
    case CollectiveKind::kAllReduce:
      return "all-reduce";
    case CollectiveKind::kAllToAll:
      return "all-to-all";
  }
  return "collective";
}

}  // namespace

std::string CanonicalRunOptions(const CompileOptions& options) {
  std::string text = absl::StrCat("backend=", options.backend, "\n");
  for (const auto& [key, value] : options.backend_options) absl::StrAppend(&text, "backend_option.", key, "=", value, "\n");
  absl::StrAppend(&text, "partition_backends=", absl::StrJoin(options.partitioning.backends, ","), "\n");
  absl::StrAppend(&text, "partition_nodes=", options.partitioning.min_nodes, ":", options.partitioning.max_nodes, "\n");
  absl::StrAppend(&text, "deterministic=", options.deterministic ? 1 : 0, "\n");
  absl::StrAppend(&text, "batch_invariant_sequences=", options.batch_invariant_sequences, "\n");
  return text;
}

std::string PlanHash(const Module& module, const CompileOptions& options) {
  std::string text = absl::StrCat(kPlanHashVersion, PrintModule(module), "\n", CanonicalRunOptions(options));
  return Fnv1a64Hex(text);
}

std::string DescribeCollectives(const Graph& graph) {
  std::map<CollectiveKind, std::pair<int, int64_t>> by_kind;  // count, bytes
  for (const Node* node : graph.nodes()) {
    std::optional<CollectiveKind> kind = GetCollectiveKind(node->op());
    if (!kind) continue;
    auto& [count, bytes] = by_kind[*kind];
    ++count;
    for (const Value* operand : node->operands()) {
      if (operand->type().is_tensor()) bytes += operand->type().tensor().SizeInBytes().value_or(0);
    }
  }
  if (by_kind.empty()) return "no collectives";
  std::vector<std::string> parts;
  for (const auto& [kind, entry] : by_kind) {
    parts.push_back(absl::StrFormat("%d %s%s (%.3f MB)", entry.first, KindName(kind), entry.first == 1 ? "" : "s",
                                    entry.second / 1e6));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace magi
