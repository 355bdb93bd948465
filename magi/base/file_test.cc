#include "magi/base/file.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "gtest/gtest.h"
#include "magi/base/crash_points.h"
#include "magi/base/gtest_printers.h"

namespace magi {
namespace {

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

TEST(FileTest, WriteThenReadBack) {
  std::string path = TempDir() + "/roundtrip.txt";
  ASSERT_TRUE(WriteFileAtomically(path, std::string("a\0b", 3)).ok());
  ASSERT_TRUE(WriteFileAtomically(path, "second").ok());  // replaces
  auto contents = ReadFile(path);
  ASSERT_TRUE(contents.ok()) << contents.status();
  EXPECT_EQ(*contents, "second");
  // No temporary file is left behind.
  DIR* dir = opendir(TempDir().c_str());
  ASSERT_NE(dir, nullptr);
  while (dirent* entry = readdir(dir)) EXPECT_EQ(std::string(entry->d_name).find(".tmp."), std::string::npos);
  closedir(dir);
}

TEST(FileTest, MissingFileIsNotFound) {
  auto contents = ReadFile(TempDir() + "/does/not/exist");
  EXPECT_EQ(contents.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(contents.status().message(),
            "cannot open " + TempDir() + "/does/not/exist: No such file or directory");
}

TEST(FileTest, WriteIntoMissingFolderFailsCleanly) {
  absl::Status status = WriteFileAtomically(TempDir() + "/no/such/dir/file", "x");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
}

TEST(FileTest, StreamingWriterAppearsWholeOrNotAtAll) {
  std::string path = TempDir() + "/streamed.bin";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  {
    absl::StatusOr<AtomicFileWriter> writer = AtomicFileWriter::Open(path);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE(writer->Append("part one, ").ok());
    // Abandoned without Commit: the old file stays, and no temporary is left.
  }
  EXPECT_EQ(*ReadFile(path), "old");
  DIR* dir = opendir(TempDir().c_str());
  ASSERT_NE(dir, nullptr);
  while (dirent* entry = readdir(dir)) EXPECT_EQ(std::string(entry->d_name).find(".tmp."), std::string::npos);
  closedir(dir);

  absl::StatusOr<AtomicFileWriter> writer = AtomicFileWriter::Open(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE(writer->Append("part one, ").ok());
  ASSERT_TRUE(writer->Append("part two").ok());
  EXPECT_EQ(*ReadFile(path), "old");  // nothing visible before Commit
  ASSERT_TRUE(writer->Commit().ok());
  EXPECT_EQ(*ReadFile(path), "part one, part two");
  EXPECT_EQ(writer->Append("more").code(), absl::StatusCode::kFailedPrecondition);
}

// Kills a child process at each step of a streaming atomic write in turn (MAGI_CRASH_AT=1,
// 2, ...): the file is always the old or the new contents, never a mix, and only the
// writer's temporary can be left behind.
TEST(FileTest, KilledAtAnyStepTheFileIsOldOrNew) {
  const std::string path = TempDir() + "/crash.bin";
  const std::string old_contents = "old", new_contents = "first half|second half";
  int steps_seen = 0;
  for (int n = 1; n < 20; ++n) {
    ASSERT_TRUE(WriteFileAtomically(path, old_contents).ok());
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      setenv("MAGI_CRASH_AT", std::to_string(n).c_str(), 1);
      unsetenv("MAGI_CRASH_RANK");
      CrashPointScope scope;
      absl::StatusOr<AtomicFileWriter> writer = AtomicFileWriter::Open(path);
      if (!writer.ok() || !writer->Append("first half|").ok() || !writer->Append("second half").ok() ||
          !writer->Commit().ok()) {
        _exit(3);
      }
      _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    std::string contents = *ReadFile(path);
    if (WIFEXITED(status)) {
      ASSERT_EQ(WEXITSTATUS(status), 0);
      EXPECT_EQ(contents, new_contents);
      steps_seen = n - 1;
      break;
    }
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << n;
    EXPECT_TRUE(contents == old_contents || contents == new_contents) << n << ": " << contents;
    // Before the rename the old file is there; after it, the new one.
    EXPECT_EQ(contents, n <= 5 ? old_contents : new_contents) << n;
    DIR* dir = opendir(TempDir().c_str());
    ASSERT_NE(dir, nullptr);
    while (dirent* entry = readdir(dir)) {
      std::string name = entry->d_name;
      if (name.find(".tmp.") != std::string::npos) std::remove((TempDir() + "/" + name).c_str());
    }
    closedir(dir);
  }
  // create, write, write, fsync, rename, fsync folder.
  EXPECT_EQ(steps_seen, 6);
}

}  // namespace
}  // namespace magi
