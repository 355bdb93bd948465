// Converts IR modules to and from their protobuf form (ir.proto), binary or JSON.
//
//   magi::proto::ModuleProto proto = ModuleToProto(module);
//   absl::StatusOr<std::unique_ptr<Module>> back = ModuleFromProto(proto);
//   absl::StatusOr<std::string> json = ModuleToJson(module);
//
// Loading checks everything a malformed or hostile file could get wrong (unknown
// dtypes, undefined or duplicate names, missing fields, inconsistent process groups)
// and returns InvalidArgument naming the graph and node index; it does not run the
// verifier (call VerifyModule for op semantics).
#ifndef MAGI_IR_PROTO_SERIALIZATION_H_
#define MAGI_IR_PROTO_SERIALIZATION_H_

#include "absl/strings/string_view.h"
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "magi/ir/ir.pb.h"
#include "magi/ir/module.h"

namespace magi {

inline constexpr int kIrVersion = 1;

proto::ModuleProto ModuleToProto(const Module& module);
absl::StatusOr<std::unique_ptr<Module>> ModuleFromProto(const proto::ModuleProto& proto);

// Writing fails (InvalidArgument naming the field and the text) if a name or string is
// not valid UTF-8: protobuf would write it, but no reader, `magi verify` included, would
// accept the file. The text parser never produces such a module; code may.
absl::StatusOr<std::string> ModuleToBinary(const Module& module);
absl::StatusOr<std::unique_ptr<Module>> ModuleFromBinary(absl::string_view bytes);

absl::StatusOr<std::string> ModuleToJson(const Module& module);
absl::StatusOr<std::unique_ptr<Module>> ModuleFromJson(absl::string_view json);

}  // namespace magi

#endif  // MAGI_IR_PROTO_SERIALIZATION_H_
