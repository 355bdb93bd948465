// magi._C: the Python extension module of the `magi` package (magi/frontend/python/magi).
// A thin binding: tensors cross as DLPack capsules (torch.utils.dlpack on the Python side),
// so the module links LibTorch's C++ libraries only, not libtorch_python; absl::Status
// errors become magi._C.MagiError with the status message (which names the FX node). This
// file is the one boundary where a Status turns into a Python exception.
#include <ATen/DLConvertor.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "magi/frontend/python/fx_compile.h"
#include "magi/frontend/python/fx_train_session.h"
#include "magi/runtime/deterministic/deterministic.h"

namespace py = pybind11;

namespace magi {
namespace {

constexpr char kCapsule[] = "dltensor";
constexpr char kUsedCapsule[] = "used_dltensor";

PyObject* g_magi_error = nullptr;

[[noreturn]] void Raise(const absl::Status& status) {
  PyErr_SetString(g_magi_error, std::string(status.message()).c_str());
  throw py::error_already_set();
}

at::Tensor FromCapsule(const py::handle& capsule) {
  if (!PyCapsule_IsValid(capsule.ptr(), kCapsule)) {
    throw py::type_error("expected an unused DLPack capsule (torch.utils.dlpack.to_dlpack)");
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsule));
  PyCapsule_SetName(capsule.ptr(), kUsedCapsule);  // the tensor below owns it now
  return at::fromDLPack(managed);
}

void DeleteUnusedCapsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kCapsule)) return;  // consumed: its consumer frees it
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsule));
  if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
}

py::capsule ToCapsule(const at::Tensor& tensor) {
  return py::capsule(at::toDLPack(tensor), kCapsule, &DeleteUnusedCapsule);
}

// The Python "optimization" dict into the frontends' CompileOptions (and their own
// calibration setting, set only when the dict names it).
void ApplyOptimizationDict(const py::dict& options, CompileOptions& compile, std::string& calibration) {
  for (const auto& [key, value] : options) {
    std::string name = py::str(key);
    if (name == "passes") {
      compile.optimization.passes = value.cast<std::string>();
    } else if (name == "memory_budget_bytes") {
      compile.optimization.memory_budget_bytes = value.cast<int64_t>();
    } else if (name == "device_profile") {
      compile.cost_model.device_profile = value.cast<std::string>();
    } else if (name == "calibration") {
      calibration = value.cast<std::string>();
    } else if (name == "partitions") {
      compile.partitioning.backends = value.cast<std::vector<std::string>>();
    } else if (name == "partition_min_nodes") {
      compile.partitioning.min_nodes = value.cast<int>();
    } else if (name == "partition_max_nodes") {
      compile.partitioning.max_nodes = value.cast<int>();
    } else if (name == "deterministic") {
      compile.deterministic = value.cast<bool>();
    } else if (name == "expected_plan_hash") {
      compile.expected_plan_hash = value.cast<std::string>();
    } else {
      throw py::value_error(absl::StrCat("unknown optimization option '", name, "'"));
    }
  }
}

class PyCompiledGraph {
 public:
  PyCompiledGraph(const std::string& json, const std::string& backend, const py::dict& optimization, bool log,
                  const std::string& source) {
    FxGraphOptions options;
    options.compile.backend = backend;
    ApplyOptimizationDict(optimization, options.compile, options.calibration);
    options.log = log;
    absl::StatusOr<std::unique_ptr<CompiledFxGraph>> graph;
    {
      py::gil_scoped_release release;
      graph = CompiledFxGraph::Create(json, options, source);
    }
    if (!graph.ok()) Raise(graph.status());
    graph_ = std::move(*graph);
  }

  py::list Run(const py::list& capsules) {
    std::vector<at::Tensor> inputs;
    inputs.reserve(capsules.size());
    for (const py::handle& capsule : capsules) inputs.push_back(FromCapsule(capsule));
    absl::StatusOr<std::vector<at::Tensor>> outputs;
    {
      py::gil_scoped_release release;
      outputs = graph_->Run(inputs);
      inputs.clear();
    }
    if (!outputs.ok()) Raise(outputs.status());
    py::list result;
    for (const at::Tensor& output : *outputs) result.append(ToCapsule(output));
    return result;
  }

  const std::vector<std::string>& input_names() const { return graph_->input_names(); }
  const std::vector<std::string>& output_names() const { return graph_->output_names(); }
  const std::string& plan_hash() const { return graph_->compiled().plan_hash; }
  std::string partitions() const { return FormatPartitions(graph_->compiled().partitions); }
  int num_nodes() const { return graph_->compiled().graph().num_nodes(); }

 private:
  std::unique_ptr<CompiledFxGraph> graph_;
};

// One rank of magi.train: FxTrainSession with tensors as DLPack capsules.
class PyTrainer {
 public:
  // `config`: shard_groups, reshard_after_forward, lr, betas, eps, weight_decay, backend,
  // optimization (a dict as CompiledGraph's), timeout_s.
  PyTrainer(const std::string& joint_json_path, const py::dict& config) {
    FxTrainOptions options;
    options.calibration = "none";  // a Python run measures nothing unless asked
    double timeout_s = 300;
    for (const auto& [key, value] : config) {
      std::string name = py::str(key);
      if (name == "shard_groups") {
        options.shard_groups = value.cast<std::vector<std::string>>();
      } else if (name == "reshard_after_forward") {
        options.reshard_after_forward = value.cast<bool>();
      } else if (name == "lr") {
        options.adamw.lr = value.cast<double>();
      } else if (name == "betas") {
        std::tie(options.adamw.beta1, options.adamw.beta2) = value.cast<std::pair<double, double>>();
      } else if (name == "eps") {
        options.adamw.eps = value.cast<double>();
      } else if (name == "weight_decay") {
        options.adamw.weight_decay = value.cast<double>();
      } else if (name == "backend") {
        options.compile.backend = value.cast<std::string>();
      } else if (name == "optimization") {
        ApplyOptimizationDict(value.cast<py::dict>(), options.compile, options.calibration);
      } else if (name == "timeout_s") {
        timeout_s = value.cast<double>();
      } else {
        throw py::value_error(absl::StrCat("unknown training option '", name, "'"));
      }
    }
    absl::StatusOr<std::unique_ptr<FxTrainSession>> session;
    {
      py::gil_scoped_release release;
      session = FxTrainSession::Create(joint_json_path, options,
                                       std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
    }
    if (!session.ok()) Raise(session.status());
    session_ = std::move(*session);
  }

  double Step(const py::list& capsules) {
    std::vector<at::Tensor> batch;
    for (const py::handle& capsule : capsules) batch.push_back(FromCapsule(capsule));
    absl::StatusOr<double> loss;
    {
      py::gil_scoped_release release;
      loss = session_->trainer().Step(batch);
    }
    if (!loss.ok()) Raise(loss.status());
    return *loss;
  }

  py::list GatherParameters() {
    absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> parameters;
    {
      py::gil_scoped_release release;
      parameters = session_->trainer().GatherFullParameters();
    }
    if (!parameters.ok()) Raise(parameters.status());
    py::list result;
    for (const auto& [name, tensor] : *parameters) result.append(py::make_tuple(name, ToCapsule(tensor)));
    return result;
  }

  py::list Buffers() {
    py::list result;
    for (const auto& [name, tensor] : session_->trainer().buffers()) {
      result.append(py::make_tuple(name, ToCapsule(tensor)));
    }
    return result;
  }

  void SaveCheckpoint(const std::string& root, int keep_last, const std::string& config) {
    CheckpointOptions options;
    options.keep_last = keep_last;
    options.config = config;
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = session_->trainer().SaveCheckpoint(root, options);
    }
    if (!status.ok()) Raise(status);
  }

  void LoadCheckpoint(const std::string& root, const std::string& config) {
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = session_->trainer().LoadCheckpoint(root, config);
    }
    if (!status.ok()) Raise(status);
  }

  FxTrainSession& session() { return *session_; }

 private:
  std::unique_ptr<FxTrainSession> session_;
};

}  // namespace
}  // namespace magi

PYBIND11_MODULE(_C, m) {
  m.doc() = "Magi's compiler and runtimes for the magi Python package (see magi/__init__.py).";
  // Created once and never freed: the module's exception type lives as long as the process.
  magi::g_magi_error = PyErr_NewException("magi._C.MagiError", PyExc_RuntimeError, nullptr);
  m.attr("MagiError") = py::handle(magi::g_magi_error);
  m.def(
      "enable_deterministic_mode",
      []() {
        absl::StatusOr<std::string> settings = magi::EnableDeterministicMode();
        if (!settings.ok()) magi::Raise(settings.status());
        return *settings;
      },
      "Deterministic mode's process-wide settings (docs/deterministic.md); returns what is in place.");
  py::class_<magi::PyTrainer>(m, "Trainer")
      .def(py::init<const std::string&, const py::dict&>(), py::arg("joint_json_path"), py::arg("config") = py::dict(),
           "Connects to the other ranks, imports the joint graph file and compiles it for FSDP training.")
      .def("step", &magi::PyTrainer::Step, py::arg("batch"),
           "One AdamW step on this rank's batch (DLPack capsules in data_inputs order); returns its loss.")
      .def("gather_parameters", &magi::PyTrainer::GatherParameters,
           "Collective: every parameter, unsharded, as (name, capsule).")
      .def("buffers", &magi::PyTrainer::Buffers, "This rank's buffers as (name, capsule).")
      .def("save_checkpoint", &magi::PyTrainer::SaveCheckpoint, py::arg("root"), py::arg("keep_last") = 0,
           py::arg("config") = "", "Collective: a committed checkpoint step under root.")
      .def("load_checkpoint", &magi::PyTrainer::LoadCheckpoint, py::arg("root"), py::arg("config") = "",
           "Collective: restores the newest committed step under root.")
      .def_property_readonly("rank", [](magi::PyTrainer& t) { return t.session().env().rank; })
      .def_property_readonly("world_size", [](magi::PyTrainer& t) { return t.session().env().world_size; })
      .def_property_readonly("data_inputs", [](magi::PyTrainer& t) { return t.session().trainer().data_inputs(); })
      .def_property_readonly("steps_taken", [](magi::PyTrainer& t) { return t.session().trainer().steps_taken(); })
      .def_property_readonly("plan_hash", [](magi::PyTrainer& t) { return t.session().trainer().plan_hash(); })
      .def_property_readonly("applied_pipeline",
                             [](magi::PyTrainer& t) { return t.session().trainer().applied_pipeline(); });
  py::class_<magi::PyCompiledGraph>(m, "CompiledGraph")
      .def(py::init<const std::string&, const std::string&, const py::dict&, bool, const std::string&>(),
           py::arg("json"), py::arg("backend") = "interpreter", py::arg("optimization") = py::dict(),
           py::arg("log") = false, py::arg("source") = "fx graph",
           "Imports the FX graph `json` (tools/fx_export.py's format) and compiles it with `backend`.")
      .def("run", &magi::PyCompiledGraph::Run, py::arg("inputs"),
           "Runs the graph on DLPack capsules in input_names order; returns capsules in output_names order.")
      .def_property_readonly("input_names", &magi::PyCompiledGraph::input_names)
      .def_property_readonly("output_names", &magi::PyCompiledGraph::output_names)
      .def_property_readonly("plan_hash", &magi::PyCompiledGraph::plan_hash)
      .def_property_readonly("partitions", &magi::PyCompiledGraph::partitions)
      .def_property_readonly("num_nodes", &magi::PyCompiledGraph::num_nodes);
}
