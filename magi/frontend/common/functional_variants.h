// Finds the functional counterpart of an in-place or out= ATen op.
//
//   aten::add_.Tensor         -> aten::add.Tensor
//   aten::bernoulli_.float    -> aten::bernoulli.p        (overload names differ)
//   aten::mul.out             -> aten::mul.Tensor         (the out argument dropped)
//   aten::_foreach_add_.Scalar-> aten::_foreach_add.Scalar
// Two schemas match when their non-out arguments have the same names and types
// (alias annotations ignored). Results are cached; lookups are thread-safe.
#ifndef MAGI_FRONTEND_COMMON_FUNCTIONAL_VARIANTS_H_
#define MAGI_FRONTEND_COMMON_FUNCTIONAL_VARIANTS_H_

#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <vector>

namespace magi {

// Indices of the arguments `schema` writes to (alias annotation with '!').
std::vector<size_t> MutatedArguments(const c10::FunctionSchema& schema);
// True if argument `i` is an out= argument (written and keyword-only).
bool IsOutArgument(const c10::FunctionSchema& schema, size_t i);

// The functional variant of `op`, or nullopt if `op` mutates nothing or has none.
c10::optional<c10::OperatorHandle> FindFunctionalVariant(const c10::OperatorHandle& op);

// For each return of `schema`, the index of the argument it is a view of (alias
// annotation without '!', e.g. `select(Tensor(a) self, ...) -> Tensor(a)` or
// `split(Tensor(a -> *) self, ...) -> Tensor(a)[]`; also the unannotated "unsafe" views
// such as _unsafe_view and unsafe_split, whose results share memory all the same), or -1.
std::vector<int> ViewSources(const c10::FunctionSchema& schema);

// True for ops whose schema says "alias" but that return a view only sometimes
// (reshape, contiguous, to, ...): whether the result shares memory depends on the input.
bool MayOrMayNotAlias(const c10::FunctionSchema& schema);

}  // namespace magi

#endif  // MAGI_FRONTEND_COMMON_FUNCTIONAL_VARIANTS_H_
