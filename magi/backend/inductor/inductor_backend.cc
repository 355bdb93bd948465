#include "magi/backend/inductor/inductor_backend.h"

#include <ATen/ATen.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "magi/analysis/op_traits.h"
#include "magi/backend/inductor/aoti_compile_script.h"
#include "magi/backend/inductor/fx_program.h"
#include "magi/backend/inductor/inductor_executable.h"
#include "magi/backend/inductor/sha256.h"
#include "magi/backend/inductor/subprocess.h"
#include "magi/base/file.h"
#include "magi/base/status_macros.h"
#include "magi/compat/aoti_package.h"
#include "magi/compat/torch_compat.h"
#include "magi/ir/collectives.h"

namespace magi::inductor {
namespace {

// Bumped whenever what determines a package changes in a way the key does not see.
constexpr int kPackageKeyVersion = 1;
constexpr int kMaxDefaultJobs = 8;
constexpr absl::string_view kConfigPrefix = "config.";

// A config.NAME option as the job file can carry it (tab-separated lines): a dotted Python
// identifier and a value without whitespace. Whether torch has the setting, and of which
// type, aoti_compile.py checks against the torch that compiles.
absl::Status CheckInductorConfig(absl::string_view name, absl::string_view value) {
  bool name_ok = !name.empty() && name.front() != '.' && name.back() != '.' && !absl::StrContains(name, "..") &&
                 !absl::ascii_isdigit(static_cast<unsigned char>(name.front()));
  for (char c : name) name_ok = name_ok && (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.');
  if (!name_ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inductor: 'config.", name, "' does not name an Inductor setting (config.NAME, e.g. config.combo_kernels)"));
  }
  bool value_ok = !value.empty();
  for (char c : value) value_ok = value_ok && !absl::ascii_isspace(static_cast<unsigned char>(c));
  if (!value_ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("inductor: config.", name, " needs a value without spaces, got '", value, "'"));
  }
  return absl::OkStatus();
}

absl::Status MakeDirectories(const std::string& path) {
  std::string prefix;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    prefix += std::string(part);
    if (!prefix.empty() && mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::PermissionDeniedError(absl::StrCat("cannot create folder ", prefix, ": ", strerror(errno)));
    }
    prefix += "/";
  }
  return absl::OkStatus();
}

bool FileExists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

// The file libtorch_cpu was loaded from (symlinks resolved), or "".
std::string LibTorchLibrary() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&at::globalContext), &info) == 0 || info.dli_fname == nullptr) return "";
  char resolved[PATH_MAX];
  if (realpath(info.dli_fname, resolved) == nullptr) return info.dli_fname;
  return resolved;
}

std::string DefaultCacheDir() {
  if (const char* dir = std::getenv("MAGI_INDUCTOR_CACHE"); dir != nullptr && *dir != '\0') return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return absl::StrCat(xdg, "/magi/inductor");
  }
  const char* home = std::getenv("HOME");
  return absl::StrCat(home != nullptr && *home != '\0' ? home : "/tmp", "/.cache/magi/inductor");
}

// What the generated CPU code may assume: the host's instruction-set flags.
std::string CpuTarget() {
  static const std::string* target = [] {
    std::string flags;
    if (absl::StatusOr<std::string> cpuinfo = ReadFile("/proc/cpuinfo"); cpuinfo.ok()) {
      for (absl::string_view line : absl::StrSplit(*cpuinfo, '\n')) {
        if (absl::StartsWith(line, "flags")) {
          flags = std::string(line);
          break;
        }
      }
    }
    return new std::string(absl::StrCat("cpu flags ", Sha256Hex(flags).substr(0, 16)));
  }();
  return *target;
}

bool IsComplex(DType dtype) {
  return dtype == DType::kComplex32 || dtype == DType::kComplex64 || dtype == DType::kComplex128;
}

// The devices of `graph`'s inputs and outputs.
std::vector<Device> DevicesOf(const Graph& graph) {
  std::vector<Device> devices;
  auto add = [&](const Value* value) {
    if (!value->type().is_tensor()) return;
    const Device& device = value->type().tensor().device;
    for (const Device& seen : devices) {
      if (seen == device) return;
    }
    devices.push_back(device);
  };
  for (const Value* input : graph.inputs()) add(input);
  for (const GraphOutput& output : graph.outputs()) add(output.value);
  return devices;
}

// The CUDA architecture the Python's torch reports for `device`, or "".
std::string CudaArch(const PythonTorch& torch, const Device& device) {
  int index = device.index < 0 ? 0 : device.index;
  return index < static_cast<int>(torch.cuda_archs.size()) ? torch.cuda_archs[index] : "";
}

absl::StatusOr<std::string> TargetOf(const Graph& graph, const PythonTorch& torch) {
  std::vector<std::string> targets;
  for (const Device& device : DevicesOf(graph)) {
    if (device.type == DeviceType::kCpu) {
      targets.push_back(CpuTarget());
    } else if (device.type == DeviceType::kCuda) {
      std::string arch = CudaArch(torch, device);
      if (arch.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(torch.python, "'s torch sees no CUDA device ",
                                                          device.ToString()));
      }
      targets.push_back(absl::StrCat(device.ToString(), " ", arch));
    } else {
      return absl::InvalidArgumentError(absl::StrCat("tensors on ", device.ToString()));
    }
  }
  return absl::StrJoin(targets, "; ");
}

std::string Seconds(double s) { return absl::StrFormat("%.1f s", s); }

struct CompileItem {
  const Graph* graph = nullptr;
  FxProgram program;
  std::string key;
  std::string package;
  std::string program_path;
  std::string result_path;
  bool from_cache = false;
  bool compile_here = false;  // the first of its key in this call
  std::string error;
  double compile_seconds = 0;
};

// Reads a result file written by aoti_compile.py.
void ReadResult(CompileItem& item, const std::string& log) {
  absl::StatusOr<std::string> text = ReadFile(item.result_path);
  if (!text.ok()) {
    item.error = absl::StrCat("the compile process wrote no result (it crashed or was killed; see ", log, ")");
    return;
  }
  std::vector<std::string> lines = absl::StrSplit(*text, '\n');
  if (lines.empty() || lines[0] != "ok") {
    item.error = absl::StrCat("AOTInductor failed: ", lines.size() > 1 ? lines[1] : *text, " (log: ", log, ")");
    return;
  }
  double export_s = 0, compile_s = 0;
  if (lines.size() > 2 && absl::SimpleAtod(lines[1], &export_s) && absl::SimpleAtod(lines[2], &compile_s)) {
    item.compile_seconds = export_s + compile_s;
  }
  if (!FileExists(item.package)) item.error = absl::StrCat("the compile reported success but wrote no ", item.package);
}

}  // namespace

absl::StatusOr<InductorOptions> InductorOptions::FromComponentOptions(const ComponentOptions& options) {
  InductorOptions parsed;
  for (const auto& [key, value] : options) {
    if (key == "python") {
      parsed.python = value;
    } else if (key == "cache_dir") {
      parsed.cache_dir = value;
    } else if (key == "jobs") {
      if (!absl::SimpleAtoi(value, &parsed.jobs) || parsed.jobs < 0) {
        return absl::InvalidArgumentError(absl::StrCat("inductor: jobs must be a count >= 0, got '", value, "'"));
      }
    } else if (key == "compile_threads") {
      if (!absl::SimpleAtoi(value, &parsed.compile_threads) || parsed.compile_threads < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("inductor: compile_threads must be a count >= 0, got '", value, "'"));
      }
    } else if (key == "precompile_headers") {
      if (value != "true" && value != "false") {
        return absl::InvalidArgumentError(
            absl::StrCat("inductor: precompile_headers is true or false, got '", value, "'"));
      }
      parsed.precompile_headers = value == "true";
    } else if (key == "single_threaded") {
      if (value != "true" && value != "false") {
        return absl::InvalidArgumentError(absl::StrCat("inductor: single_threaded is true or false, got '", value, "'"));
      }
      parsed.single_threaded = value == "true";
    } else if (absl::StartsWith(key, kConfigPrefix)) {
      MAGI_RETURN_IF_ERROR(CheckInductorConfig(key.substr(kConfigPrefix.size()), value));
      parsed.inductor_configs[key.substr(kConfigPrefix.size())] = value;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("inductor: unknown option '", key,
                       "' (options: python, cache_dir, jobs, compile_threads, precompile_headers, single_threaded, "
                       "config.NAME)"));
    }
  }
  return parsed;
}

bool InductorBackend::UpdatesDonatedInputInPlace(const Node& node) const {
  // Inductor writes an index_put (without accumulation) over a mutated input in place,
  // fused into the kernel that makes the values; a functional scatter it would copy whole.
  if (node.op() != "aten::index_put" || !WhyInductorDeclines(node).empty()) return false;
  // index_put(self, indices, values, accumulate): by name where the capture named it, else
  // by position (IR text names only keyword arguments).
  const Attribute* accumulate = node.FindArg("accumulate");
  if (accumulate == nullptr && node.args().size() == 4) accumulate = &node.args()[3].value;
  return accumulate != nullptr && accumulate->kind() == AttrKind::kBool && !accumulate->as_bool();
}

std::string WhyInductorDeclines(const Node& node) {
  if (IsCommunication(node.op())) return "a collective or wait: stays with the primary backend, which runs the schedule";
  if (node.op_namespace() == "magi") return "a magi:: op: stays with the primary backend";
  OpTraits traits = GetOpTraits(node.op());
  if (traits.random) {
    return "a random op: the primary backend draws it from the generator state the step replays";
  }
  if (traits.in_place || traits.side_effects) return "writes memory in place (partitions return new tensors)";
  if (traits.data_dependent) return "data-dependent: reads tensor values on the host";
  if (node.op() == "aten::_to_copy" && !node.results().empty() && node.result(0)->has_uses()) {
    // A gradient's cast to the reduction dtype, read only by reduce-scatters or
    // all-reduces: left at the partition's edge, where the runtime can fold it into what
    // reads it (nccl_stream over one rank: into the multi-tensor AdamW), and the
    // partition returns the gradient in its compute dtype.
    bool only_into_reductions = true;
    for (const Use& use : node.result(0)->uses()) {
      std::optional<CollectiveKind> kind = GetCollectiveKind(use.user->op());
      only_into_reductions = only_into_reductions && kind.has_value() &&
                             (*kind == CollectiveKind::kReduceScatter || *kind == CollectiveKind::kAllReduce);
    }
    if (only_into_reductions) {
      return "a cast read only by gradient reductions: the primary backend may fold it into them or their reader";
    }
  }
  std::optional<Device> device;
  auto check = [&](const Value* value) -> std::string {
    if (!value->type().is_tensor()) return absl::StrCat("%", value->name(), " is not a tensor");
    const TensorType& type = value->type().tensor();
    if (type.HasDynamicDims()) return absl::StrCat("%", value->name(), " has a dynamic shape");
    if (IsComplex(type.dtype)) return absl::StrCat("%", value->name(), " is complex (Inductor has no complex kernels)");
    if (type.device.type == DeviceType::kMeta) return absl::StrCat("%", value->name(), " is on the meta device");
    if (!device) {
      device = type.device;
    } else if (*device != type.device) {
      return absl::StrCat("mixes devices ", device->ToString(), " and ", type.device.ToString());
    }
    return "";
  };
  for (const Value* operand : node.operands()) {
    if (std::string why = check(operand); !why.empty()) return why;
  }
  for (const Value* result : node.results()) {
    if (std::string why = check(result); !why.empty()) return why;
  }
  return WhyNotFxExpressible(node);
}

std::string InductorBackend::CacheDir() const {
  return options_.cache_dir.empty() ? DefaultCacheDir() : options_.cache_dir;
}

const InductorBackend::Environment& InductorBackend::Env() const {
  std::call_once(env_once_, [this] {
    Environment env;
    env.cache_dir = CacheDir();
    auto fail = [&](absl::Status status) {
      env.status = status;
      env_ = std::move(env);
    };
    if (!compat::AotInductorAvailable()) {
      return fail(absl::UnavailableError(absl::StrCat(
          "LibTorch ", TORCH_VERSION, " has no AOTInductor (Magi uses it from LibTorch 2.11 on: build with "
          "MAGI_TORCH=2.12 tools/bazel, see docs/torch2.md)")));
    }
    for (const char* sub : {"packages", "probe", "jobs", "logs", "tmp", "torchinductor"}) {
      if (absl::Status made = MakeDirectories(absl::StrCat(env.cache_dir, "/", sub)); !made.ok()) {
        return fail(absl::UnavailableError(absl::StrCat("cache folder ", env.cache_dir, ": ", made.message())));
      }
    }
    env.script = absl::StrCat(env.cache_dir, "/aoti_compile-", Sha256Hex(kAotiCompileScript).substr(0, 12), ".py");
    if (!FileExists(env.script)) {
      if (absl::Status written = WriteFileAtomically(env.script, kAotiCompileScript); !written.ok()) {
        return fail(absl::UnavailableError(absl::StrCat("cannot write the compile script: ", written.message())));
      }
    }
    PythonChoice choice = ChoosePython(options_.python, LibTorchLibrary());
    env.python_how = choice.how;
    if (choice.path.empty()) {
      return fail(absl::UnavailableError(absl::StrCat("no Python to compile partitions with (", choice.how, ")")));
    }
    absl::StatusOr<PythonTorch> torch = ProbePython(choice.path, env.script, env.cache_dir);
    if (!torch.ok()) {
      return fail(absl::UnavailableError(
          absl::StrCat("no suitable Python (", choice.how, "): ", torch.status().message())));
    }
    if (PublicVersion(torch->version) != PublicVersion(TORCH_VERSION)) {
      return fail(absl::UnavailableError(absl::StrCat(
          choice.path, " (", choice.how, ") has torch ", torch->version, " but this process runs LibTorch ",
          TORCH_VERSION, ": packages must come from the same version (set MAGI_INDUCTOR_PYTHON or the option python)")));
    }
    if (!torch->aoti) {
      return fail(absl::UnavailableError(absl::StrCat(choice.path, "'s torch ", torch->version,
                                                      " has no torch._inductor / torch.export")));
    }
    env.torch = *std::move(torch);
    env_ = std::move(env);
  });
  return *env_;
}

absl::Status InductorBackend::Availability() const { return Env().status; }

Capability InductorBackend::GetCapability(const Module& module, const Graph& graph) const {
  Capability capability;
  const Environment& env = Env();
  if (!env.status.ok()) {
    std::string reason = absl::StrCat("AOTInductor is unavailable: ", env.status.message());
    for (const Node* node : graph.nodes()) capability.unsupported.emplace_back(node, reason);
    return capability;
  }
  for (const Node* node : graph.nodes()) {
    std::string reason = WhyInductorDeclines(*node);
    if (reason.empty()) {
      for (const Value* result : node->results()) {
        const Device& device = result->type().tensor().device;
        if (device.type == DeviceType::kCuda && CudaArch(env.torch, device).empty()) {
          reason = absl::StrCat(env.torch.python, "'s torch sees no CUDA device ", device.ToString());
          break;
        }
      }
    }
    if (!reason.empty()) capability.unsupported.emplace_back(node, std::move(reason));
  }
  return capability;
}

absl::StatusOr<std::unique_ptr<Executable>> InductorBackend::Compile(const Module& module, const Graph& graph,
                                                                     const CompileContext& context) const {
  if (!context.callees.empty()) return absl::InvalidArgumentError("the inductor backend calls no partitions");
  std::vector<absl::StatusOr<std::unique_ptr<Executable>>> results = CompileAll(module, {&graph}, context);
  return std::move(results[0]);
}

std::vector<absl::StatusOr<std::unique_ptr<Executable>>> InductorBackend::CompileAll(
    const Module& module, const std::vector<const Graph*>& graphs, const CompileContext& context) const {
  std::vector<absl::StatusOr<std::unique_ptr<Executable>>> results;
  const Environment& env = Env();
  if (!env.status.ok()) {
    for (size_t i = 0; i < graphs.size(); ++i) {
      results.push_back(absl::UnavailableError(absl::StrCat("AOTInductor is unavailable: ", env.status.message())));
    }
    return results;
  }
  auto start = std::chrono::steady_clock::now();
  // This compile's job, result and claim files, in a folder of its own: the cache folder
  // may be shared by processes whose pids collide (ranks in containers, NFS homes).
  std::string work_dir;
  auto make_work_dir = [&]() -> absl::Status {
    if (!work_dir.empty()) return absl::OkStatus();
    char host[256] = "host";
    gethostname(host, sizeof(host) - 1);
    std::string pattern = absl::StrCat(env.cache_dir, "/jobs/", host, "-", getpid(), "-XXXXXX");
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (mkdtemp(buffer.data()) == nullptr) {
      return absl::PermissionDeniedError(absl::StrCat("cannot create a folder like ", pattern, ": ", strerror(errno)));
    }
    work_dir = buffer.data();
    return absl::OkStatus();
  };
  // Inductor settings: in every package's key (none: the key as before they existed) and
  // in every worker's job.
  std::string configs_key, configs_job;
  for (const auto& [name, value] : options_.inductor_configs) {
    absl::StrAppend(&configs_key, "inductor-config ", name, " ", value, "\n");
    absl::StrAppend(&configs_job, "config\t", name, "\t", value, "\n");
  }
  std::vector<CompileItem> items(graphs.size());
  std::map<std::string, size_t> first_of_key;
  for (size_t i = 0; i < graphs.size(); ++i) {
    CompileItem& item = items[i];
    item.graph = graphs[i];
    absl::StatusOr<FxProgram> program = EmitFxProgram(*item.graph);
    absl::StatusOr<FxProgram> canonical = EmitFxProgram(*item.graph, {/*canonical=*/true});
    absl::StatusOr<std::string> target = TargetOf(*item.graph, env.torch);
    if (!program.ok() || !canonical.ok() || !target.ok()) {
      item.error = std::string(!program.ok() ? program.status().message()
                               : !canonical.ok() ? canonical.status().message()
                                                 : target.status().message());
      continue;
    }
    item.program = *std::move(program);
    item.key = Sha256Hex(absl::StrCat("magi-inductor-package ", kPackageKeyVersion, "\nfx-format ", kFxProgramFormat,
                                      "\nlibtorch ", TORCH_VERSION, "\npython-torch ", env.torch.version, "\ntarget ",
                                      *target, "\nprogram ", Sha256Hex(canonical->source), "\n",
                                      // A package compiled in deterministic mode is another package.
                                      context.deterministic ? "deterministic 1\n" : "", configs_key));
    std::string stem = absl::StrCat(env.cache_dir, "/packages/", item.key);
    item.package = stem + ".pt2";
    item.program_path = stem + ".py";
    item.from_cache = FileExists(item.package);
    if (item.from_cache) continue;
    if (first_of_key.emplace(item.key, i).second) {
      item.compile_here = true;
      absl::Status written = make_work_dir();
      if (written.ok()) {
        item.result_path = absl::StrCat(work_dir, "/", item.key, ".result");
        written = WriteFileAtomically(item.program_path, item.program.source);
      }
      if (!written.ok()) {
        item.error = std::string(written.message());
        item.compile_here = false;
      }
    }
  }

  // Compile the misses in `jobs` Python processes that share one task list, largest
  // first (longest-processing-time order): each takes the next unclaimed task as it
  // finishes one (aoti_compile.py), so the cold time is close to the largest partition's
  // or the total work / jobs, whichever is longer.
  std::vector<size_t> misses;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].compile_here) misses.push_back(i);
  }
  std::stable_sort(misses.begin(), misses.end(),
                   [&](size_t a, size_t b) { return items[a].program.num_ops > items[b].program.num_ops; });
  double cold_seconds = 0;
  std::string log;
  if (!misses.empty()) {
    int jobs = options_.jobs > 0 ? options_.jobs
                                 : std::min<int>(kMaxDefaultJobs, std::max(1u, std::thread::hardware_concurrency()));
    jobs = std::min<int>(jobs, static_cast<int>(misses.size()));
    std::time_t now = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
    log = absl::StrCat(env.cache_dir, "/logs/", stamp, "-", getpid(), ".log");
    std::fprintf(stderr,
                 "magi: inductor: compiling %zu partition(s) with AOTInductor (torch %s, %s; %d process(es)); "
                 "log %s\n",
                 misses.size(), env.torch.version.c_str(), env.torch.python.c_str(), jobs, log.c_str());
    auto compile_start = std::chrono::steady_clock::now();
    // Inductor's own pool of compile workers (Triton kernels) per process: the machine's
    // threads shared among the processes, instead of every process starting one as large
    // as the machine.
    const int hardware = std::max(1u, std::thread::hardware_concurrency());
    const int threads_per_job = options_.compile_threads > 0 ? options_.compile_threads : std::max(1, hardware / jobs);
    std::string tasks;
    for (size_t i : misses) {
      absl::StrAppend(&tasks, "task\t", items[i].program_path, "\t", items[i].package, "\t", items[i].result_path,
                      "\t@", items[i].graph->name(), " (", items[i].program.num_ops, " ops)\n");
    }
    std::vector<Process> processes;
    for (int w = 0; w < jobs; ++w) {
      std::string job = absl::StrCat("magi-aoti-job\t1\ntorch\t", TORCH_VERSION, "\nworker\t", w + 1, "/", jobs, "\n",
                                     context.deterministic ? "deterministic\t1\n" : "",
                                     options_.precompile_headers ? "" : "precompile_headers\t0\n", configs_job,
                                     tasks);
      std::string job_path = absl::StrCat(work_dir, "/worker-", w + 1, ".job");
      absl::Status written = WriteFileAtomically(job_path, job);
      absl::StatusOr<Process> process =
          written.ok() ? Process::Start({env.torch.python, env.script, job_path},
                                        {{"TORCHINDUCTOR_CACHE_DIR", env.cache_dir + "/torchinductor"},
                                         {"TORCHINDUCTOR_COMPILE_THREADS", absl::StrCat(threads_per_job)},
                                         {"TMPDIR", env.cache_dir + "/tmp"},
                                         {"MAGI_AOTI_LOG", log},
                                         {"PYTHONUNBUFFERED", "1"}},
                                        "", "")
                       : absl::StatusOr<Process>(written);
      if (!process.ok()) {  // the other workers take its share; none started: every task fails
        if (w == jobs - 1 && processes.empty()) {
          for (size_t i : misses) items[i].error = std::string(process.status().message());
        }
        continue;
      }
      processes.push_back(*std::move(process));
    }
    for (Process& process : processes) (void)process.Wait();  // outcomes are in the result files
    cold_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - compile_start).count();
    for (size_t i : misses) {
      if (items[i].error.empty()) ReadResult(items[i], log);
      unlink(items[i].result_path.c_str());
      unlink((items[i].result_path + ".claim").c_str());
    }
    for (int w = 0; w < jobs; ++w) unlink(absl::StrCat(work_dir, "/worker-", w + 1, ".job").c_str());
    rmdir(work_dir.c_str());
  }

  // Load every package; identical partitions in one call share a compile.
  auto load_start = std::chrono::steady_clock::now();
  int compiled = 0, cached = 0, failed = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    CompileItem& item = items[i];
    if (item.error.empty() && !item.from_cache && !item.compile_here) {
      const CompileItem& first = items[first_of_key.at(item.key)];
      item.error = first.error;
    }
    if (!item.error.empty()) {
      ++failed;
      results.push_back(absl::InternalError(absl::StrCat("@", item.graph->name(), ": ", item.error)));
      continue;
    }
    compat::AotiOptions aoti;
    aoti.run_single_threaded = options_.single_threaded;
    std::vector<std::string> input_names;
    for (const Value* input : item.graph->inputs()) {
      aoti.input_types.push_back(input->type().tensor());
      input_names.push_back(input->name());
    }
    for (const Device& device : DevicesOf(*item.graph)) {
      if (device.type == DeviceType::kCuda) aoti.device_index = device.index;
    }
    absl::StatusOr<std::unique_ptr<compat::AotiPackage>> package = compat::AotiPackage::Load(item.package, aoti);
    if (!package.ok()) {
      ++failed;
      results.push_back(absl::InternalError(absl::StrCat("@", item.graph->name(), ": ", package.status().message())));
      continue;
    }
    PackageInfo info;
    info.graph = item.graph->name();
    info.package_path = item.package;
    info.program_path = item.program_path;
    info.from_cache = item.from_cache;
    info.compile_seconds = item.compile_seconds;
    info.num_ops = item.program.num_ops;
    item.from_cache ? ++cached : ++compiled;
    std::vector<int> updated_inputs;
    absl::Span<Value* const> graph_inputs = item.graph->inputs();
    for (const GraphOutput& output : item.graph->outputs()) {
      updated_inputs.push_back(output.aliases == nullptr ? -1
                                                         : static_cast<int>(std::find(graph_inputs.begin(),
                                                                                      graph_inputs.end(), output.aliases) -
                                                                            graph_inputs.begin()));
    }
    results.push_back(std::unique_ptr<Executable>(
        new InductorExecutable(*std::move(package), std::move(aoti.input_types), std::move(input_names),
                               std::move(updated_inputs), std::move(info))));
  }
  double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr,
               "magi: inductor: %zu partition(s): %d compiled in %s (cold), %d from the cache; %d failed; loading "
               "took %s, %s in all; cache %s\n",
               items.size(), compiled, Seconds(cold_seconds).c_str(), cached, failed, Seconds(load_seconds).c_str(),
               Seconds(total).c_str(), env.cache_dir.c_str());
  (void)module;
  return results;
}

MAGI_REGISTER(Backend, "inductor", [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<Backend>> {
  absl::StatusOr<InductorOptions> parsed = InductorOptions::FromComponentOptions(options);
  if (!parsed.ok()) return parsed.status();
  return std::make_unique<InductorBackend>(*std::move(parsed));
});

}  // namespace magi::inductor
