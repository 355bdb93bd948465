// One converter from ATen schema arguments to IR node arguments, shared by the capture
// frontend (boxed IValues of a live call) and the FX importer (arguments read from an FX
// graph file).
//
// Each frontend first turns what it was given into an AtenArg (a frontend-neutral value:
// numbers, strings, dtypes, lists, and tensors already resolved to IR values), then
// ConvertCallArguments checks every value against the operator's schema and builds the
// node's argument list: in schema order, keyword-only arguments named, omitted arguments
// given the schema's default, out= arguments dropped when the node is the op's functional
// variant. What it does NOT do: pick overloads, resolve tensors, or decide aliasing.
//
//   std::vector<AtenArg> given = ...;  // one per schema argument; nullopt where omitted
//   MAGI_ASSIGN_OR_RETURN(std::vector<NodeArg> args,
//       ConvertCallArguments(op.schema(), &functional.schema(),
//                            [&](size_t i) { return given[i]; }));
//
// Errors say which argument ("argument 'dim': expected a list of ints"); callers add the
// node or op.
#ifndef MAGI_FRONTEND_COMMON_ATEN_ARGUMENTS_H_
#define MAGI_FRONTEND_COMMON_ATEN_ARGUMENTS_H_

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "magi/ir/graph.h"

namespace magi {

// A value passed for one schema argument, before it is checked against the schema.
struct AtenArg {
  enum class Kind { kNone, kBool, kInt, kFloat, kComplex, kString, kTensor, kList, kDType, kDevice, kEnum, kOpaque };
  Kind kind = Kind::kNone;
  bool b = false;
  int64_t i = 0;          // kInt, and kEnum (a c10::Layout or c10::MemoryFormat value)
  double f = 0;           // kFloat; the real part of kComplex
  double imag = 0;        // kComplex
  std::string s;          // kString; kOpaque: what the value is ("Generator")
  Value* tensor = nullptr;  // kTensor; null: an undefined tensor (passed as none)
  std::vector<AtenArg> items;  // kList
  DType dtype = DType::kFloat32;
  Device device;

  static AtenArg None() { return AtenArg(); }
  static AtenArg Bool(bool v);
  static AtenArg Int(int64_t v);
  static AtenArg Float(double v);
  static AtenArg String(std::string v);
  static AtenArg Tensor(Value* v);
  static AtenArg List(std::vector<AtenArg> v);
  static AtenArg OfDType(DType v);
  static AtenArg OfDevice(Device v);
  static AtenArg Enum(int64_t v);
  bool is_number() const { return kind == Kind::kBool || kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kComplex; }
};

// Checks `value` against `argument`'s type and converts it; `name` names the IR argument
// ("" for positional).
absl::StatusOr<NodeArg> ConvertAtenArgument(const c10::Argument& argument, const AtenArg& value,
                                            const std::string& name);

// The schema's default for an omitted argument; InvalidArgument if it has none.
absl::StatusOr<NodeArg> DefaultAtenArgument(const c10::Argument& argument, const std::string& name);

// The value passed for schema argument `index`; nullopt when the caller omitted it.
using AtenArgSource = std::function<absl::StatusOr<std::optional<AtenArg>>(size_t index)>;

// The argument list of a node for one call of `schema`. When `functional` is not null the
// node is that functional variant of `schema` (see functional_variants.h): the out=
// arguments are dropped and the rest take the functional schema's names.
absl::StatusOr<std::vector<NodeArg>> ConvertCallArguments(const c10::FunctionSchema& schema,
                                                          const c10::FunctionSchema* functional,
                                                          const AtenArgSource& given);

// An IValue of a live call as an AtenArg: tensors through `resolve` (undefined tensors
// become none without calling it); a meta device becomes `*meta_device` when not null.
using TensorResolver = std::function<absl::StatusOr<Value*>(const at::Tensor&)>;
absl::StatusOr<AtenArg> AtenArgFromIValue(const c10::IValue& value, const TensorResolver& resolve,
                                          const Device* meta_device = nullptr);

}  // namespace magi

#endif  // MAGI_FRONTEND_COMMON_ATEN_ARGUMENTS_H_
