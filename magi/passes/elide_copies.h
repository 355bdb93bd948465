// Copy elision: removes copies into fresh buffers whose result is indistinguishable from
// their source.
//
// Autograd's gradient accumulation (and functionalized copy_) appears in captured steps
// as `%e = aten::new_empty_strided(...)` + `%c = aten::copy(%e, %src, non_blocking)`: a
// full read and write of the tensor (on the 953M Llama step, 147 copies of every
// gradient, ~3 ms per step on an H200). Values are immutable in the IR, so when %c has
// %src's exact type (dtype, sizes, strides, device), every reader of %c can read %src.
//
// It does NOT replace a copy whose source is a view of a larger storage (that would keep
// the larger storage alive longer), copies that change dtype, layout or device, or
// in-place copy_ (which writes its destination). Dead new_empty_strided results are left
// for dce. Registered as "elide-copies".
#ifndef MAGI_PASSES_ELIDE_COPIES_H_
#define MAGI_PASSES_ELIDE_COPIES_H_

#include "magi/passes/pass.h"

namespace magi {

class ElideCopies : public GraphPass {
 public:
  static constexpr absl::string_view kName = "elide-copies";
  absl::string_view name() const override { return kName; }

 protected:
  absl::StatusOr<bool> RunOnGraph(Graph& graph) override;
};

}  // namespace magi

#endif  // MAGI_PASSES_ELIDE_COPIES_H_
