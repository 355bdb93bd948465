#include "magi/frontend/common/alias_tracker.h"

#include "gtest/gtest.h"
#include "magi/base/gtest_printers.h"
#include "magi/ir/printer.h"
#include "magi/ir/verifier.h"

namespace magi {
namespace {

Type F32(std::vector<int64_t> sizes) { return Type::Tensor({DType::kFloat32, std::move(sizes)}); }

class AliasTrackerTest : public ::testing::Test {
 protected:
  AliasTrackerTest() : graph_("g"), tracker_(&graph_) {
    x_ = graph_.AddInput("x", F32({2, 3}), InputRole::kBuffer);
    AliasTracker::RootOptions options;
    options.starts_storage = true;
    root_ = tracker_.AddRoot(x_, options);
  }

  // Adds view op `op` on alias `base` (its current value) and registers result `index`.
  int View(int base, const std::string& op, std::vector<NodeArg> args, std::vector<Type> types, int index = 0) {
    args.insert(args.begin(), NodeArg(*tracker_.Read(base)));
    std::vector<std::string> names;
    for (size_t i = 0; i < types.size(); ++i) names.push_back("v" + std::to_string(next_++));
    Node* node = graph_.AddNode(op, std::move(args), std::move(types), nullptr, std::move(names));
    return tracker_.AddView(base, node, index);
  }

  // alias += 1, written in place.
  absl::Status AddOneInPlace(int alias) {
    Value* value = *tracker_.Read(alias);
    Node* add = graph_.AddNode("aten::add.Scalar", {NodeArg(value), NodeArg(Attribute(int64_t{1}))}, {value->type()},
                               nullptr, {"add" + std::to_string(next_++)});
    return tracker_.Write(alias, add->result(0));
  }

  std::string Finish() {
    for (auto [input, value] : tracker_.WrittenInputs()) graph_.AddOutput(input->name() + ".updated", value);
    EXPECT_TRUE(VerifyGraph(graph_, nullptr).ok()) << VerifyGraph(graph_, nullptr);
    return PrintGraph(graph_);
  }

  Graph graph_;
  AliasTracker tracker_;
  Value* x_;
  int root_;
  int next_ = 0;
};

// x[0] += 1 writes row 0 of x; a slice of x taken before is regenerated from the new x.
TEST_F(AliasTrackerTest, WriteThroughSelectReachesTheBaseAndOtherViews) {
  int row = View(root_, "aten::select.int", {NodeArg(Attribute(int64_t{0})), NodeArg(Attribute(int64_t{0}))},
                 {F32({3})});
  int cols = View(root_, "aten::slice.Tensor",
                  {NodeArg(Attribute(int64_t{1})), NodeArg(Attribute(int64_t{0})), NodeArg(Attribute(int64_t{2})),
                   NodeArg(Attribute(int64_t{1}))},
                  {F32({2, 2})});
  ASSERT_TRUE(AddOneInPlace(row).ok());
  absl::StatusOr<Value*> fresh_cols = tracker_.Read(cols);
  ASSERT_TRUE(fresh_cols.ok());
  graph_.AddOutput("cols", *fresh_cols);
  EXPECT_EQ(tracker_.RootOf(cols), root_);
  EXPECT_EQ(Finish(), R"(  graph @g {
    input %x: f32[2,3] {role = buffer}
    %v0 = aten::select.int(%x, 0, 0) : f32[3]
    %v1 = aten::slice.Tensor(%x, 1, 0, 2, 1) : f32[2,2]
    %add2 = aten::add.Scalar(%v0, 1) : f32[3]
    %x.0 = aten::select_scatter(%x, %add2, 0, 0) : f32[2,3]
    %v1.1 = aten::slice.Tensor(%x.0, 1, 0, 2, 1) : f32[2,2]
    output cols = %v1.1
    output x.updated = %x.0
  }
)");}

// A chain (x.t()[1]) is written back step by step: select_scatter into the transpose, then t.
TEST_F(AliasTrackerTest, WriteThroughAChainInvertsEachStep) {
  int t = View(root_, "aten::t", {}, {F32({3, 2})});
  int row = View(t, "aten::select.int", {NodeArg(Attribute(int64_t{0})), NodeArg(Attribute(int64_t{1}))},
                 {F32({2})});
  ASSERT_TRUE(AddOneInPlace(row).ok());
  std::string text = Finish();
  EXPECT_NE(text.find("%v0.0 = aten::select_scatter(%v0, %add2, 0, 1) : f32[3,2]"), std::string::npos) << text;
  EXPECT_NE(text.find("%x.1 = aten::t(%v0.0) : f32[2,3]"), std::string::npos) << text;
  EXPECT_NE(text.find("output x.updated = %x.1"), std::string::npos) << text;
}

TEST_F(AliasTrackerTest, SplitResultsWriteTheirOwnRange) {
  int second = View(root_, "aten::split.Tensor", {NodeArg(Attribute(int64_t{2})), NodeArg(Attribute(int64_t{1}))},
                    {F32({2, 2}), F32({2, 1})}, /*index=*/1);
  ASSERT_TRUE(AddOneInPlace(second).ok());
  std::string text = Finish();
  EXPECT_NE(text.find("%x.0 = aten::slice_scatter(%x, %add2, 1, 2, 3, 1) : f32[2,3]"), std::string::npos) << text;
}

TEST_F(AliasTrackerTest, AsStridedOfAStorageRootScattersBack) {
  int diag = View(root_, "aten::as_strided",
                  {NodeArg(Attribute(std::vector<int64_t>{2})), NodeArg(Attribute(std::vector<int64_t>{4})),
                   NodeArg(Attribute(int64_t{0}))},
                  {F32({2})});
  ASSERT_TRUE(AddOneInPlace(diag).ok());
  std::string text = Finish();
  EXPECT_NE(text.find("%x.0 = aten::as_strided_scatter(%x, %add1, [2], [4], 0) : f32[2,3]"), std::string::npos) << text;
}

// After a write the root's value is one the tracker made, whose memory layout at run time is
// the functional op's (a copy may even return an expanded view): as_strided, which addresses
// memory, then reads a contiguous copy of the root, never the value as it happens to be laid out.
TEST_F(AliasTrackerTest, AsStridedAfterAWriteReadsTheRootInTheTracedLayout) {
  EXPECT_TRUE(tracker_.LayoutIsFaithful(root_));
  ASSERT_TRUE(AddOneInPlace(root_).ok());
  EXPECT_FALSE(tracker_.LayoutIsFaithful(root_));
  absl::StatusOr<Value*> base = tracker_.StorageBase(root_);
  ASSERT_TRUE(base.ok()) << base.status();
  EXPECT_EQ((*base)->producer()->op(), "aten::contiguous");
  int strided = View(root_, "aten::as_strided",
                     {NodeArg(Attribute(std::vector<int64_t>{2})), NodeArg(Attribute(std::vector<int64_t>{4})),
                      NodeArg(Attribute(int64_t{0}))},
                     {F32({2})});
  ASSERT_TRUE(AddOneInPlace(root_).ok());  // makes the as_strided view stale
  absl::StatusOr<Value*> regenerated = tracker_.Read(strided);
  ASSERT_TRUE(regenerated.ok()) << regenerated.status();
  EXPECT_EQ((*regenerated)->producer()->op(), "aten::as_strided");
  EXPECT_EQ((*regenerated)->producer()->operand(0)->producer()->op(), "aten::contiguous");
  // A root that does not start its storage cannot be given its traced layout back.
  Value* y = graph_.AddInput("y", F32({3}));
  int partial = tracker_.AddRoot(y);
  ASSERT_TRUE(AddOneInPlace(partial).ok());
  EXPECT_EQ(tracker_.StorageBase(partial).status().code(), absl::StatusCode::kUnimplemented);
}

// A root laid out densely but permuted (strides [1, 3]: a transpose's elementwise result).
// as_strided addresses its memory, so a write through as_strided scatters into the root
// permuted to memory order and made contiguous, then permutes back; after a write, reading
// through as_strided reads that memory-order copy.
TEST_F(AliasTrackerTest, AsStridedOfAPermutedDenseRootAddressesItsTracedMemory) {
  Value* p = graph_.AddInput("p", Type::Tensor({DType::kFloat32, {3, 2}, {1, 3}}));
  AliasTracker::RootOptions options;
  options.starts_storage = IsDenseLayout({3, 2}, {1, 3});
  ASSERT_TRUE(options.starts_storage);
  int root = tracker_.AddRoot(p, options);
  absl::StatusOr<Value*> faithful = tracker_.StorageBase(root);
  ASSERT_TRUE(faithful.ok()) << faithful.status();
  EXPECT_EQ(*faithful, p);  // its own layout while never written
  int strided = View(root, "aten::as_strided",
                     {NodeArg(Attribute(std::vector<int64_t>{2})), NodeArg(Attribute(std::vector<int64_t>{2})),
                      NodeArg(Attribute(int64_t{1}))},
                     {F32({2})});
  ASSERT_TRUE(AddOneInPlace(strided).ok());
  ASSERT_TRUE(AddOneInPlace(root).ok());  // makes the strided view stale
  absl::StatusOr<Value*> reread = tracker_.Read(strided);
  ASSERT_TRUE(reread.ok()) << reread.status();
  graph_.AddOutput("strided", *reread);
  EXPECT_EQ(Finish(), R"(  graph @g {
    input %x: f32[2,3] {role = buffer}
    input %p: f32[3,2]strides[1,3]
    %v0 = aten::as_strided(%p, [2], [2], 1) : f32[2]
    %add1 = aten::add.Scalar(%v0, 1) : f32[2]
    %p.0 = aten::permute(%p, [1, 0]) : f32[2,3]
    %p.1 = aten::contiguous(%p.0, memory_format = 0) : f32[2,3]
    %p.1.2 = aten::as_strided_scatter(%p.1, %add1, [2], [2], 1) : f32[2,3]
    %p.3 = aten::permute(%p.1.2, [1, 0]) : f32[3,2]strides[1,3]
    %add2 = aten::add.Scalar(%p.3, 1) : f32[3,2]strides[1,3]
    %add2.4 = aten::permute(%add2, [1, 0]) : f32[2,3]
    %add2.5 = aten::contiguous(%add2.4, memory_format = 0) : f32[2,3]
    %v0.6 = aten::as_strided(%add2.5, [2], [2], 1) : f32[2]
    output strided = %v0.6
    output p.updated = %add2
  }
)");
}

TEST(IsDenseLayoutTest, ContiguousAndPermutedLayoutsAreDenseGapsAndOverlapsAreNot) {
  EXPECT_TRUE(IsDenseLayout({2, 3}, {}));
  EXPECT_TRUE(IsDenseLayout({2, 3}, {3, 1}));
  EXPECT_TRUE(IsDenseLayout({2, 3}, {1, 2}));            // transposed
  EXPECT_TRUE(IsDenseLayout({2, 3, 4}, {1, 8, 2}));      // permuted
  EXPECT_TRUE(IsDenseLayout({2, 1, 3}, {3, 99, 1}));     // a size-1 dimension's stride does not matter
  EXPECT_TRUE(IsDenseLayout({2, 0}, {5, 7}));            // no elements
  EXPECT_FALSE(IsDenseLayout({2, 3}, {4, 1}));           // a gap after each row
  EXPECT_FALSE(IsDenseLayout({2, 3}, {0, 1}));           // expanded: rows overlap
  EXPECT_FALSE(IsDenseLayout({2, 3}, {1}));              // malformed
}

TEST_F(AliasTrackerTest, WritesItCannotExpressAreRefusedNamingTheView) {
  int wide = View(root_, "aten::expand", {NodeArg(Attribute(std::vector<int64_t>{4, 2, 3}))}, {F32({4, 2, 3})});
  absl::Status expanded = AddOneInPlace(wide);
  EXPECT_EQ(expanded.code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(expanded.message(),
            "it writes through a view made by aten::expand (v0): several of its elements are one memory location");
  // as_strided of a view (not of the storage root) addresses memory the view does not describe.
  int row = View(root_, "aten::select.int", {NodeArg(Attribute(int64_t{0})), NodeArg(Attribute(int64_t{1}))},
                 {F32({3})});
  int strided = View(row, "aten::as_strided",
                     {NodeArg(Attribute(std::vector<int64_t>{2})), NodeArg(Attribute(std::vector<int64_t>{1})),
                      NodeArg(Attribute(int64_t{3}))},
                     {F32({2})});
  absl::Status status = AddOneInPlace(strided);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(status.message().find("as_strided addresses the whole storage"), std::string::npos) << status;
  // Past the end of the root.
  int past = View(root_, "aten::as_strided",
                  {NodeArg(Attribute(std::vector<int64_t>{2})), NodeArg(Attribute(std::vector<int64_t>{3})),
                   NodeArg(Attribute(int64_t{4}))},
                  {F32({2})});
  EXPECT_EQ(AddOneInPlace(past).message(),
            "it writes through a view made by aten::as_strided (v5): it reaches element 7 of a base of 6 elements");
  Value* y = graph_.AddInput("y", F32({3}));
  AliasTracker::RootOptions uncertain;
  uncertain.uncertain = "aten::reshape may return a view or a copy";
  int maybe = tracker_.AddRoot(y, uncertain);
  EXPECT_EQ(AddOneInPlace(maybe).message(),
            "it writes to a tensor whose aliasing is not known (aten::reshape may return a view or a copy); Magi "
            "cannot tell which other tensors see the write");
}

}  // namespace
}  // namespace magi
