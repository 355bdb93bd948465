#include "magi/compat/torch_status.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <new>
#include <stdexcept>

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"

namespace magi::compat {
namespace {

TEST(TorchStatusTest, NothingThrownPassesTheResultThrough) {
  int calls = 0;
  EXPECT_TRUE(CallTorch("counting", [&] { ++calls; }).ok());
  EXPECT_EQ(calls, 1);
  absl::StatusOr<int> value = CallTorch("a value", [] { return 7; });
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, 7);
  // A Status or StatusOr that f returns is its own, code and message kept.
  absl::Status refused = CallTorch("a status", [] { return absl::InvalidArgumentError("no"); });
  EXPECT_EQ(refused, absl::InvalidArgumentError("no"));
  absl::StatusOr<int> missing = CallTorch("a StatusOr", []() -> absl::StatusOr<int> { return absl::NotFoundError("x"); });
  EXPECT_EQ(missing.status(), absl::NotFoundError("x"));
}

TEST(TorchStatusTest, ALibTorchErrorBecomesInternalWithWhatAndNoBacktrace) {
  const at::Tensor a = at::ones({2, 3});
  absl::StatusOr<at::Tensor> product = CallTorch("multiplying", [&] { return at::mm(a, a); });
  ASSERT_FALSE(product.ok());
  EXPECT_EQ(product.status().code(), absl::StatusCode::kInternal);
  const std::string message(product.status().message());
  EXPECT_EQ(message.rfind("multiplying: ", 0), 0u) << message;
  EXPECT_NE(message.find("cannot be multiplied"), std::string::npos) << message;
  EXPECT_EQ(message.find("Exception raised from"), std::string::npos) << message;  // no backtrace
}

TEST(TorchStatusTest, TheMessageAloneWithoutWhatAndAnyCode) {
  absl::Status status = CallTorch(absl::StatusCode::kDataLoss, "", [] { TORCH_CHECK(false, "corrupt archive"); });
  EXPECT_EQ(status, absl::DataLossError("corrupt archive"));
}

TEST(TorchStatusTest, TheLazyContextIsMadeOnlyForAnException) {
  int made = 0;
  auto where = [&] {
    ++made;
    return std::string("node %x");
  };
  EXPECT_TRUE(CallTorchLazy(where, [] {}).ok());
  EXPECT_EQ(made, 0);
  absl::Status status = CallTorchLazy(where, [] { TORCH_CHECK(false, "bad shape"); });
  EXPECT_EQ(status, absl::InternalError("node %x: bad shape"));
  EXPECT_EQ(made, 1);
}

TEST(TorchStatusTest, TheMapperSeesTheKindAndMessage) {
  CaughtException seen;
  auto record = [&](const CaughtException& caught) {
    seen = caught;
    return absl::ResourceExhaustedError(caught.message);
  };
  EXPECT_EQ(CallTorchWith([] { TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory."); }, record).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(seen.kind, CaughtException::Kind::kTorchOutOfMemory);
  EXPECT_EQ(seen.message, "CUDA out of memory.");
  EXPECT_TRUE(seen.from_torch());
  EXPECT_TRUE(seen.out_of_memory());

  (void)CallTorchWith([] { throw std::bad_alloc(); }, record);
  EXPECT_EQ(seen.kind, CaughtException::Kind::kBadAlloc);
  EXPECT_FALSE(seen.from_torch());
  EXPECT_TRUE(seen.out_of_memory());

  // The CPU allocator's failure is a plain c10::Error.
  (void)CallTorchWith([] { TORCH_CHECK(false, "DefaultCPUAllocator: can't allocate memory: you tried ..."); }, record);
  EXPECT_EQ(seen.kind, CaughtException::Kind::kTorch);
  EXPECT_TRUE(seen.out_of_memory());

  (void)CallTorchWith([] { TORCH_CHECK(false, "mat1 and mat2 shapes cannot be multiplied"); }, record);
  EXPECT_EQ(seen.kind, CaughtException::Kind::kTorch);
  EXPECT_FALSE(seen.out_of_memory());

  absl::Status out_of_range = CallTorchWith([] { throw std::out_of_range("map::at"); }, record);
  EXPECT_EQ(out_of_range, absl::ResourceExhaustedError("map::at"));
  EXPECT_EQ(seen.kind, CaughtException::Kind::kStd);
  EXPECT_FALSE(seen.from_torch());
  EXPECT_FALSE(seen.out_of_memory());
}

TEST(TorchStatusTest, AMapperThatReturnsOkStillFails) {
  absl::StatusOr<int> value =
      CallTorchWith([]() -> int { throw std::runtime_error("lost"); }, [](const CaughtException&) { return absl::OkStatus(); });
  EXPECT_EQ(value.status(), absl::InternalError("lost"));
}

TEST(TorchStatusTest, ExceptionsThatAreNotStdExceptionsPropagate) {
  EXPECT_THROW((void)CallTorch("odd", [] { throw 42; }), int);
}

}  // namespace
}  // namespace magi::compat
