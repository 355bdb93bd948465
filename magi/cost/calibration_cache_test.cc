#include "magi/cost/calibration_cache.h"

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "magi/base/file.h"
#include "magi/base/gtest_printers.h"

namespace magi {
namespace {

constexpr char kKey[] = "cpu Test CPU @ 1.00GHz, 1 thread, libtorch 1.13.1";
constexpr char kMm[] = "aten::mm(f32[8,64], f32[64,64]) -> f32[8,64]";
constexpr char kExp[] = "aten::exp(f32[8,8]) -> f32[8,8]";

std::string FreshDir(const std::string& name) {
  std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(CalibrationCacheTest, FileNamesComeFromTheDeviceKey) {
  EXPECT_EQ(CalibrationCache::FileNameFor(kKey), "cpu-test-cpu-1-00ghz-1-thread-libtorch-1-13-1.csv");
  EXPECT_EQ(CalibrationCache::FileNameFor("NVIDIA H200 / libtorch 2.11.0"), "nvidia-h200-libtorch-2-11-0.csv");
  EXPECT_EQ(CalibrationCache::FileNameFor("///"), "device.csv");
  EXPECT_EQ(CalibrationCache::FileNameFor("NVIDIA H200", CalibrationSource::kSteps), "nvidia-h200.steps.csv");
  EXPECT_EQ(CalibrationCache::FileNameFor("NVIDIA H200", CalibrationSource::kPinned), "nvidia-h200.pinned.csv");
}

TEST(CalibrationCacheTest, DefaultDirFollowsMagiCacheDir) {
  const char* old = std::getenv("MAGI_CACHE_DIR");
  std::string saved = old != nullptr ? old : "";
  ::setenv("MAGI_CACHE_DIR", "/somewhere/magi", 1);
  EXPECT_EQ(CalibrationCache::DefaultDir(), "/somewhere/magi/calibration");
  ::unsetenv("MAGI_CACHE_DIR");
  ::setenv("HOME", "/home/me", 1);
  EXPECT_EQ(CalibrationCache::DefaultDir(), "/home/me/.cache/magi/calibration");
  if (old != nullptr) ::setenv("MAGI_CACHE_DIR", saved.c_str(), 1);
}

TEST(CalibrationCacheTest, SavedTimesAreReadBackExactlyAndNothingNewWritesNothing) {
  const std::string dir = FreshDir("roundtrip");
  CalibrationCache cache = CalibrationCache::Open(dir, kKey);
  EXPECT_FALSE(cache.loaded());
  EXPECT_EQ(cache.warning(), "");
  EXPECT_EQ(cache.table().size(), 0u);
  ASSERT_TRUE(cache.Save().ok());  // nothing to write: no folder made
  EXPECT_FALSE(std::filesystem::exists(dir));

  cache.Set(kMm, 1.0 / 3.0, 5);
  ASSERT_TRUE(cache.Save().ok());
  ASSERT_TRUE(std::filesystem::exists(cache.path()));
  absl::StatusOr<std::string> text = ReadFile(cache.path());
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->rfind("# magi calibration cache v2\n# device: cpu Test CPU @ 1.00GHz, 1 thread, libtorch 1.13.1\n", 0), 0u)
      << *text;

  CalibrationCache again = CalibrationCache::Open(dir, kKey);
  EXPECT_TRUE(again.loaded());
  EXPECT_EQ(again.warning(), "");
  EXPECT_EQ(again.table().Find(kMm), 1.0 / 3.0);  // bit for bit
  EXPECT_EQ(again.table().entries().at(kMm).count, 5);
}

TEST(CalibrationCacheTest, SaveMergesWhatAnotherWriterAddedMeanwhile) {
  const std::string dir = FreshDir("merge");
  CalibrationCache first = CalibrationCache::Open(dir, kKey);
  CalibrationCache second = CalibrationCache::Open(dir, kKey);
  first.Set(kMm, 2e-5, 3);
  ASSERT_TRUE(first.Save().ok());
  second.Set(kExp, 1e-6, 3);
  ASSERT_TRUE(second.Save().ok());
  CalibrationCache read = CalibrationCache::Open(dir, kKey);
  EXPECT_EQ(read.table().Find(kMm), 2e-5);
  EXPECT_EQ(read.table().Find(kExp), 1e-6);
}

TEST(CalibrationCacheTest, ACorruptFileIsAWarningAndIsReplacedOnSave) {
  const std::string dir = FreshDir("corrupt");
  const std::string path = dir + "/" + CalibrationCache::FileNameFor(kKey);
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(WriteFileAtomically(path, std::string("# magi calibration cache v2\n# device: ") + kKey +
                                            "\n1e-6,1," + kMm + "\nfast,1,aten::exp(f32[8,8]) -> f32[8,8]\n")
                  .ok());
  CalibrationCache cache = CalibrationCache::Open(dir, kKey);
  EXPECT_FALSE(cache.loaded());
  EXPECT_EQ(cache.table().size(), 0u);  // nothing of a corrupt file is trusted
  EXPECT_EQ(cache.warning(), path + ":4: expected 'mean_seconds,count,key' or 'mean_seconds,count,working_bytes=N,key', got "
                                    "'fast,1,aten::exp(f32[8,8]) -> f32[8,8]'; the cached times are ignored, measured again and the file replaced");
  cache.Set(kExp, 1e-6, 3);
  ASSERT_TRUE(cache.Save().ok());
  CalibrationCache fixed = CalibrationCache::Open(dir, kKey);
  EXPECT_TRUE(fixed.loaded());
  EXPECT_EQ(fixed.warning(), "");
  EXPECT_EQ(fixed.table().size(), 1u);

  // Not a cache at all, and another device's table under this name.
  ASSERT_TRUE(WriteFileAtomically(path, "1e-6,1,x\n").ok());
  EXPECT_EQ(CalibrationCache::Open(dir, kKey).warning(),
            path + ":1: not a Magi calibration cache (expected '# magi calibration cache v2' then '# device: ...'); "
                   "the cached times are ignored, measured again and the file replaced");
  // An older version's cache: named as such, and replaced.
  ASSERT_TRUE(WriteFileAtomically(path, std::string("# magi calibration cache v1\n# device: ") + kKey +
                                            "\n1e-6,1," + kMm + "\n")
                  .ok());
  EXPECT_EQ(CalibrationCache::Open(dir, kKey).warning(),
            path + ":1: written by an older version of Magi ('# magi calibration cache v1'; this version reads "
                   "'# magi calibration cache v2'); the cached times are ignored, measured again and the file replaced");
  // The times of real steps are written only by runs that record steps: an unusable file is
  // replaced by an empty table at once, so the next process opens it without a warning.
  const std::string steps_path = dir + "/" + CalibrationCache::FileNameFor(kKey, CalibrationSource::kSteps);
  ASSERT_TRUE(WriteFileAtomically(steps_path, std::string("# magi calibration cache v1\n# device: ") + kKey +
                                                  "\n1e-6,1," + kMm + "\n")
                  .ok());
  CalibrationCache stale_steps = CalibrationCache::Open(dir, kKey, CalibrationSource::kSteps);
  EXPECT_EQ(stale_steps.warning(),
            steps_path + ":1: written by an older version of Magi ('# magi calibration cache v1'; this version reads "
                         "'# magi calibration cache v2'); the cached step times are ignored and the file replaced by "
                         "an empty table");
  EXPECT_EQ(stale_steps.table().size(), 0u);
  CalibrationCache reopened = CalibrationCache::Open(dir, kKey, CalibrationSource::kSteps);
  EXPECT_TRUE(reopened.loaded());
  EXPECT_EQ(reopened.warning(), "");
  EXPECT_EQ(reopened.table().size(), 0u);
}

// A newer version's file (another checkout sharing the folder) and another device's whose
// name collides with this key's are theirs: named, left as they are, not written over.
TEST(CalibrationCacheTest, ANewerVersionsOrAnotherDevicesFileIsLeftAsItIs) {
  const std::string dir = FreshDir("foreign");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + CalibrationCache::FileNameFor(kKey);
  const std::string steps_path = dir + "/" + CalibrationCache::FileNameFor(kKey, CalibrationSource::kSteps);
  const std::string newer = std::string("# magi calibration cache v3\n# device: ") + kKey + "\n1e-6,1," + kMm + "\n";
  const std::string other = "# magi calibration cache v2\n# device: cpu Other\n1e-6,1,x\n";
  for (const std::string& contents : {newer, other}) {
    ASSERT_TRUE(WriteFileAtomically(path, contents).ok());
    ASSERT_TRUE(WriteFileAtomically(steps_path, contents).ok());
    CalibrationCache cache = CalibrationCache::Open(dir, kKey);
    EXPECT_EQ(cache.warning(),
              path + (contents == newer ? ":1: written by a newer version of Magi ('# magi calibration cache v3'; "
                                          "this version reads '# magi calibration cache v2')"
                                        : std::string(":2: holds the times of device 'cpu Other', not of '") + kKey + "'") +
                  "; the file is left as it is and the times measured now are not cached");
    cache.Set(kExp, 1e-6, 3);
    EXPECT_TRUE(cache.Save().ok());
    EXPECT_EQ(*ReadFile(path), contents);
    CalibrationCache steps = CalibrationCache::Open(dir, kKey, CalibrationSource::kSteps);
    EXPECT_FALSE(steps.loaded());
    EXPECT_EQ(*ReadFile(steps_path), contents);
  }
}

// Every process of the machine writes the same file. Several processes saving at once, each
// Open + Set + Save again and again: each save's entry is in the file afterwards (no writer
// dropped another's by merging into a file read before the other's rename), and every Open
// in between parsed the file (none saw it torn or interleaved).
TEST(CalibrationCacheTest, ConcurrentWritersLoseNothingAndNeverTearTheFile) {
  const std::string dir = FreshDir("concurrent");
  constexpr int kWriters = 4;
  constexpr int kSaves = 15;
  std::vector<pid_t> children;
  for (int writer = 0; writer < kWriters; ++writer) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // the child: no gtest assertions, its exit status says what went wrong
      int status = 0;
      for (int i = 0; i < kSaves; ++i) {
        CalibrationCache cache = CalibrationCache::Open(dir, kKey);
        if (!cache.warning().empty()) status |= 1;
        cache.Set(absl::StrCat("writer ", writer, " save ", i), 1e-6 * (i + 1), 1);
        if (!cache.Save().ok()) status |= 2;
      }
      ::_exit(status);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "1: an Open warned (a torn file), 2: a Save failed";
  }
  CalibrationCache cache = CalibrationCache::Open(dir, kKey);
  EXPECT_EQ(cache.warning(), "");
  int missing = 0;
  for (int writer = 0; writer < kWriters; ++writer) {
    for (int i = 0; i < kSaves; ++i) missing += !cache.table().Find(absl::StrCat("writer ", writer, " save ", i));
  }
  EXPECT_EQ(missing, 0) << "of " << kWriters * kSaves << " entries saved";
  EXPECT_EQ(cache.table().size(), static_cast<size_t>(kWriters * kSaves));
  // No temporary file is left behind; the lock file stays.
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) files.push_back(entry.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{CalibrationCache::FileNameFor(kKey),
                                             CalibrationCache::FileNameFor(kKey) + ".lock"}));
}

// table() is what Open read plus this object's own Sets, whatever other writers save
// meanwhile; hash() names what Open read.
TEST(CalibrationCacheTest, TheTableIsTheSnapshotOpenReadAndItsHashNamesIt) {
  const std::string dir = FreshDir("snapshot");
  CalibrationCache empty = CalibrationCache::Open(dir, kKey);
  EXPECT_EQ(empty.hash(), CalibrationCache::HashOf(CalibrationTable()));
  EXPECT_EQ(empty.hash().size(), 16u);
  CalibrationCache first = CalibrationCache::Open(dir, kKey);
  first.Set(kMm, 2e-5, 3);
  ASSERT_TRUE(first.Save().ok());

  CalibrationCache reader = CalibrationCache::Open(dir, kKey);
  const std::string read_hash = reader.hash();
  EXPECT_EQ(read_hash, CalibrationCache::HashOf(reader.table()));
  EXPECT_NE(read_hash, empty.hash());
  CalibrationCache other = CalibrationCache::Open(dir, kKey);  // another process, meanwhile
  other.Set(kExp, 1e-6, 3);
  ASSERT_TRUE(other.Save().ok());
  reader.Set(kMm, 3e-5, 3);
  ASSERT_TRUE(reader.Save().ok());
  EXPECT_FALSE(reader.table().Find(kExp).has_value());  // merged into the file, not into the snapshot
  EXPECT_EQ(reader.table().Find(kMm), 3e-5);
  EXPECT_EQ(reader.hash(), read_hash);

  CalibrationCache after = CalibrationCache::Open(dir, kKey);
  EXPECT_EQ(after.table().Find(kExp), 1e-6);
  EXPECT_EQ(after.table().Find(kMm), 3e-5);
  EXPECT_NE(after.hash(), read_hash);
  // The same times, the same hash, whatever the comment lines and sample counts; another
  // time or working size, another hash.
  CalibrationTable same;
  same.Set(kMm, 3e-5, 1);
  same.Set(kExp, 1e-6, 7);
  EXPECT_EQ(after.hash(), CalibrationCache::HashOf(same));
  same.Set(kExp, 1e-6, 7, /*working_bytes=*/64);
  EXPECT_NE(after.hash(), CalibrationCache::HashOf(same));
  same.Set(kExp, 1.0000000000000002e-6, 7);
  EXPECT_NE(after.hash(), CalibrationCache::HashOf(same));
}

// The pinned table's entries are never changed: the first time pinned for a key stays,
// whoever saves another later; new keys are added.
TEST(CalibrationCacheTest, APinnedTimeIsNeverChanged) {
  const std::string dir = FreshDir("pinned");
  CalibrationCache a = CalibrationCache::Open(dir, kKey, CalibrationSource::kPinned);
  CalibrationCache b = CalibrationCache::Open(dir, kKey, CalibrationSource::kPinned);
  EXPECT_EQ(a.path(), dir + "/" + CalibrationCache::FileNameFor(kKey, CalibrationSource::kPinned));
  a.Set(kMm, 1e-5, 3);
  ASSERT_TRUE(a.Save().ok());
  b.Set(kMm, 2e-5, 3);
  b.Set(kExp, 1e-6, 1);
  ASSERT_TRUE(b.Save().ok());
  EXPECT_EQ(b.table().Find(kMm), 2e-5);  // what b's user planned with, as it was
  CalibrationCache read = CalibrationCache::Open(dir, kKey, CalibrationSource::kPinned);
  EXPECT_TRUE(read.loaded());
  EXPECT_EQ(read.table().Find(kMm), 1e-5);
  EXPECT_EQ(read.table().Find(kExp), 1e-6);
  // The other two files of the device are not touched.
  EXPECT_FALSE(std::filesystem::exists(dir + "/" + CalibrationCache::FileNameFor(kKey)));
}

TEST(CalibrationCacheTest, AnUnwritableFolderIsAnErrorOfSave) {
  const std::string dir = FreshDir("blocked");
  std::filesystem::create_directories(std::filesystem::path(dir).parent_path());
  ASSERT_TRUE(WriteFileAtomically(dir, "a file where the folder should be").ok());
  CalibrationCache cache = CalibrationCache::Open(dir + "/calibration", kKey);
  cache.Set(kExp, 1e-6, 1);
  absl::Status saved = cache.Save();
  EXPECT_EQ(saved.code(), absl::StatusCode::kPermissionDenied) << saved;
  EXPECT_NE(saved.message().find("cannot create the calibration cache folder " + dir + "/calibration"),
            std::string::npos)
      << saved;
}

}  // namespace
}  // namespace magi
