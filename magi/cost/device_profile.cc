#include "magi/cost/device_profile.h"

#include <functional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "magi/base/file.h"
#include "magi/base/numbers.h"
#include "magi/cost/builtin_profiles.h"

namespace magi {

double DeviceProfile::MatmulFlops(DType dtype) const {
  auto it = matmul_flops.find(dtype);
  if (it != matmul_flops.end()) return it->second;
  it = matmul_flops.find(DType::kFloat32);
  return it != matmul_flops.end() ? it->second : vector_flops;
}

absl::StatusOr<DeviceProfile> ParseDeviceProfile(absl::string_view text, absl::string_view source) {
  DeviceProfile profile;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = line.substr(0, line.find('#'));
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    auto error = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(source, ":", line_number, ": ", what));
    };
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos) return error("expected 'key: value'");
    std::string key(absl::StripAsciiWhitespace(line.substr(0, colon)));
    std::string value(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    if (key == "name") {
      profile.name = value;
      continue;
    }
    double number = 0;
    if (!ParseFiniteDouble(value, &number) || number < 0) {
      return error(absl::StrCat("'", key, "' needs a non-negative, finite number, not '", value, "'"));
    }
    if (absl::StartsWith(key, "matmul_flops.")) {
      std::optional<DType> dtype = ParseDType(key.substr(std::string("matmul_flops.").size()));
      if (!dtype) return error(absl::StrCat("unknown dtype in '", key, "'"));
      profile.matmul_flops[*dtype] = number;
      continue;
    }
    const std::map<std::string, std::function<void(double)>> setters = {
        {"vector_flops", [&](double v) { profile.vector_flops = v; }},
        {"memory_bandwidth", [&](double v) { profile.memory_bandwidth = v; }},
        {"op_overhead_s", [&](double v) { profile.op_overhead_s = v; }},
        {"link.intra.latency_s", [&](double v) { profile.intra_node.latency_s = v; }},
        {"link.intra.bandwidth", [&](double v) { profile.intra_node.bandwidth = v; }},
        {"link.inter.latency_s", [&](double v) { profile.inter_node.latency_s = v; }},
        {"link.inter.bandwidth", [&](double v) { profile.inter_node.bandwidth = v; }},
        {"ranks_per_node", [&](double v) { profile.ranks_per_node = static_cast<int64_t>(v); }},
        {"memory_bytes", [&](double v) { profile.memory_bytes = static_cast<int64_t>(v); }},
    };
    auto it = setters.find(key);
    if (it == setters.end()) return error(absl::StrCat("unknown key '", key, "'"));
    it->second(number);
  }
  if (profile.name.empty()) return absl::InvalidArgumentError(absl::StrCat(source, ": no 'name'"));
  for (auto [what, value] : {std::pair<const char*, double>{"vector_flops", profile.vector_flops},
                             {"memory_bandwidth", profile.memory_bandwidth},
                             {"link.intra.bandwidth", profile.intra_node.bandwidth},
                             {"link.inter.bandwidth", profile.inter_node.bandwidth}}) {
    if (value <= 0) return absl::InvalidArgumentError(absl::StrCat(source, ": '", what, "' must be set and positive"));
  }
  if (profile.ranks_per_node < 1) profile.ranks_per_node = 1;
  return profile;
}

std::string PrintDeviceProfile(const DeviceProfile& p) {
  std::string out = absl::StrCat("name: ", p.name, "\n");
  absl::StrAppendFormat(&out, "memory_bytes: %d\n", p.memory_bytes);
  for (const auto& [dtype, flops] : p.matmul_flops) {
    absl::StrAppendFormat(&out, "matmul_flops.%s: %g\n", DTypeName(dtype), flops);
  }
  absl::StrAppendFormat(&out, "vector_flops: %g\nmemory_bandwidth: %g\nop_overhead_s: %g\n", p.vector_flops,
                        p.memory_bandwidth, p.op_overhead_s);
  absl::StrAppendFormat(&out, "link.intra.latency_s: %g\nlink.intra.bandwidth: %g\n", p.intra_node.latency_s,
                        p.intra_node.bandwidth);
  absl::StrAppendFormat(&out, "link.inter.latency_s: %g\nlink.inter.bandwidth: %g\n", p.inter_node.latency_s,
                        p.inter_node.bandwidth);
  absl::StrAppendFormat(&out, "ranks_per_node: %d\n", p.ranks_per_node);
  return out;
}

std::vector<std::string> BuiltinDeviceProfiles() {
  std::vector<std::string> names;
  for (const auto& [name, text] : internal::BuiltinProfileTexts()) names.emplace_back(name);
  return names;
}

absl::StatusOr<DeviceProfile> LoadDeviceProfile(const std::string& name_or_path) {
  if (absl::StrContains(name_or_path, '/') || absl::EndsWith(name_or_path, ".profile")) {
    absl::StatusOr<std::string> text = ReadFile(name_or_path);
    if (!text.ok()) return text.status();
    return ParseDeviceProfile(*text, name_or_path);
  }
  for (const auto& [name, text] : internal::BuiltinProfileTexts()) {
    if (name == name_or_path) return ParseDeviceProfile(text, absl::StrCat("profiles/", name, ".profile"));
  }
  return absl::NotFoundError(absl::StrCat("no device profile '", name_or_path,
                                          "'; built in: ", absl::StrJoin(BuiltinDeviceProfiles(), ", "),
                                          " (or give a path to a .profile file)"));
}

}  // namespace magi
