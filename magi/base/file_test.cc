#include "magi/base/file.h"

#include <dirent.h>

#include <cstdlib>

#include "gtest/gtest.h"
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

}  // namespace
}  // namespace magi
