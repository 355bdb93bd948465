#include "magi/cost/calibration_cache.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "magi/base/file.h"

namespace magi {
namespace {

// v2: collectives that overlap compute are keyed apart (CalibrationTable::KeyOf); a v1 file
// averaged them with the same collectives run alone, so it is measured again.
constexpr int kFormatVersion = 2;
constexpr absl::string_view kFormatLine = "magi calibration cache v2";
constexpr absl::string_view kDeviceLinePrefix = "# device: ";

}  // namespace

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
  return name + (source == CalibrationSource::kSteps ? ".steps.csv" : ".csv");
}

std::string CalibrationCache::Comment() const {
  // The second line is what Read checks; ToCsv prefixes each line with "# ".
  return absl::StrCat(kFormatLine, "\ndevice: ", device_key_,
                      source_ == CalibrationSource::kSteps
                          ? "\nkernel times of real steps (later runs fold theirs in); delete the file to forget them"
                          : "\nkernel times Magi measured (micro-runs); delete the file to measure again");
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
    std::string why_now;
    std::optional<CalibrationTable> now = Read(cache.path_, device_key, &exists, &why_now, &replaceable);
    if (now) {
      table = std::move(now);
    } else if (exists && replaceable) {
      absl::Status replaced = CalibrationTable().Save(cache.path_, cache.Comment());
      cache.warning_ =
          replaced.ok()
              ? absl::StrCat(why, "; the cached step times are ignored and the file replaced by an empty table")
              : absl::StrCat(why, "; the cached step times are ignored (replacing the file failed: ",
                             replaced.message(), ")");
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
  // What another rank or job wrote since Open stays, unless this one measured it anew.
  bool exists = false, replaceable = false;
  std::string why;
  std::optional<CalibrationTable> held = Read(path_, device_key_, &exists, &why, &replaceable);
  if (!held && exists && !replaceable) return absl::OkStatus();  // not this version's to write over (warning())
  CalibrationTable merged = held.value_or(CalibrationTable());
  for (const auto& [key, entry] : added_.entries()) merged.Set(key, entry.mean_seconds, entry.count, entry.working_bytes);
  absl::Status saved = merged.Save(path_, Comment());
  if (!saved.ok()) return saved;
  table_ = std::move(merged);
  added_ = CalibrationTable();  // written
  return absl::OkStatus();
}

}  // namespace magi
