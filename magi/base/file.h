// Whole-file reads and crash-safe writes.
//
// WriteFileAtomically writes to a temporary file in the same folder, flushes it to
// disk and renames it over the target, so readers see either the old file or the
// complete new one, never a half-written one.
#ifndef MAGI_BASE_FILE_H_
#define MAGI_BASE_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace magi {

// The contents of `path`; NotFound / PermissionDenied / Internal naming the path and errno text.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Replaces `path` with `contents` atomically (temp file + fsync + rename).
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

}  // namespace magi

#endif  // MAGI_BASE_FILE_H_
