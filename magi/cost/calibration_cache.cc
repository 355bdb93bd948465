#include "magi/cost/calibration_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "magi/base/file.h"
#include "magi/base/fnv1a.h"

namespace magi {
namespace {

// v2: collectives that overlap compute are keyed apart (CalibrationTable::KeyOf); a v1 file
// averaged them with the same collectives run alone, so it is measured again.
constexpr int kFormatVersion = 2;
constexpr absl::string_view kFormatLine = "magi calibration cache v2";
constexpr absl::string_view kDeviceLinePrefix = "# device: ";

// An exclusive flock(2) of `path`.lock, held while this object lives: the writers of one
// cache file, in any process or thread (each holds its own open file description), take
// turns at the read-merge-rename of Save. A separate file, because the cache file itself is
// replaced by rename and a lock on the old inode would not exclude a writer of the new one.
// The lock file stays (empty); the kernel drops the lock when its holder dies.
class FileLock {
 public:
  static absl::StatusOr<FileLock> Acquire(const std::string& path) {
    const std::string lock_path = absl::StrCat(path, ".lock");
    int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot open the calibration cache lock ", lock_path, ": ", std::strerror(errno)));
    }
    while (::flock(fd, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      return absl::InternalError(
          absl::StrCat("cannot lock the calibration cache lock ", lock_path, ": ", std::strerror(error)));
    }
    return FileLock(fd);
  }
  FileLock(FileLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  FileLock& operator=(FileLock&&) = delete;
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace

std::string CalibrationCache::HashOf(const CalibrationTable& table) {
  // Of what the cost model reads (keys, times, memory), not of the sample counts: a table
  // read back from the cache plans like the one measured, whose counts were the runs'.
  CalibrationTable times;
  for (const auto& [key, entry] : table.entries()) times.Set(key, entry.mean_seconds, 1, entry.working_bytes);
  return Fnv1a64Hex(times.ToCsv());
}

std::string CalibrationCache::DefaultDir() {
  const char* cache = std::getenv("MAGI_CACHE_DIR");
  if (cache != nullptr && *cache != '\0') return absl::StrCat(cache, "/calibration");
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home != '\0') return absl::StrCat(home, "/.cache/magi/calibration");
  return "/tmp/magi-cache/calibration";
}

std::string CalibrationCache::FileNameFor(const std::string& device_key, CalibrationSource source) {
  std::string name;
  for (char c : device_key) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!name.empty() && name.back() != '-') {
      name += '-';
    }
  }
  while (!name.empty() && name.back() == '-') name.pop_back();
  if (name.empty()) name = "device";
  if (name.size() > 200) name.resize(200);  // file names have limits; the header keeps the key
  switch (source) {
    case CalibrationSource::kSteps:
      return name + ".steps.csv";
    case CalibrationSource::kPinned:
      return name + ".pinned.csv";
    case CalibrationSource::kMicroRuns:
      break;
  }
  return name + ".csv";
}

std::string CalibrationCache::Comment() const {
  // The second line is what Read checks; ToCsv prefixes each line with "# ".
  absl::string_view what;
  switch (source_) {
    case CalibrationSource::kSteps:
      what = "kernel times of real steps (later runs fold theirs in); delete the file to forget them";
      break;
    case CalibrationSource::kPinned:
      what = "kernel times deterministic compiles plan with (added, never changed); delete the file to pin anew";
      break;
    case CalibrationSource::kMicroRuns:
      what = "kernel times Magi measured (micro-runs); delete the file to measure again";
      break;
  }
  return absl::StrCat(kFormatLine, "\ndevice: ", device_key_, "\n", what);
}

std::optional<CalibrationTable> CalibrationCache::Read(const std::string& path, const std::string& device_key,
                                                       bool* exists, std::string* why, bool* replaceable) {
  *exists = false;
  *replaceable = false;
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return std::nullopt;
  *exists = true;
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) {
    *why = std::string(text.status().message());
    return std::nullopt;
  }
  // The device line: the file's second line (the first says what the file is).
  std::vector<absl::string_view> lines = absl::StrSplit(*text, absl::MaxSplits('\n', 2));
  // Another version's cache (its keys or columns may mean other things): named as such,
  // not as a foreign file; an older one's times are of no use to anyone any more.
  constexpr absl::string_view kAnyVersion = "# magi calibration cache v";
  int version = 0;
  if (!lines.empty() && absl::StartsWith(lines[0], kAnyVersion) &&
      absl::SimpleAtoi(lines[0].substr(kAnyVersion.size()), &version) && version != kFormatVersion) {
    *why = absl::StrCat(path, ":1: written by ", version < kFormatVersion ? "an older" : "a newer",
                        " version of Magi ('", lines[0], "'; this version reads '# ", kFormatLine, "')");
    *replaceable = version < kFormatVersion;
    return std::nullopt;
  }
  if (lines.size() < 2 || lines[0] != absl::StrCat("# ", kFormatLine) ||
      !absl::StartsWith(lines[1], kDeviceLinePrefix)) {
    *why = absl::StrCat(path, ":1: not a Magi calibration cache (expected '# ", kFormatLine, "' then '",
                        kDeviceLinePrefix, "...')");
    *replaceable = true;
    return std::nullopt;
  }
  absl::string_view key = lines[1].substr(kDeviceLinePrefix.size());
  if (key != device_key) {
    *why = absl::StrCat(path, ":2: holds the times of device '", key, "', not of '", device_key, "'");
    return std::nullopt;
  }
  absl::StatusOr<CalibrationTable> table = CalibrationTable::FromCsv(*text, path);
  if (!table.ok()) {
    *why = std::string(table.status().message());
    *replaceable = true;
    return std::nullopt;
  }
  return *std::move(table);
}

CalibrationCache CalibrationCache::Open(const std::string& dir, const std::string& device_key,
                                        CalibrationSource source) {
  CalibrationCache cache;
  cache.device_key_ = device_key;
  cache.source_ = source;
  cache.path_ = absl::StrCat(dir, "/", FileNameFor(device_key, source));
  bool exists = false, replaceable = false;
  std::string why;
  std::optional<CalibrationTable> table = Read(cache.path_, device_key, &exists, &why, &replaceable);
  if (!table && exists && replaceable && source == CalibrationSource::kSteps) {
    // Step times are written only by a run that records its steps, which many never do (a
    // short test, a generation run): until one did, every compile of every process would
    // warn again. An empty table of this version takes the file's place at once, unless
    // another process wrote a good one since it was read (a run that records steps merges
    // into whatever the file holds when it saves).
    // Under the writers' lock, so a step recorder's Save cannot land between the read and
    // the replacement (best effort: without a lock file, the folder is not ours to write).
    absl::StatusOr<FileLock> lock = FileLock::Acquire(cache.path_);
    std::string why_now;
    std::optional<CalibrationTable> now = Read(cache.path_, device_key, &exists, &why_now, &replaceable);
    if (now) {
      table = std::move(now);
    } else if (exists && replaceable) {
      absl::Status replaced = lock.ok() ? CalibrationTable().Save(cache.path_, cache.Comment()) : lock.status();
      cache.warning_ =
          replaced.ok()
              ? absl::StrCat(why, "; the cached step times are ignored and the file replaced by an empty table")
              : absl::StrCat(why, "; the cached step times are ignored (replacing the file failed: ",
                             replaced.message(), ")");
      cache.hash_ = HashOf(cache.table_);
      return cache;
    } else {
      why = why_now;
    }
  }
  if (table) {
    cache.table_ = *std::move(table);
    cache.loaded_ = true;
  } else if (exists) {
    cache.warning_ = absl::StrCat(
        why, !replaceable ? "; the file is left as it is and the times measured now are not cached"
                          : "; the cached times are ignored, measured again and the file replaced");
  }
  cache.hash_ = HashOf(cache.table_);
  return cache;
}

void CalibrationCache::Set(const std::string& key, double seconds, int64_t count, int64_t working_bytes) {
  table_.Set(key, seconds, count, working_bytes);
  added_.Set(key, seconds, count, working_bytes);
}

void CalibrationCache::Fold(const std::string& key, double seconds, int64_t count, int64_t max_old_count) {
  if (count < 1) return;
  std::optional<double> old = table_.Find(key);
  if (!old) {
    Set(key, seconds, count);
    return;
  }
  const CalibrationTable::Entry& entry = table_.entries().at(key);
  const int64_t old_count = std::min(entry.count, std::max<int64_t>(0, max_old_count));
  const double total = static_cast<double>(old_count + count);
  const double mean = *old * (static_cast<double>(old_count) / total) + seconds * (static_cast<double>(count) / total);
  Set(key, mean, old_count + count, entry.working_bytes);
}

absl::Status CalibrationCache::Save() {
  if (added_.size() == 0) return absl::OkStatus();
  std::error_code error;
  const std::filesystem::path dir = std::filesystem::path(path_).parent_path();
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create the calibration cache folder ", dir.string(), ": ", error.message()));
  }
  // What another rank or job wrote since Open stays, unless this one measured it anew (or,
  // for the pinned table, this one's time gives way). Read, merged and renamed into place
  // under the lock: two writers that read the same file would otherwise each drop the
  // other's entries.
  absl::StatusOr<FileLock> lock = FileLock::Acquire(path_);
  if (!lock.ok()) return lock.status();
  bool exists = false, replaceable = false;
  std::string why;
  std::optional<CalibrationTable> held = Read(path_, device_key_, &exists, &why, &replaceable);
  if (!held && exists && !replaceable) return absl::OkStatus();  // not this version's to write over (warning())
  CalibrationTable merged = held.value_or(CalibrationTable());
  for (const auto& [key, entry] : added_.entries()) {
    if (source_ == CalibrationSource::kPinned && merged.Find(key)) continue;
    merged.Set(key, entry.mean_seconds, entry.count, entry.working_bytes);
  }
  absl::Status saved = merged.Save(path_, Comment());
  if (!saved.ok()) return saved;
  // table_ stays the snapshot this object's user plans with (the header says why).
  added_ = CalibrationTable();  // written
  return absl::OkStatus();
}

}  // namespace magi
