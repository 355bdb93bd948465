// The calibration tables Magi measures by itself (calibration by default), one per device
// kind, kept on disk so that later runs reuse them.
//
// One CSV file per device key (what measured times hold for: the device model and the
// runtime, e.g. "cpu Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz, 1 thread, libtorch
// 1.13.1"), in a folder that defaults to ${MAGI_CACHE_DIR:-$HOME/.cache/magi}/calibration,
// named after the key (FileNameFor). The file is a CalibrationTable CSV whose first
// comment line names the key exactly, so a file copied from elsewhere or whose name
// collides with another key's is recognized as another device's.
//
//   CalibrationCache cache = CalibrationCache::Open(CalibrationCache::DefaultDir(), key);
//   if (!cache.warning().empty()) ...      // a corrupt or foreign file: ignored, replaced on Save
//   cache.table().Find(k);  cache.Add(k, seconds, runs);  MAGI_RETURN_IF_ERROR(cache.Save());
//
// A file that cannot be read or parsed is NOT an error: the cache is a shortcut, not an
// input, so it opens empty with a warning naming the file and the cause, the kernels are
// measured again, and Save replaces the file; a `.steps.csv` that cannot be used is replaced
// by an empty table at Open already (step times are saved only by runs that record steps,
// so every other run would warn again). A newer Magi version's file, or another device's
// whose name collides with this key's, is left as it is (the times measured now are not
// cached). (A table the user names, --calibration=PATH,
// is an input: CalibrationTable::Load fails on it, naming the line.)
//
// Concurrency (every process of the machine shares the folder): Save is a read-modify-write
// of the file under an exclusive flock(2) of `<file>.lock`, and the new contents replace the
// file by temp file + rename, so writers never interleave or lose each other's entries
// (each merges into what the file holds once it has the lock), and a reader, which takes no
// lock, sees a whole old or whole new file. table() is a snapshot: the file as Open read
// it plus what this object Set since; Save writes the merge but never brings other
// processes' entries into table(), so one compile never plans half with one version of the
// file and half with another. hash() names the snapshot Open read, for run summaries.
//
// The pinned table (CalibrationSource::kPinned, `<key>.pinned.csv`) is what deterministic
// compiles plan with: an entry, once written, is never changed by Save (a time some other
// compile pinned first wins over this object's), so the same kernel gets the same time in
// every deterministic compile, whatever other processes write to the other two files.
#ifndef MAGI_COST_CALIBRATION_CACHE_H_
#define MAGI_COST_CALIBRATION_CACHE_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "magi/cost/calibration.h"

namespace magi {

// What a cache file's times are.
enum class CalibrationSource {
  kMicroRuns,  // KernelCalibrator micro-runs (<key>.csv)
  kSteps,      // node times of real steps, folded run after run (<key>.steps.csv; step_time_feedback.h)
  kPinned,     // the times deterministic compiles plan with: entries added, never changed (<key>.pinned.csv)
};

class CalibrationCache {
 public:
  // ${MAGI_CACHE_DIR}/calibration, else $HOME/.cache/magi/calibration, else
  // /tmp/magi-cache/calibration (no HOME: a service account).
  static std::string DefaultDir();
  // The file name of `device_key`: its letters and digits in lower case, other runs of
  // characters as one '-', and ".csv" ("cpu-intel-r-xeon-r-...-libtorch-1-13-1.csv"), or
  // ".steps.csv" for the times of real steps, ".pinned.csv" for the pinned table.
  static std::string FileNameFor(const std::string& device_key,
                                 CalibrationSource source = CalibrationSource::kMicroRuns);

  // The cache of `device_key` in folder `dir` (which need not exist yet). Never fails:
  // see warning().
  static CalibrationCache Open(const std::string& dir, const std::string& device_key,
                               CalibrationSource source = CalibrationSource::kMicroRuns);

  const std::string& device_key() const { return device_key_; }
  const std::string& path() const { return path_; }
  // The entries read from the file, plus those added since.
  const CalibrationTable& table() const { return table_; }
  // Whether the file existed and was read; and why it was not used ("" when it was, or
  // when there was none): "PATH:3: expected ..." or "PATH holds the table of device ...".
  bool loaded() const { return loaded_; }
  const std::string& warning() const { return warning_; }
  // HashOf the table Open read (of an empty table when there was none or it was not used).
  // Not changed by Set or Save.
  const std::string& hash() const { return hash_; }

  // A content hash of what the cost model reads of `table`: its keys, times and working
  // bytes, not the sample counts (64-bit FNV-1a of that CSV, 16 hex digits). The same on
  // every host and run; equal hashes, equal times bit for bit.
  static std::string HashOf(const CalibrationTable& table);

  // Records a measured time (replacing an older one of the same key), and for a partition
  // call the memory it allocates while it runs (-1: unknown).
  void Set(const std::string& key, double seconds, int64_t count, int64_t working_bytes = -1);
  // Folds `count` new samples of mean `seconds` into `key`'s entry, the entry weighing at
  // most `max_old_count` samples: older runs fade instead of outvoting the newest forever.
  void Fold(const std::string& key, double seconds, int64_t count, int64_t max_old_count);
  // Writes the entries Set since the last Save to path() (creating the folder), merged
  // with what the file holds by then, holding the file's lock (see above). For the pinned
  // table the file's entries win over this object's; otherwise this object's win. table()
  // is left as it is. Nothing new, or a file this version must not write over (a newer
  // version's, another device's: warning() said so): OK without touching it. An error
  // names the folder, lock file or file that could not be written.
  absl::Status Save();

 private:
  CalibrationCache() = default;
  // The file's table if it is a valid table of this device key; else the reason in *why,
  // and in *replaceable whether this version may write over it: yes for a file that does
  // not parse or an older version's; no for a newer version's (another checkout sharing the
  // folder) or another device's whose file name collides with this key's.
  static std::optional<CalibrationTable> Read(const std::string& path, const std::string& device_key,
                                              bool* exists, std::string* why, bool* replaceable);
  std::string Comment() const;

  std::string device_key_;
  CalibrationSource source_ = CalibrationSource::kMicroRuns;
  std::string path_;
  CalibrationTable table_;
  CalibrationTable added_;  // what Set recorded since Open (merged on Save)
  bool loaded_ = false;
  std::string warning_;
  std::string hash_;
};

}  // namespace magi

#endif  // MAGI_COST_CALIBRATION_CACHE_H_
