#include "magi/registry/registry.h"

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"

namespace magi {
namespace {

// A small interface of the test's own, so the test does not depend on other layers.
class Greeter {
 public:
  static constexpr absl::string_view kRegistryKind = "greeter";
  virtual ~Greeter() = default;
  virtual std::string Greet() const = 0;
};

class Hello : public Greeter {
 public:
  explicit Hello(std::string who) : who_(std::move(who)) {}
  std::string Greet() const override { return "hello " + who_; }

 private:
  std::string who_;
};

MAGI_REGISTER(Greeter, "hello", [](const ComponentOptions& options) -> absl::StatusOr<std::unique_ptr<Greeter>> {
  auto it = options.find("who");
  if (it == options.end()) return std::make_unique<Hello>("world");
  if (it->second.empty()) return absl::InvalidArgumentError("hello: 'who' is empty");
  return std::make_unique<Hello>(it->second);
});

TEST(RegistryTest, CreatesRegisteredComponentsWithOptions) {
  auto greeter = Registry<Greeter>::Global().Create("hello");
  ASSERT_TRUE(greeter.ok()) << greeter.status();
  EXPECT_EQ((*greeter)->Greet(), "hello world");
  auto custom = Registry<Greeter>::Global().Create("hello", {{"who", "magi"}});
  ASSERT_TRUE(custom.ok());
  EXPECT_EQ((*custom)->Greet(), "hello magi");
  auto bad = Registry<Greeter>::Global().Create("hello", {{"who", ""}});
  EXPECT_EQ(bad.status().message(), "hello: 'who' is empty");
}

TEST(RegistryTest, UnknownNameListsWhatExists) {
  Registry<Greeter>::Global().Register("bonjour", [](const ComponentOptions&) -> absl::StatusOr<std::unique_ptr<Greeter>> {
    return std::make_unique<Hello>("le monde");
  });
  auto missing = Registry<Greeter>::Global().Create("hola");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "unknown greeter 'hola'; registered: bonjour, hello");
  EXPECT_TRUE(Registry<Greeter>::Global().Contains("bonjour"));
  EXPECT_EQ(AllRegistries().at("greeter"), (std::vector<std::string>{"bonjour", "hello"}));
}

TEST(RegistryDeathTest, DuplicateRegistrationIsAProgrammerError) {
  EXPECT_DEATH(Registry<Greeter>::Global().Register(
                   "hello", [](const ComponentOptions&) -> absl::StatusOr<std::unique_ptr<Greeter>> {
                     return std::make_unique<Hello>("again");
                   }),
               "greeter 'hello' is registered twice");
}

TEST(RegistryTest, ComponentSpecs) {
  auto plain = ParseComponentSpec("nccl_stream");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->first, "nccl_stream");
  EXPECT_TRUE(plain->second.empty());
  auto with_options = ParseComponentSpec("nccl_stream{cuda_graph=true,warmup=2}");
  ASSERT_TRUE(with_options.ok()) << with_options.status();
  EXPECT_EQ(with_options->second, (ComponentOptions{{"cuda_graph", "true"}, {"warmup", "2"}}));
  for (const char* bad : {"", "{a=1}", "x{a}", "x{a=1", "x{a=1,a=2}", "x y"}) {
    EXPECT_EQ(ParseComponentSpec(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace magi
