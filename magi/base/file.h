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

// Replaces `path` with `contents` atomically (temp file + fsync + rename + fsync of
// the folder).
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

// The streaming form, for files too large to hold in memory at once:
//
//   absl::StatusOr<AtomicFileWriter> out = AtomicFileWriter::Open(path);
//   MAGI_RETURN_IF_ERROR(out->Append(chunk));  // as often as needed
//   MAGI_RETURN_IF_ERROR(out->Commit());       // fsync + rename: `path` appears whole
//
// A writer destroyed before Commit (an error, an early return) removes its temporary
// file and leaves `path` as it was. The temporary is `path`.tmp.<pid>: a process killed
// while writing leaves it behind, and whoever owns the folder may remove such files
// once no writer runs. Each step is a crash point (magi/base/crash_points.h).
// Flushes the entries of folder `dir` (files created, renamed or removed in it) to disk:
// until then a power loss may undo a rename. A crash point.
absl::Status SyncDirectory(const std::string& dir);

class AtomicFileWriter {
 public:
  static absl::StatusOr<AtomicFileWriter> Open(const std::string& path);
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&&) = delete;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  absl::Status Append(absl::string_view data);
  absl::Status Commit();

 private:
  AtomicFileWriter(std::string path, std::string temp, int fd)
      : path_(std::move(path)), temp_(std::move(temp)), fd_(fd) {}
  void Abandon();

  std::string path_;
  std::string temp_;
  int fd_ = -1;
};

}  // namespace magi

#endif  // MAGI_BASE_FILE_H_
