// What the cost model knows about a device and its links, as data.
//
// A profile is a text file of `key: value` lines (`#` starts a comment); the built-in
// ones live in magi/cost/profiles/*.profile and are compiled in:
//
//   name: h200
//   matmul_flops.bf16: 8.0e14       # dense matmul rate per dtype (FLOP/s)
//   vector_flops: 6.0e13            # elementwise / reduction rate
//   memory_bandwidth: 4.3e12        # bytes/s
//   op_overhead_s: 4.0e-6           # fixed cost per kernel
//   link.intra.latency_s: 8.0e-6    # alpha of one collective step inside a node
//   link.intra.bandwidth: 3.6e11    # beta^-1: bytes/s per rank inside a node
//   link.inter.latency_s / link.inter.bandwidth   # across nodes
//   ranks_per_node: 8
//   memory_bytes: 150323855360
//
// Unknown keys and malformed values are errors naming the line.
#ifndef MAGI_COST_DEVICE_PROFILE_H_
#define MAGI_COST_DEVICE_PROFILE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "magi/ir/types.h"

namespace magi {

struct LinkProfile {
  double latency_s = 0;  // per collective step (alpha)
  double bandwidth = 0;  // bytes per second per rank (1 / beta)
};

struct DeviceProfile {
  std::string name;
  std::map<DType, double> matmul_flops;  // dtype -> FLOP/s; dtypes not listed use the f32 rate
  double vector_flops = 0;
  double memory_bandwidth = 0;
  double op_overhead_s = 0;
  LinkProfile intra_node;
  LinkProfile inter_node;
  int64_t ranks_per_node = 1;
  int64_t memory_bytes = 0;

  double MatmulFlops(DType dtype) const;
  // The link a group of `group_size` ranks is limited by.
  const LinkProfile& LinkFor(int64_t group_size) const {
    return group_size <= ranks_per_node ? intra_node : inter_node;
  }
};

absl::StatusOr<DeviceProfile> ParseDeviceProfile(absl::string_view text, absl::string_view source = "profile");
std::string PrintDeviceProfile(const DeviceProfile& profile);

// Names of the compiled-in profiles ("cpu", "h200").
std::vector<std::string> BuiltinDeviceProfiles();
// A compiled-in profile by name, or a profile file by path (anything with a '/' or
// ending in ".profile"). NotFound lists the built-in names.
absl::StatusOr<DeviceProfile> LoadDeviceProfile(const std::string& name_or_path);

}  // namespace magi

#endif  // MAGI_COST_DEVICE_PROFILE_H_
