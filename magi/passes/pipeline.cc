#include "magi/passes/pipeline.h"

#include <chrono>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "magi/base/status_macros.h"
#include "magi/ir/verifier.h"
#include "magi/passes/pass_registration.h"

namespace magi {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.' || c == '+';  // '+' joins list values: groups=layers.0+root
}

class SpecParser {
 public:
  explicit SpecParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<PassPipeline> ParseAll() {
    MAGI_ASSIGN_OR_RETURN(PassPipeline pipeline, ParseList());
    if (pos_ != text_.size()) return Error(absl::StrCat("unexpected '", std::string(1, text_[pos_]), "'"));
    return pipeline;
  }

 private:
  absl::Status Error(absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat("pass pipeline, column ", pos_ + 1, ": ", message));
  }
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  std::string Name() {
    size_t start = pos_;
    while (pos_ < text_.size() && IsNameChar(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  absl::StatusOr<PassPipeline> ParseList() {
    PassPipeline pipeline;
    while (true) {
      PassSpec spec;
      spec.name = Name();
      if (spec.name.empty()) return Error("expected a pass name");
      if (Peek() == '{') {
        ++pos_;
        while (Peek() != '}') {
          std::string key = Name();
          if (key.empty()) return Error("expected an option name");
          if (Peek() != '=') return Error(absl::StrCat("expected '=' after option '", key, "'"));
          ++pos_;
          std::string value = Name();
          if (value.empty()) return Error(absl::StrCat("expected a value for option '", key, "'"));
          if (!spec.options.emplace(key, value).second) return Error(absl::StrCat("option '", key, "' twice"));
          if (Peek() == ',') {
            ++pos_;
          } else if (Peek() != '}') {
            return Error("expected ',' or '}'");
          }
        }
        ++pos_;
      }
      if (Peek() == '(') {
        if (++depth_ > 16) return Error("pipelines nest too deeply");
        ++pos_;
        MAGI_ASSIGN_OR_RETURN(spec.nested, ParseList());
        if (Peek() != ')') return Error("expected ')'");
        ++pos_;
        --depth_;
      }
      pipeline.push_back(std::move(spec));
      if (Peek() != ',') return pipeline;
      ++pos_;
    }
  }

  absl::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

absl::StatusOr<PassPipeline> ParsePassPipeline(absl::string_view text) { return SpecParser(text).ParseAll(); }

std::string PrintPassPipeline(const PassPipeline& pipeline) {
  return absl::StrJoin(pipeline, ",", [](std::string* out, const PassSpec& spec) {
    out->append(spec.name);
    if (!spec.options.empty()) {
      absl::StrAppend(out, "{", absl::StrJoin(spec.options, ",", absl::PairFormatter("=")), "}");
    }
    if (!spec.nested.empty()) absl::StrAppend(out, "(", PrintPassPipeline(spec.nested), ")");
  });
}

absl::Status PassManager::AddPipeline(const PassPipeline& pipeline, const PassFactory& factory) {
  for (const PassSpec& spec : pipeline) {
    if (spec.name == FixedPointPass::kName) {
      MAGI_ASSIGN_OR_RETURN(FixedPointOptions options, ParsePassOptions<FixedPointPass>(spec.options));
      if (spec.nested.empty())
        return absl::InvalidArgumentError("fixed-point needs an inner pipeline: fixed-point(a,b)");
      auto inner = std::make_unique<PassManager>(verify_each_);
      MAGI_RETURN_IF_ERROR(inner->AddPipeline(spec.nested, factory));
      AddPass(std::make_unique<FixedPointPass>(std::move(inner), options));
      continue;
    }
    if (!spec.nested.empty())
      return absl::InvalidArgumentError(absl::StrCat("pass '", spec.name, "' takes no inner pipeline"));
    if (factory) {
      absl::StatusOr<std::unique_ptr<Pass>> built = factory(spec);
      if (!built.ok()) return built.status();
      if (*built != nullptr) {
        AddPass(*std::move(built));
        continue;
      }
    }
    absl::StatusOr<std::unique_ptr<Pass>> pass = Registry<Pass>::Global().Create(spec.name, spec.options);
    if (!pass.ok()) return pass.status();
    AddPass(*std::move(pass));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> PassManager::Run(Module& module) {
  bool changed = false;
  statistics_.resize(passes_.size());
  for (size_t i = 0; i < passes_.size(); ++i) {
    Pass& pass = *passes_[i];
    PassStatistics& stats = statistics_[i];
    stats.name = std::string(pass.name());
    auto start = std::chrono::steady_clock::now();
    absl::StatusOr<bool> pass_changed = pass.Run(module);
    stats.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++stats.runs;
    if (!pass_changed.ok()) {
      return absl::Status(pass_changed.status().code(),
                          absl::StrCat(pass.name(), ": ", pass_changed.status().message()));
    }
    stats.changed += *pass_changed;
    changed = changed || *pass_changed;
    if (verify_each_) {
      absl::Status verified = VerifyModule(module);
      if (!verified.ok()) {
        return absl::InternalError(
            absl::StrCat("the module does not verify after pass '", pass.name(), "':\n", verified.message()));
      }
    }
    if (after_pass_) MAGI_RETURN_IF_ERROR(after_pass_(static_cast<int>(i), pass.name(), module));
  }
  return changed;
}

absl::StatusOr<bool> RunPassPipeline(absl::string_view spec, Module& module, bool verify_each) {
  MAGI_ASSIGN_OR_RETURN(PassPipeline pipeline, ParsePassPipeline(spec));
  PassManager manager(verify_each);
  MAGI_RETURN_IF_ERROR(manager.AddPipeline(pipeline));
  return manager.Run(module);
}

std::string PassManager::Print() const {
  return absl::StrJoin(passes_, ",", [](std::string* out, const std::unique_ptr<Pass>& pass) {
    out->append(pass->Print());
  });
}

const OptionSchema<FixedPointOptions>& FixedPointOptions::Schema() {
  static const auto* schema = new OptionSchema<FixedPointOptions>({
      Field("max_iterations", &FixedPointOptions::max_iterations, Integer(1)),
  });
  return *schema;
}

std::string FixedPointPass::Print() const { return absl::StrCat(Pass::Print(), "(", inner_->Print(), ")"); }

absl::StatusOr<bool> FixedPointPass::RunImpl(Module& module) {
  bool changed = false;
  for (int i = 0; i < options_.max_iterations; ++i) {
    MAGI_ASSIGN_OR_RETURN(bool round_changed, inner_->Run(module));
    if (!round_changed) return changed;
    changed = true;
  }
  return changed;
}

}  // namespace magi
