#include "magi/base/file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "magi/base/crash_points.h"

namespace magi {
namespace {

absl::Status ErrnoStatus(int error, absl::string_view what, absl::string_view path) {
  std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(error));
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open", path);
  std::string contents;
  char buffer[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      int error = errno;
      ::close(fd);
      return ErrnoStatus(error, "cannot read", path);
    }
    contents.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return contents;
}

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::Open(const std::string& path) {
  std::string temp = absl::StrCat(path, ".tmp.", ::getpid());
  CrashPoint(absl::StrCat("create ", temp));
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "cannot create", temp);
  return AtomicFileWriter(path, temp, fd);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)), temp_(std::move(other.temp_)), fd_(other.fd_) {
  other.fd_ = -1;
}

AtomicFileWriter::~AtomicFileWriter() { Abandon(); }

void AtomicFileWriter::Abandon() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(temp_.c_str());
  fd_ = -1;
}

absl::Status AtomicFileWriter::Append(absl::string_view data) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("the writer of ", path_, " is closed"));
  const char* next = data.data();
  size_t left = data.size();
  CrashPoint(absl::StrCat("write ", data.size(), " bytes to ", temp_));
  while (left > 0) {
    ssize_t n = ::write(fd_, next, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      int error = errno;
      Abandon();
      return ErrnoStatus(error, "cannot write", temp_);
    }
    next += n;
    left -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("the writer of ", path_, " is closed"));
  CrashPoint(absl::StrCat("fsync ", temp_));
  if (::fsync(fd_) != 0 || ::close(fd_) != 0) {
    int error = errno;
    fd_ = -1;
    ::unlink(temp_.c_str());
    return ErrnoStatus(error, "cannot flush", temp_);
  }
  fd_ = -1;
  CrashPoint(absl::StrCat("rename ", temp_, " -> ", path_));
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    int error = errno;
    ::unlink(temp_.c_str());
    return ErrnoStatus(error, "cannot rename onto", path_);
  }
  // The rename is durable once the folder's entries are.
  size_t slash = path_.rfind('/');
  return SyncDirectory(slash == std::string::npos ? "." : (slash == 0 ? "/" : path_.substr(0, slash)));
}

absl::Status SyncDirectory(const std::string& dir) {
  CrashPoint(absl::StrCat("fsync folder ", dir));
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open folder", dir);
  if (::fsync(fd) != 0) {
    int error = errno;
    ::close(fd);
    return ErrnoStatus(error, "cannot flush folder", dir);
  }
  ::close(fd);
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  absl::StatusOr<AtomicFileWriter> writer = AtomicFileWriter::Open(path);
  if (!writer.ok()) return writer.status();
  absl::Status appended = writer->Append(contents);
  if (!appended.ok()) return appended;
  return writer->Commit();
}

}  // namespace magi
