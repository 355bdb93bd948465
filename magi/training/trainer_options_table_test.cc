// The trainers' options table itself: a row per documented option, unique fields, and a
// checker that fails a row whose outcome is not the expected one.
#include "magi/training/trainer_options_table.h"

#include <set>

#include "gtest/gtest.h"

namespace magi {
namespace {

TEST(TrainerOptionsTableTest, EveryDocumentedOptionHasOneRow) {
  std::set<std::string> fields;
  for (const TrainerOptionCase& row : TrainerOptionCases()) {
    EXPECT_TRUE(fields.insert(row.field).second) << "two rows for " << row.field;
  }
  for (const CompileOptionDoc& doc : DocumentedCompileOptions()) {
    EXPECT_EQ(fields.count(doc.name), 1u) << "no row for the documented option " << doc.name;
  }
  EXPECT_EQ(fields.count("sharding"), 1u);
  EXPECT_EQ(fields.count("optimization.memory_budget_bytes"), 1u);
}

TEST(TrainerOptionsTableTest, CheckerFailsRowsThatDoNotHold) {
  TrainerOptionCase refused{"sharding", nullptr, TrainerOptionCase::Expect::kRefused};
  EXPECT_EQ(
      CheckTrainerOptionCase(refused, absl::InvalidArgumentError("FxTrainer does not take CompileOptions::sharding: x"),
                             nullptr, "FxTrainer"),
      "");
  EXPECT_NE(CheckTrainerOptionCase(refused, absl::OkStatus(), nullptr, "FxTrainer"), "");
  EXPECT_NE(CheckTrainerOptionCase(refused,
                                   absl::InvalidArgumentError("FsdpTrainer does not take CompileOptions::sharding: x"),
                                   nullptr, "FxTrainer"),
            "");
  TrainerOptionCase compiled{"partitioning.min_nodes", nullptr, TrainerOptionCase::Expect::kCompiledWith,
                             [](const CompileOptions& o) { return o.partitioning.min_nodes == 7; }};
  CompileOptions seven, one;
  seven.partitioning.min_nodes = 7;
  EXPECT_EQ(CheckTrainerOptionCase(compiled, absl::OkStatus(), &seven, "FxTrainer"), "");
  EXPECT_NE(CheckTrainerOptionCase(compiled, absl::OkStatus(), &one, "FxTrainer"), "");
  EXPECT_NE(CheckTrainerOptionCase(compiled, absl::InternalError("x"), nullptr, "FxTrainer"), "");
  TrainerOptionCase error{"backend", nullptr, TrainerOptionCase::Expect::kError, nullptr, "no-such-backend"};
  EXPECT_EQ(CheckTrainerOptionCase(error, absl::NotFoundError("unknown backend 'no-such-backend'"), nullptr, "X"), "");
  EXPECT_NE(CheckTrainerOptionCase(error, absl::OkStatus(), &one, "X"), "");
  EXPECT_NE(CheckTrainerOptionCase(error, absl::NotFoundError("something else"), nullptr, "X"), "");
}

}  // namespace
}  // namespace magi
