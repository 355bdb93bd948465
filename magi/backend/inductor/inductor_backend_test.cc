// What the inductor backend takes and declines, and what it says where it cannot work. The
// compiles themselves are tested end to end in //tests/partitioning:inductor_step_test.
#include "magi/backend/inductor/inductor_backend.h"

#include <sys/stat.h>

#include <cstdlib>
#include <map>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "magi/backend/inductor/inductor_executable.h"
#include "magi/base/file.h"
#include "magi/base/gtest_printers.h"
#include "magi/compat/aoti_package.h"
#include "magi/compat/torch_compat.h"
#include "magi/ir/parser.h"

namespace magi::inductor {
namespace {

std::string TempDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(root != nullptr ? root : "/tmp", "/", name);
  EXPECT_EQ(std::system(absl::StrCat("rm -rf '", dir, "' && mkdir -p '", dir, "'").c_str()), 0);
  return dir;
}

constexpr char kStep[] = R"(module @m {
  process_group @dp {axis = "dp", size = 2}
  graph @step {
    input %x: f32[4,8]
    input %w.shard: f32[4,8] {role = param}
    input %z: c64[4]
    input %zh: c32[4]
    input %d: f32[?,8]
    input %g: f32[4,8]@cuda:0
    %f = magi::all_gather_start([%w.shard], group = "dp") : future<f32[8,8]>
    %w = magi::wait(%f) : f32[8,8]
    %h = aten::mm(%x, %w) : f32[4,8]
    %r = aten::dropout(%h, 0.1, true) : f32[4,8]
    %a = aten::add_.Tensor(%h, %h, alpha = 1) : f32[4,8]
    %n = aten::nonzero(%h) : i64[?,2]
    %zz = aten::mul.Tensor(%z, %z) : c64[4]
    %zzh = aten::mul.Tensor(%zh, %zh) : c32[4]
    %dd = aten::relu(%d) : f32[?,8]
    %mixed = aten::add.Tensor(%h, %g, alpha = 1) : f32[4,8]@cuda:0
    %gone = aten::no_such_op(%h) : f32[4,8]
    %hb = aten::_to_copy(%h, dtype = dtype(bf16)) : bf16[4,8]
    %hf = aten::_to_copy(%hb, dtype = dtype(f32)) : f32[4,8]
    %rs = magi::reduce_scatter_start([%hf], group = "dp", reduce_op = "avg") : future<f32[2,8]>
    %hs = magi::wait(%rs) : f32[2,8]
    %ok = aten::gelu(%h, approximate = "tanh") : f32[4,8]
    output y = %ok
  }
}
)";

TEST(InductorBackendTest, DeclinesWithReasons) {
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok()) << module.status();
  std::map<std::string, std::string> why;
  for (const Node* node : (*module)->FindGraph("step")->nodes()) why[node->result(0)->name()] = WhyInductorDeclines(*node);
  EXPECT_EQ(why["f"], "a collective or wait: stays with the primary backend, which runs the schedule");
  EXPECT_EQ(why["w"], "a collective or wait: stays with the primary backend, which runs the schedule");
  EXPECT_EQ(why["h"], "");
  EXPECT_EQ(why["r"], "a random op: the primary backend draws it from the generator state the step replays");
  EXPECT_EQ(why["a"], "writes memory in place (partitions return new tensors)");
  EXPECT_EQ(why["n"], "data-dependent: reads tensor values on the host");
  EXPECT_EQ(why["zz"], "%z is complex (Inductor has no complex kernels)");
  EXPECT_EQ(why["zzh"], "%zh is complex (Inductor has no complex kernels)");
  EXPECT_EQ(why["dd"], "%d has a dynamic shape");
  EXPECT_EQ(why["mixed"], "mixes devices cpu and cuda:0");
  EXPECT_NE(why["gone"].find("has no operator aten::no_such_op"), std::string::npos) << why["gone"];
  EXPECT_EQ(why["ok"], "");
  EXPECT_EQ(why["hb"], "");  // read by a cast, not a reduction
  EXPECT_EQ(why["hf"],
            "a cast read only by gradient reductions: the primary backend may fold it into them or their reader");
}

TEST(InductorBackendTest, Options) {
  absl::StatusOr<InductorOptions> options =
      InductorOptions::FromComponentOptions({{"python", "/p"}, {"cache_dir", "/c"}, {"jobs", "3"}});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->python, "/p");
  EXPECT_EQ(options->cache_dir, "/c");
  EXPECT_EQ(options->jobs, 3);
  EXPECT_TRUE(options->single_threaded);
  absl::StatusOr<InductorOptions> bad = InductorOptions::FromComponentOptions({{"pyhton", "/p"}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "inductor: unknown option 'pyhton' (options: python, cache_dir, jobs, compile_threads, "
            "precompile_headers, single_threaded, config.NAME)");
  EXPECT_FALSE(InductorOptions::FromComponentOptions({{"jobs", "-1"}}).ok());
  EXPECT_FALSE(InductorOptions::FromComponentOptions({{"compile_threads", "x"}}).ok());
  absl::StatusOr<InductorOptions> no_pch =
      InductorOptions::FromComponentOptions({{"precompile_headers", "false"}, {"compile_threads", "2"}});
  ASSERT_TRUE(no_pch.ok()) << no_pch.status();
  EXPECT_FALSE(no_pch->precompile_headers);
  EXPECT_EQ(no_pch->compile_threads, 2);
  absl::StatusOr<InductorOptions> bad_pch = InductorOptions::FromComponentOptions({{"precompile_headers", "no"}});
  EXPECT_EQ(bad_pch.status().message(), "inductor: precompile_headers is true or false, got 'no'");
  EXPECT_FALSE(InductorOptions::FromComponentOptions({{"single_threaded", "yes"}}).ok());

  absl::StatusOr<InductorOptions> settings = InductorOptions::FromComponentOptions(
      {{"config.combo_kernels", "true"}, {"config.triton.max_tiles", "3"}});
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->inductor_configs,
            (std::map<std::string, std::string>{{"combo_kernels", "true"}, {"triton.max_tiles", "3"}}));
  for (const char* name : {"config.", "config.1x", "config.a..b", "config.a.", "config.a-b"}) {
    absl::StatusOr<InductorOptions> bad_name = InductorOptions::FromComponentOptions({{name, "1"}});
    EXPECT_EQ(bad_name.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_NE(bad_name.status().message().find("does not name an Inductor setting"), std::string::npos)
        << bad_name.status();
  }
  EXPECT_EQ(InductorOptions::FromComponentOptions({{"config.combo_kernels", "a b"}}).status().message(),
            "inductor: config.combo_kernels needs a value without spaces, got 'a b'");
  EXPECT_FALSE(InductorOptions::FromComponentOptions({{"config.combo_kernels", ""}}).ok());
}

// Inductor settings are part of a package's key: the same partition compiled with a setting
// is another package (a cache hit would hand back code compiled without it); a setting this
// torch lacks fails the compile, naming it.
TEST(InductorBackendTest, InductorSettingsMakeOtherPackages) {
  if (!compat::AotInductorAvailable()) GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no AOTInductor";
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(R"(module @m {
  graph @p {
    input %x: f32[4,8]
    input %w: f32[8,8]
    %h = aten::mm(%x, %w) : f32[4,8]
    %y = aten::gelu(%h, approximate = "tanh") : f32[4,8]
    output y = %y
  }
}
)");
  ASSERT_TRUE(module.ok()) << module.status();
  const Graph& graph = *(*module)->FindGraph("p");
  InductorOptions options;
  options.cache_dir = TempDir("inductor_settings");
  options.jobs = 1;
  auto package_of = [&](const InductorOptions& with) -> absl::StatusOr<std::string> {
    std::vector<absl::StatusOr<std::unique_ptr<Executable>>> compiled =
        InductorBackend(with).CompileAll(**module, {&graph});
    if (compiled.size() != 1) return absl::InternalError("not one executable");
    if (!compiled[0].ok()) return compiled[0].status();
    auto* executable = dynamic_cast<InductorExecutable*>(compiled[0]->get());
    if (executable == nullptr || executable->from_cache()) return absl::InternalError("not compiled here");
    return executable->package_path();
  };
  absl::StatusOr<std::string> plain = package_of(options);
  ASSERT_TRUE(plain.ok()) << plain.status();
  options.inductor_configs["max_autotune"] = "false";  // the default value: still another package
  absl::StatusOr<std::string> set = package_of(options);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_NE(*plain, *set);
  options.inductor_configs = {{"max_autotuen", "false"}};
  absl::StatusOr<std::string> misspelt = package_of(options);
  ASSERT_FALSE(misspelt.ok());
  EXPECT_NE(misspelt.status().message().find("has no setting 'max_autotuen' (config.max_autotuen=false)"),
            std::string::npos)
      << misspelt.status();
}

// Where AOTInductor cannot be used, every node is declined with the reason, so the compile
// driver leaves the step to the primary backend.
void ExpectUnavailable(const InductorBackend& backend, const std::string& expected) {
  absl::Status availability = backend.Availability();
  EXPECT_EQ(availability.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(availability.message().find(expected), std::string::npos) << availability;
  absl::StatusOr<std::unique_ptr<Module>> module = ParseModule(kStep);
  ASSERT_TRUE(module.ok());
  const Graph& step = *(*module)->FindGraph("step");
  Capability capability = backend.GetCapability(**module, step);
  ASSERT_EQ(static_cast<int>(capability.unsupported.size()), step.num_nodes());
  for (const auto& [node, reason] : capability.unsupported) {
    EXPECT_EQ(reason, absl::StrCat("AOTInductor is unavailable: ", availability.message()));
  }
  std::vector<absl::StatusOr<std::unique_ptr<Executable>>> compiled = backend.CompileAll(**module, {&step});
  ASSERT_EQ(compiled.size(), 1u);
  EXPECT_EQ(compiled[0].status().code(), absl::StatusCode::kUnavailable);
}

TEST(InductorBackendTest, UnavailableWithoutAotInductorOrASuitablePython) {
  std::string dir = TempDir("unavailable");
  InductorOptions options;
  options.cache_dir = dir + "/cache";
  if (!compat::AotInductorAvailable()) {
    // Debian's LibTorch 1.13: the reason names the version and what to do.
    ExpectUnavailable(InductorBackend(options), absl::StrCat("LibTorch ", TORCH_VERSION, " has no AOTInductor"));
    ExpectUnavailable(InductorBackend(options), "MAGI_TORCH=2.12");
    return;
  }
  options.python = dir + "/no_such_python";
  ExpectUnavailable(InductorBackend(options), "no suitable Python (the backend option python): Python " +
                                                  options.python + " does not exist");
  // A Python whose torch is another version than the LibTorch of this process.
  options.python = dir + "/python_2_0";
  ASSERT_TRUE(WriteFileAtomically(options.python, absl::StrCat("#!/bin/sh\necho torch=2.0.1\necho torch_dir=", dir,
                                                                 "\necho aoti=1\necho cuda=\n"))
                  .ok());
  ASSERT_EQ(chmod(options.python.c_str(), 0755), 0);
  ExpectUnavailable(InductorBackend(options),
                    absl::StrCat(options.python, " (the backend option python) has torch 2.0.1 but this process runs "
                                 "LibTorch ", TORCH_VERSION));
  // A Python without torch.
  options.python = dir + "/python_without_torch";
  ASSERT_TRUE(WriteFileAtomically(options.python,
                                  "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n")
                  .ok());
  ASSERT_EQ(chmod(options.python.c_str(), 0755), 0);
  ExpectUnavailable(InductorBackend(options), "cannot import torch (exit 1): ModuleNotFoundError");
}

TEST(InductorBackendTest, RegisteredByName) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = Registry<Backend>::Global().Create("inductor", {{"jobs", "2"}});
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->name(), "inductor");
  EXPECT_FALSE(Registry<Backend>::Global().Create("inductor", {{"color", "red"}}).ok());
}

}  // namespace
}  // namespace magi::inductor
