#include "magi/cost/calibration_cache.h"

#include <cstdlib>
#include <filesystem>

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
