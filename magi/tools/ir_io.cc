#include "magi/tools/ir_io.h"

#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "magi/base/file.h"
#include "magi/base/status_macros.h"
#include "magi/ir/parser.h"
#include "magi/ir/printer.h"
#include "magi/ir/proto_serialization.h"
#include "magi/ir/verifier.h"

namespace magi {

absl::StatusOr<IrFormat> IrFormatForPath(const std::string& path) {
  if (path == "-" || absl::EndsWith(path, ".mir")) return IrFormat::kText;
  if (absl::EndsWith(path, ".pb")) return IrFormat::kBinary;
  if (absl::EndsWith(path, ".json")) return IrFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": unknown IR file extension (expected .mir for text, .pb for protobuf, .json)"));
}

absl::StatusOr<std::unique_ptr<Module>> LoadModule(const std::string& path) {
  MAGI_ASSIGN_OR_RETURN(IrFormat format, IrFormatForPath(path));
  MAGI_ASSIGN_OR_RETURN(std::string contents, ReadFile(path));
  absl::StatusOr<std::unique_ptr<Module>> module;
  switch (format) {
    case IrFormat::kText:
      module = ParseModule(contents, path);
      break;
    case IrFormat::kBinary:
      module = ModuleFromBinary(contents);
      break;
    case IrFormat::kJson:
      module = ModuleFromJson(contents);
      break;
  }
  if (!module.ok()) {
    // Text errors already start with the path; the protobuf loaders' do not.
    if (format == IrFormat::kText) return module.status();
    return absl::Status(module.status().code(), absl::StrCat(path, ": ", module.status().message()));
  }
  absl::Status verified = VerifyModule(**module);
  if (!verified.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the module does not verify:\n", verified.message()));
  }
  return module;
}

absl::Status WriteOutput(const std::string& path, absl::string_view contents) {
  if (path == "-") {
    if (std::fwrite(contents.data(), 1, contents.size(), stdout) != contents.size() || std::fflush(stdout) != 0) {
      return absl::InternalError("cannot write to stdout");
    }
    return absl::OkStatus();
  }
  return WriteFileAtomically(path, contents);
}

absl::Status SaveModule(const Module& module, const std::string& path) {
  MAGI_ASSIGN_OR_RETURN(IrFormat format, IrFormatForPath(path));
  switch (format) {
    case IrFormat::kText:
      return WriteOutput(path, PrintModule(module));
    case IrFormat::kBinary: {
      MAGI_ASSIGN_OR_RETURN(std::string bytes, ModuleToBinary(module));
      return WriteOutput(path, bytes);
    }
    case IrFormat::kJson: {
      MAGI_ASSIGN_OR_RETURN(std::string json, ModuleToJson(module));
      return WriteOutput(path, json);
    }
  }
  return absl::InternalError("unreachable");
}

}  // namespace magi
