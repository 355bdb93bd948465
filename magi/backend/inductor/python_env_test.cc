// Finding and probing the Python that compiles partitions, with stand-in interpreters (shell
// scripts that print what aoti_compile.py --probe prints), so no PyTorch is needed.
#include "magi/backend/inductor/python_env.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "magi/base/file.h"
#include "magi/base/gtest_printers.h"

namespace magi::inductor {
namespace {

std::string TempDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(root != nullptr ? root : "/tmp", "/", name);
  std::string command = absl::StrCat("rm -rf '", dir, "' && mkdir -p '", dir, "'");
  EXPECT_EQ(std::system(command.c_str()), 0);
  return dir;
}

void WriteExecutable(const std::string& path, const std::string& text) {
  ASSERT_TRUE(WriteFileAtomically(path, text).ok());
  ASSERT_EQ(chmod(path.c_str(), 0755), 0);
}

TEST(PythonEnvTest, PublicVersion) {
  EXPECT_EQ(PublicVersion("2.12.1+cu130"), "2.12.1");
  EXPECT_EQ(PublicVersion("2.12.1"), "2.12.1");
  EXPECT_EQ(PublicVersion("1.13.0a0+git49444c3"), "1.13.0");
}

TEST(PythonEnvTest, PythonBesideTheTorchLibrary) {
  std::string venv = TempDir("venv");
  ASSERT_EQ(std::system(absl::StrCat("mkdir -p ", venv, "/bin ", venv, "/lib/python3.99/site-packages/torch/lib").c_str()), 0);
  std::string library = venv + "/lib/python3.99/site-packages/torch/lib/libtorch_cpu.so";
  EXPECT_EQ(PythonOfTorchLibrary(library), "");  // no interpreter there yet
  WriteExecutable(venv + "/bin/python3", "#!/bin/sh\n");
  EXPECT_EQ(PythonOfTorchLibrary(library), venv + "/bin/python3");
  WriteExecutable(venv + "/bin/python3.99", "#!/bin/sh\n");
  EXPECT_EQ(PythonOfTorchLibrary(library), venv + "/bin/python3.99");
  EXPECT_EQ(PythonOfTorchLibrary("/usr/lib/x86_64-linux-gnu/libtorch_cpu.so"), "");  // Debian's: no Python package

  PythonChoice choice = ChoosePython("", library);
  if (std::getenv("MAGI_INDUCTOR_PYTHON") == nullptr) {
    EXPECT_EQ(choice.path, venv + "/bin/python3.99");
    EXPECT_NE(choice.how.find("the Python of the LibTorch in use"), std::string::npos) << choice.how;
  }
  EXPECT_EQ(ChoosePython("/opt/py", library).path, "/opt/py");
  ASSERT_EQ(setenv("MAGI_INDUCTOR_PYTHON", "/from/env", 1), 0);
  EXPECT_EQ(ChoosePython("", library).path, "/from/env");
  EXPECT_EQ(ChoosePython("/opt/py", library).path, "/opt/py");  // the option wins
  unsetenv("MAGI_INDUCTOR_PYTHON");
}

TEST(PythonEnvTest, ProbeParsesAndIsCachedUntilTorchChanges) {
  std::string dir = TempDir("probe");
  std::string torch_dir = dir + "/site/torch";
  ASSERT_EQ(std::system(absl::StrCat("mkdir -p ", torch_dir, " ", dir, "/cache/probe").c_str()), 0);
  ASSERT_TRUE(WriteFileAtomically(torch_dir + "/version.py", "__version__ = '2.12.1'\n").ok());
  std::string counter = dir + "/runs";
  std::string python = dir + "/python3";
  // Counts its runs; checks it was given the script and --probe.
  WriteExecutable(python, absl::StrCat("#!/bin/sh\n[ \"$2\" = --probe ] || exit 9\necho x >> ", counter,
                                       "\necho torch=2.12.1+cu130\necho torch_dir=", torch_dir,
                                       "\necho aoti=1\necho cuda=sm_90,sm_80\n"));
  absl::StatusOr<PythonTorch> torch = ProbePython(python, "/script.py", dir + "/cache");
  ASSERT_TRUE(torch.ok()) << torch.status();
  EXPECT_EQ(torch->version, "2.12.1+cu130");
  EXPECT_EQ(torch->torch_dir, torch_dir);
  EXPECT_TRUE(torch->aoti);
  EXPECT_EQ(torch->cuda_archs, (std::vector<std::string>{"sm_90", "sm_80"}));
  EXPECT_EQ(ReadFile(counter).value_or(""), "x\n");

  torch = ProbePython(python, "/script.py", dir + "/cache");  // from the record: not run again
  ASSERT_TRUE(torch.ok()) << torch.status();
  EXPECT_EQ(torch->cuda_archs.size(), 2u);
  EXPECT_EQ(ReadFile(counter).value_or(""), "x\n");

  // torch was reinstalled (version.py changed): probed again.
  ASSERT_TRUE(WriteFileAtomically(torch_dir + "/version.py", "__version__ = '2.12.2'  # a longer file\n").ok());
  torch = ProbePython(python, "/script.py", dir + "/cache");
  ASSERT_TRUE(torch.ok()) << torch.status();
  EXPECT_EQ(ReadFile(counter).value_or(""), "x\nx\n");
}

TEST(PythonEnvTest, ProbeFailuresAreUnavailableWithTheReason) {
  std::string dir = TempDir("probe_fail");
  ASSERT_EQ(std::system(absl::StrCat("mkdir -p ", dir, "/cache/probe").c_str()), 0);
  std::string python = dir + "/python3";
  WriteExecutable(python, "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n");
  absl::StatusOr<PythonTorch> torch = ProbePython(python, "/script.py", dir + "/cache");
  EXPECT_EQ(torch.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(torch.status().message().find("cannot import torch (exit 1): ModuleNotFoundError: No module named 'torch'"),
            std::string::npos)
      << torch.status();
  torch = ProbePython(dir + "/no_such_python", "/script.py", dir + "/cache");
  EXPECT_EQ(torch.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(torch.status().message().find("does not exist"), std::string::npos) << torch.status();
}

}  // namespace
}  // namespace magi::inductor
