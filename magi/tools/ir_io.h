// Loading and saving IR modules by file extension, for command-line tools.
//
//   .mir   text IR (printer.h)          .pb   binary protobuf (ir.proto)
//   .json  protobuf JSON
// Loading also verifies the module. Saving is atomic (temp file + rename); "-" is stdout.
#ifndef MAGI_TOOLS_IR_IO_H_
#define MAGI_TOOLS_IR_IO_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "magi/ir/module.h"

namespace magi {

enum class IrFormat { kText, kBinary, kJson };

// The format a path's extension names; InvalidArgument for other extensions.
absl::StatusOr<IrFormat> IrFormatForPath(const std::string& path);

// Reads, parses and verifies the module at `path`.
absl::StatusOr<std::unique_ptr<Module>> LoadModule(const std::string& path);

// Serializes `module` in the format of `path`'s extension (text for "-") and writes it.
absl::Status SaveModule(const Module& module, const std::string& path);

// Writes `contents` to `path` atomically, or to stdout for "-".
absl::Status WriteOutput(const std::string& path, absl::string_view contents);

}  // namespace magi

#endif  // MAGI_TOOLS_IR_IO_H_
