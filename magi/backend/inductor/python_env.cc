#include "magi/backend/inductor/python_env.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "magi/backend/inductor/sha256.h"
#include "magi/backend/inductor/subprocess.h"
#include "magi/base/file.h"

namespace magi::inductor {
namespace {

// "size mtime_ns" of `path` (following links), or "" if it does not exist.
std::string StatStamp(const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) return "";
  return absl::StrCat(info.st_size, " ", static_cast<int64_t>(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec);
}

absl::StatusOr<PythonTorch> ParseProbe(const std::string& python, const std::string& text) {
  PythonTorch torch;
  torch.python = python;
  bool seen_torch = false;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits('=', 1));
    if (kv.first == "torch") {
      torch.version = kv.second;
      seen_torch = true;
    } else if (kv.first == "torch_dir") {
      torch.torch_dir = kv.second;
    } else if (kv.first == "aoti") {
      torch.aoti = kv.second == "1";
    } else if (kv.first == "cuda" && !kv.second.empty()) {
      torch.cuda_archs = absl::StrSplit(kv.second, ',');
    }
  }
  if (!seen_torch) return absl::UnavailableError(absl::StrCat(python, " printed no torch version: ", text));
  return torch;
}

std::string Tail(const std::string& text, size_t max_chars) {
  std::string trimmed(absl::StripTrailingAsciiWhitespace(text));
  return trimmed.size() <= max_chars ? trimmed : "..." + trimmed.substr(trimmed.size() - max_chars);
}

}  // namespace

std::string PublicVersion(const std::string& version) {
  return std::string(version.substr(0, version.find_first_of("+a")));
}

std::string PythonOfTorchLibrary(const std::string& libtorch_library) {
  // PREFIX/lib/pythonX.Y/(site|dist)-packages/torch/lib/libtorch_cpu.so
  std::vector<std::string> parts = absl::StrSplit(libtorch_library, '/');
  for (size_t i = 1; i + 4 < parts.size(); ++i) {
    if (parts[i] != "lib" || !absl::StartsWith(parts[i + 1], "python") ||
        (parts[i + 2] != "site-packages" && parts[i + 2] != "dist-packages") || parts[i + 3] != "torch") {
      continue;
    }
    std::string prefix = absl::StrJoin(parts.begin(), parts.begin() + i, "/");
    const std::string& versioned = parts[i + 1];  // python3.11
    for (const std::string& candidate :
         {absl::StrCat(prefix, "/bin/", versioned), absl::StrCat(prefix, "/bin/python3"),
          absl::StrCat("/usr/bin/", versioned)}) {
      if (IsExecutableFile(candidate)) return candidate;
    }
  }
  return "";
}

PythonChoice ChoosePython(const std::string& configured, const std::string& libtorch_library) {
  if (!configured.empty()) return {configured, "the backend option python"};
  if (const char* env = std::getenv("MAGI_INDUCTOR_PYTHON"); env != nullptr && *env != '\0') {
    return {env, "$MAGI_INDUCTOR_PYTHON"};
  }
  std::string beside = PythonOfTorchLibrary(libtorch_library);
  if (!beside.empty()) return {beside, absl::StrCat("the Python of the LibTorch in use (", libtorch_library, ")")};
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
      std::string candidate = absl::StrCat(dir, "/python3");
      if (IsExecutableFile(candidate)) return {candidate, "python3 on PATH"};
    }
  }
  return {"", "no python3 on PATH, no $MAGI_INDUCTOR_PYTHON, no backend option python"};
}

absl::StatusOr<PythonTorch> ProbePython(const std::string& python, const std::string& script_path,
                                        const std::string& cache_dir) {
  if (python.empty()) return absl::UnavailableError("no Python to compile with");
  std::string record_path = absl::StrCat(cache_dir, "/probe/", Sha256Hex(python).substr(0, 24), ".txt");
  std::string python_stamp = StatStamp(python);
  if (python_stamp.empty()) return absl::UnavailableError(absl::StrCat("Python ", python, " does not exist"));
  // A record: "python PATH", "stamp ...", "version_py PATH", "version_py_stamp ...", then the probe's lines.
  if (absl::StatusOr<std::string> record = ReadFile(record_path); record.ok()) {
    std::vector<std::string> lines = absl::StrSplit(*record, absl::MaxSplits('\n', 4));
    if (lines.size() == 5 && lines[0] == "python " + python && lines[1] == "stamp " + python_stamp &&
        absl::StartsWith(lines[2], "version_py ") &&
        lines[3] == "version_py_stamp " + StatStamp(lines[2].substr(std::string("version_py ").size()))) {
      absl::StatusOr<PythonTorch> cached = ParseProbe(python, lines[4]);
      if (cached.ok()) return cached;
    }
  }
  std::string out = absl::StrCat(cache_dir, "/probe/.probe.", getpid(), ".out");
  std::string err = absl::StrCat(cache_dir, "/probe/.probe.", getpid(), ".err");
  unlink(out.c_str());
  unlink(err.c_str());
  absl::StatusOr<Process> process = Process::Start({python, script_path, "--probe"}, {}, out, err);
  if (!process.ok()) return absl::UnavailableError(process.status().message());
  absl::StatusOr<int> code = process->Wait();
  std::string stdout_text = ReadFile(out).value_or("");
  std::string stderr_text = ReadFile(err).value_or("");
  unlink(out.c_str());
  unlink(err.c_str());
  if (!code.ok()) return absl::UnavailableError(absl::StrCat(python, " --probe: ", code.status().message()));
  if (*code != 0) {
    return absl::UnavailableError(
        absl::StrCat(python, " cannot import torch (exit ", *code, "): ", Tail(stderr_text, 600)));
  }
  absl::StatusOr<PythonTorch> torch = ParseProbe(python, stdout_text);
  if (!torch.ok()) return torch.status();
  std::string version_py = torch->torch_dir + "/version.py";
  std::string record = absl::StrCat("python ", python, "\nstamp ", python_stamp, "\nversion_py ", version_py,
                                    "\nversion_py_stamp ", StatStamp(version_py), "\n", stdout_text);
  (void)WriteFileAtomically(record_path, record);  // a cache: failing to keep it costs only time
  return torch;
}

}  // namespace magi::inductor
