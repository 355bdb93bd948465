#include "magi/frontend/common/aten_arguments.h"

#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"
#include "magi/compat/torch_compat.h"
#include "magi/frontend/common/functional_variants.h"

namespace magi {

AtenArg AtenArg::Bool(bool v) {
  AtenArg a;
  a.kind = Kind::kBool;
  a.b = v;
  return a;
}
AtenArg AtenArg::Int(int64_t v) {
  AtenArg a;
  a.kind = Kind::kInt;
  a.i = v;
  return a;
}
AtenArg AtenArg::Float(double v) {
  AtenArg a;
  a.kind = Kind::kFloat;
  a.f = v;
  return a;
}
AtenArg AtenArg::String(std::string v) {
  AtenArg a;
  a.kind = Kind::kString;
  a.s = std::move(v);
  return a;
}
AtenArg AtenArg::Tensor(Value* v) {
  AtenArg a;
  a.kind = Kind::kTensor;
  a.tensor = v;
  return a;
}
AtenArg AtenArg::List(std::vector<AtenArg> v) {
  AtenArg a;
  a.kind = Kind::kList;
  a.items = std::move(v);
  return a;
}
AtenArg AtenArg::OfDType(DType v) {
  AtenArg a;
  a.kind = Kind::kDType;
  a.dtype = v;
  return a;
}
AtenArg AtenArg::OfDevice(Device v) {
  AtenArg a;
  a.kind = Kind::kDevice;
  a.device = v;
  return a;
}
AtenArg AtenArg::Enum(int64_t v) {
  AtenArg a;
  a.kind = Kind::kEnum;
  a.i = v;
  return a;
}

namespace {

absl::StatusOr<double> NumberOf(const AtenArg& value) {
  if (value.kind == AtenArg::Kind::kFloat) return value.f;
  if (value.kind == AtenArg::Kind::kInt) return static_cast<double>(value.i);
  return absl::InvalidArgumentError("expected a number");
}

absl::StatusOr<const std::vector<AtenArg>*> ListOf(const AtenArg& value) {
  if (value.kind != AtenArg::Kind::kList) return absl::InvalidArgumentError("expected a list");
  return &value.items;
}

}  // namespace

absl::StatusOr<NodeArg> ConvertAtenArgument(const c10::Argument& argument, const AtenArg& value,
                                            const std::string& name) {
  using Kind = AtenArg::Kind;
  compat::ArgType type = compat::ClassifyArgument(argument);
  if (value.kind == Kind::kNone) {
    // A Tensor argument may receive an undefined tensor (autograd passes them).
    if (!type.optional && type.kind != compat::ArgKind::kTensor) {
      return absl::InvalidArgumentError("None for a non-optional argument");
    }
    return NodeArg(Attribute(NoneAttr{}), name);
  }
  switch (type.kind) {
    case compat::ArgKind::kTensor:
      if (value.is_number()) return absl::InvalidArgumentError("a number where the schema wants a tensor");
      if (value.kind != Kind::kTensor) return absl::InvalidArgumentError("expected a tensor");
      if (value.tensor == nullptr) return NodeArg(Attribute(NoneAttr{}), name);
      return NodeArg(value.tensor, name);
    case compat::ArgKind::kTensorList:
    case compat::ArgKind::kOptionalTensorList: {
      MAGI_ASSIGN_OR_RETURN(const std::vector<AtenArg>* items, ListOf(value));
      std::vector<Value*> values;
      for (const AtenArg& item : *items) {
        if (item.kind != Kind::kNone && item.kind != Kind::kTensor) {
          return absl::InvalidArgumentError("expected a list of tensors");
        }
        values.push_back(item.tensor);  // null: none
      }
      return NodeArg(std::move(values), name);
    }
    case compat::ArgKind::kInt:
      if (value.kind != Kind::kInt) return absl::InvalidArgumentError("expected an int");
      return NodeArg(Attribute(value.i), name);
    case compat::ArgKind::kLayout:
    case compat::ArgKind::kMemoryFormat:
      if (value.kind != Kind::kEnum && value.kind != Kind::kInt) {
        return absl::InvalidArgumentError("expected a layout or memory format");
      }
      return NodeArg(Attribute(value.i), name);
    case compat::ArgKind::kFloat: {
      MAGI_ASSIGN_OR_RETURN(double f, NumberOf(value));
      return NodeArg(Attribute(f), name);
    }
    case compat::ArgKind::kBool:
      if (value.kind != Kind::kBool) return absl::InvalidArgumentError("expected a bool");
      return NodeArg(Attribute(value.b), name);
    case compat::ArgKind::kString:
      if (value.kind != Kind::kString) return absl::InvalidArgumentError("expected a string");
      return NodeArg(Attribute(value.s), name);
    case compat::ArgKind::kScalar:
      switch (value.kind) {
        case Kind::kBool:
          return NodeArg(Attribute(value.b), name);
        case Kind::kInt:
          return NodeArg(Attribute(value.i), name);
        case Kind::kFloat:
          return NodeArg(Attribute(value.f), name);
        case Kind::kComplex:
          // A complex Scalar changes type promotion, so it cannot become a real constant.
          return absl::UnimplementedError(absl::StrCat("the complex scalar (", value.f, ", ", value.imag,
                                                       ") cannot be an IR constant (the IR has none)"));
        default:
          return absl::InvalidArgumentError("expected a number");
      }
    case compat::ArgKind::kScalarType: {
      if (value.kind == Kind::kDType) return NodeArg(Attribute(value.dtype), name);
      if (value.kind != Kind::kInt) return absl::InvalidArgumentError("expected a dtype");
      // Boxed calls pass a ScalarType as its number.
      MAGI_ASSIGN_OR_RETURN(DType dtype, compat::FromScalarType(static_cast<c10::ScalarType>(value.i)));
      return NodeArg(Attribute(dtype), name);
    }
    case compat::ArgKind::kDevice:
      if (value.kind != Kind::kDevice) return absl::InvalidArgumentError("expected a device");
      return NodeArg(Attribute(value.device), name);
    case compat::ArgKind::kIntList: {
      if (value.kind == Kind::kInt) return NodeArg(Attribute(std::vector<int64_t>{value.i}), name);  // int[1]
      MAGI_ASSIGN_OR_RETURN(const std::vector<AtenArg>* items, ListOf(value));
      std::vector<int64_t> ints;
      for (const AtenArg& item : *items) {
        if (item.kind != Kind::kInt) return absl::InvalidArgumentError("expected a list of ints");
        ints.push_back(item.i);
      }
      return NodeArg(Attribute(std::move(ints)), name);
    }
    case compat::ArgKind::kFloatList: {
      MAGI_ASSIGN_OR_RETURN(const std::vector<AtenArg>* items, ListOf(value));
      std::vector<double> floats;
      for (const AtenArg& item : *items) {
        MAGI_ASSIGN_OR_RETURN(double f, NumberOf(item));
        floats.push_back(f);
      }
      return NodeArg(Attribute(std::move(floats)), name);
    }
    case compat::ArgKind::kBoolList: {
      MAGI_ASSIGN_OR_RETURN(const std::vector<AtenArg>* items, ListOf(value));
      std::vector<bool> bools;
      for (const AtenArg& item : *items) {
        if (item.kind != Kind::kBool) return absl::InvalidArgumentError("expected a list of bools");
        bools.push_back(item.b);
      }
      return NodeArg(Attribute(std::move(bools)), name);
    }
    case compat::ArgKind::kGenerator:
      return absl::UnimplementedError(
          "an explicit generator is passed; Magi replays randomness from the default generator's state "
          "(pass no generator)");
    case compat::ArgKind::kUnsupported:
      break;
  }
  return absl::UnimplementedError(absl::StrCat("arguments of type ", argument.real_type()->str(),
                                               value.kind == Kind::kOpaque ? " holding a " + value.s : "",
                                               " are not supported"));
}

absl::StatusOr<NodeArg> DefaultAtenArgument(const c10::Argument& argument, const std::string& name) {
  if (!argument.default_value().has_value()) return absl::InvalidArgumentError("missing and without a default");
  const c10::IValue& value = *argument.default_value();
  compat::ArgType type = compat::ClassifyArgument(argument);
  if (value.isNone()) return NodeArg(Attribute(NoneAttr{}), name);
  if (type.kind == compat::ArgKind::kScalarType && value.isInt()) {
    MAGI_ASSIGN_OR_RETURN(DType dtype, compat::FromScalarType(static_cast<c10::ScalarType>(value.toInt())));
    return NodeArg(Attribute(dtype), name);
  }
  if (value.isBool()) return NodeArg(Attribute(value.toBool()), name);
  if (compat::IsIntLike(value)) {
    MAGI_ASSIGN_OR_RETURN(int64_t i, compat::ToInt(value));
    if (type.kind == compat::ArgKind::kFloat) return NodeArg(Attribute(static_cast<double>(i)), name);
    if (type.kind == compat::ArgKind::kIntList) return NodeArg(Attribute(std::vector<int64_t>{i}), name);
    return NodeArg(Attribute(i), name);
  }
  if (value.isDouble()) return NodeArg(Attribute(value.toDouble()), name);
  if (value.isString()) return NodeArg(Attribute(value.toStringRef()), name);
  if (type.kind == compat::ArgKind::kIntList) {
    MAGI_ASSIGN_OR_RETURN(std::vector<int64_t> ints, compat::ToIntList(value));
    return NodeArg(Attribute(std::move(ints)), name);
  }
  if (value.isDoubleList()) return NodeArg(Attribute(value.toDoubleVector()), name);
  if (value.isBoolList()) {
    std::vector<bool> bools;
    for (bool b : value.toBoolList()) bools.push_back(b);
    return NodeArg(Attribute(std::move(bools)), name);
  }
  return absl::UnimplementedError(absl::StrCat("the default value ", value.tagKind(), " is not supported"));
}

absl::StatusOr<std::vector<NodeArg>> ConvertCallArguments(const c10::FunctionSchema& schema,
                                                          const c10::FunctionSchema* functional,
                                                          const AtenArgSource& given) {
  std::vector<NodeArg> args;
  size_t functional_index = 0;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    if (functional != nullptr && IsOutArgument(schema, i)) continue;
    const c10::Argument& argument =
        functional != nullptr ? functional->arguments().at(functional_index++) : schema.arguments()[i];
    std::string name = argument.kwarg_only() ? argument.name() : std::string();
    absl::StatusOr<std::optional<AtenArg>> value = given(i);
    absl::StatusOr<NodeArg> arg = !value.ok()       ? absl::StatusOr<NodeArg>(value.status())
                                  : value->has_value() ? ConvertAtenArgument(argument, **value, name)
                                                       : DefaultAtenArgument(argument, name);
    if (!arg.ok()) {
      return absl::Status(arg.status().code(),
                          absl::StrCat("argument '", argument.name(), "': ", arg.status().message()));
    }
    args.push_back(*std::move(arg));
  }
  return args;
}

absl::StatusOr<AtenArg> AtenArgFromIValue(const c10::IValue& value, const TensorResolver& resolve,
                                          const Device* meta_device) {
  if (value.isNone()) return AtenArg::None();
  if (value.isTensor()) {
    const at::Tensor& tensor = value.toTensor();
    if (!tensor.defined()) return AtenArg::Tensor(nullptr);
    MAGI_ASSIGN_OR_RETURN(Value * v, resolve(tensor));
    return AtenArg::Tensor(v);
  }
  if (value.isBool()) return AtenArg::Bool(value.toBool());
  if (value.isDouble()) return AtenArg::Float(value.toDouble());
  if (value.isComplexDouble()) {
    AtenArg a;
    a.kind = AtenArg::Kind::kComplex;
    c10::complex<double> c = value.toComplexDouble();
    a.f = c.real();
    a.imag = c.imag();
    return a;
  }
  if (compat::IsIntLike(value)) {
    MAGI_ASSIGN_OR_RETURN(int64_t i, compat::ToInt(value));
    return AtenArg::Int(i);
  }
  if (value.isString()) return AtenArg::String(value.toStringRef());
  if (value.isDevice()) {
    MAGI_ASSIGN_OR_RETURN(Device device, compat::FromTorchDevice(value.toDevice()));
    if (device.type == DeviceType::kMeta && meta_device != nullptr) device = *meta_device;
    return AtenArg::OfDevice(device);
  }
  if (value.isList()) {
    std::vector<AtenArg> items;
    for (const c10::IValue& element : value.toListRef()) {
      MAGI_ASSIGN_OR_RETURN(AtenArg item, AtenArgFromIValue(element, resolve, meta_device));
      items.push_back(std::move(item));
    }
    return AtenArg::List(std::move(items));
  }
  // A generator or another value the IR cannot hold: the schema check says why.
  AtenArg opaque;
  opaque.kind = AtenArg::Kind::kOpaque;
  opaque.s = value.tagKind();
  return opaque;
}

}  // namespace magi
