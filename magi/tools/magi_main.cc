// `magi`: the command-line driver for Magi's IR, in the style of mlir-opt.
//
//   magi verify IN                       parse and verify; prints "ok" or the problems
//   magi fmt IN [-o OUT]                 print the canonical text form
//   magi convert IN -o OUT               convert between .mir, .pb and .json by extension
//   magi dot IN [-o OUT] [--graph=NAME]  Graphviz DOT of one graph (the first by default)
//   magi opt IN --passes=SPEC [-o OUT]   run a pass pipeline (e.g. "fixed-point(cse,dce)"),
//                                        verifying after each pass; --stats=true prints timings;
//                                        --dump_dir=DIR writes the module (.mir, .dot) after each pass
//   magi simulate IN [--device=h200] [--world=N] [--trace=trace.json] [--calibration=CSV]
//                                        predicted step time, exposed communication and peak
//                                        memory; the timeline as Chrome trace JSON (Perfetto)
//   magi plan IN --memory_budget_gb=B [--device=h200] [-o OUT]
//                                        strategy search: the fastest pipeline that fits B GB
//                                        per rank, with every candidate's prediction; -o writes
//                                        the optimized module
//   magi plan IN --frontier=LO:HI:STEP [--svg=OUT.svg]
//                                        the budget frontier: the search at every budget of the
//                                        range (GB), a table of the plans, and a chart of them
//   magi registry                        list every registered pass, backend, ... by kind, and the
//                                        compile options of deterministic mode
//   magi compare A B                     bitwise comparison of two magi-tensors-v1 dumps (PREFIX,
//                                        PREFIX.json or PREFIX.bin): "identical" or the first
//                                        differing tensor and element; exit status 3 if they differ
//   magi --help | -h | help [COMMAND]    list the commands, or one command's usage
//   magi COMMAND --help | -h             one command's usage
//
// Exit status: 0 on success (and for --help), 1 on bad input (with a message naming
// file and line), 2 on bad usage, 3 when `compare` finds a difference.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "magi/analysis/liveness.h"
#include "magi/analysis/memory_plan.h"
#include "magi/base/file.h"
#include "magi/base/numbers.h"
#include "magi/base/status_macros.h"
#include "magi/compiler/partition_map.h"
#include "magi/cost/calibration.h"
#include "magi/cost/cost_model.h"
#include "magi/compiler/compile_options.h"
#include "magi/cost/simulator.h"
#include "magi/ir/dot_export.h"
#include "magi/ir/magi_ops.h"
#include "magi/ir/printer.h"
#include "magi/ir/verifier.h"
#include "magi/passes/pass.h"
#include "magi/passes/pipeline.h"
#include "magi/registry/registry.h"
#include "magi/search/auto_recompute_registration.h"
#include "magi/search/exhaustive_search.h"
#include "magi/search/frontier_svg.h"
#include "magi/search/plan_evaluator.h"
#include "magi/search/strategy_search.h"
#include "magi/tools/ir_io.h"
#include "magi/tools/compare_command.h"

namespace magi {
namespace {

constexpr char kFilesNote[] = "IR files: .mir (text), .pb (binary protobuf), .json (protobuf JSON); OUT \"-\" is stdout.\n";

struct CommandLine {
  std::string command;
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;  // "-o" and "--name=value"
  bool help = false;                         // --help or -h anywhere after the command
};

absl::StatusOr<CommandLine> ParseCommandLine(int argc, char** argv) {
  if (argc < 2) return absl::InvalidArgumentError("no command given");
  CommandLine line;
  line.command = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      line.help = true;
    } else if (arg == "-o") {
      if (i + 1 >= argc) return absl::InvalidArgumentError("-o needs a file name");
      line.flags["o"] = argv[++i];
    } else if (absl::StartsWith(arg, "--")) {
      std::vector<std::string> parts = absl::StrSplit(arg.substr(2), absl::MaxSplits('=', 1));
      if (parts.size() != 2)
        return absl::InvalidArgumentError(absl::StrCat("flag ", arg, " needs a value (--name=value)"));
      line.flags[parts[0]] = parts[1];
    } else {
      line.positional.push_back(arg);
    }
  }
  return line;
}

// The arguments each command takes (checked before anything runs) and its usage text.
struct CommandSpec {
  const char* name;
  size_t positional;
  std::vector<std::string> allowed_flags;
  std::vector<std::string> required_flags;
  const char* synopsis;  // the arguments, after "magi NAME"
  const char* help;      // what it does and what each flag means
};

const std::vector<CommandSpec>& CommandSpecs() {
  static const auto* specs = new std::vector<CommandSpec>{
      {"verify", 1, {}, {}, "IN", "Parses and verifies IN; prints \"ok\" or the problems (file:line:col, node).\n"},
      {"fmt", 1, {"o"}, {}, "IN [-o OUT]", "Prints IN in canonical text form.\n  -o OUT  where to write (default stdout)\n"},
      {"convert", 1, {"o"}, {"o"}, "IN -o OUT", "Converts between .mir, .pb and .json, by file extension.\n  -o OUT  the output file\n"},
      {"dot",
       1,
       {"o", "graph"},
       {},
       "IN [-o OUT] [--graph=NAME]",
       "Writes one graph as Graphviz DOT (render with: dot -Tsvg OUT -o g.svg).\n"
       "  -o OUT         where to write (default stdout)\n"
       "  --graph=NAME   the graph (default: the module's first)\n"},
      {"partition-map",
       1,
       {"o", "graph", "compact"},
       {},
       "IN [-o OUT] [--graph=NAME] [--compact=true]",
       "Writes which nodes of a partitioned step (magi::call graphs, e.g. from examples:train\n"
       "--dump_graph with --partition_backends) went to which partition and backend, as DOT.\n"
       "  -o OUT          where to write (default stdout); render with: dot -Tsvg OUT -o map.svg\n"
       "  --graph=NAME    the step graph (default: the module's first)\n"
       "  --compact=true  one box per partition with its most frequent ops\n"},
      {"opt",
       1,
       {"o", "passes", "stats", "dump_dir", "device", "calibration"},
       {"passes"},
       "IN --passes=SPEC [-o OUT] [--stats=true] [--dump_dir=DIR] [--device=...] [--calibration=CSV]",
       "Runs a pass pipeline, verifying after every pass.\n"
       "  --passes=SPEC   e.g. dce,cse or fixed-point(cse,dce) or bucket-collectives{max_mb=64}\n"
       "                  (`magi registry` lists the passes)\n"
       "  -o OUT          where to write the result (default stdout)\n"
       "  --stats=true    print each pass's runs, changes and time to stderr\n"
       "  --dump_dir=DIR  write the module (.mir, .dot) after each pass into DIR\n"
       "  --device=NAME   auto-recompute ranks with this cost model (cpu, h200 or a .profile file)\n"
       "  --calibration=CSV  ... and these measured op times; with either flag, a pipeline `magi plan`\n"
       "                  printed reproduces the module it wrote (default: each auto-recompute\n"
       "                  builds its model from its own profile=NAME, uncalibrated)\n"},
      {"simulate",
       1,
       {"device", "world", "trace", "calibration", "graph", "live_at_peak"},
       {},
       "IN [--device=h200|cpu|FILE.profile] [--world=N] [--trace=OUT.json] [--calibration=CSV] [--graph=NAME] "
       "[--live_at_peak=N]",
       "Predicts step time, exposed communication and peak memory of a scheduled graph.\n"
       "  --device=NAME        device profile: built in (cpu, h200) or a .profile file (default h200)\n"
       "  --world=N            model every collective as spanning N ranks (positive integer)\n"
       "  --trace=OUT.json     write the timeline as Chrome trace JSON (opens in Perfetto)\n"
       "  --calibration=CSV    measured op times (and partition calls' working bytes) that replace the formulas\n"
       "  --graph=NAME         the graph (default: the module's first)\n"
       "  --live_at_peak=N     list the N largest storages live at the memory peak (and what the peak\n"
       "                       node allocates while it runs)\n"},
      {"plan",
       1,
       {"o", "memory_budget_gb", "budget_gb", "frontier", "svg", "exhaustive", "threads", "device", "calibration", "graph"},
       {},
       "IN (--memory_budget_gb=B | --frontier=LO:HI:STEP [--svg=OUT.svg] [--exhaustive=true]) [--device=...] [--calibration=CSV] "
       "[--graph=NAME] [--threads=N] [-o OUT]",
       "Strategy search: the fastest pass pipeline whose predicted peak fits B GB per rank,\n"
       "with every candidate's prediction.\n"
       "  --memory_budget_gb=B the memory budget per rank (a positive, finite number of GB; --budget_gb, its\n"
       "                       old name, is taken too)\n"
       "  --frontier=LO:HI:STEP  instead of one budget: search every budget from LO to HI GB in\n"
       "                       steps of STEP (or a list: --frontier=38,40,45) and print the\n"
       "                       predicted step time, peak and plan of each\n"
       "  --svg=OUT.svg        with --frontier: also draw the frontier as an SVG chart\n"
       "  --exhaustive=true    with --frontier: also try every setting of a fixed knob space\n"
       "                       (exhaustive_search.h; for small steps) and print the search's gap\n"
       "  --threads=N          candidates evaluated in parallel (default: one per core)\n"
       "  --device=NAME        device profile, as for simulate (default h200)\n"
       "  --calibration=CSV    measured op times that replace the formulas\n"
       "  --graph=NAME         the graph (default: the module's first)\n"
       "  -o OUT               write the optimized module\n"},
      {"registry", 0, {}, {}, "",
       "Lists every registered component (passes, backends, ...) by kind, one line per kind\n"
       "(\"pass: cse, dce, ...\"), and the compile options of deterministic mode (\"compile-option: ...\";\n"
       "docs/deterministic.md).\n"},
      {"compare", 2, {}, {}, "A B",
       "Compares two magi-tensors-v1 dumps bitwise (examples:train --dump_dir, examples:generate --logits_out;\n"
       "A and B are PREFIX, PREFIX.json or PREFIX.bin). Prints \"identical: ...\" (exit 0) or the first\n"
       "differing tensor and element with both values and their bits (exit 3). Checkpoints (LibTorch\n"
       "archives) are compared by //magi/training:compare_checkpoints.\n"},
  };
  return *specs;
}

const CommandSpec* FindCommand(const std::string& name) {
  for (const CommandSpec& spec : CommandSpecs()) {
    if (name == spec.name) return &spec;
  }
  return nullptr;
}

// "usage:" and one line per command (for `magi --help` and usage errors).
std::string GeneralUsage() {
  std::string usage = "usage:\n";
  for (const CommandSpec& spec : CommandSpecs()) {
    absl::StrAppend(&usage, "  magi ", spec.name, *spec.synopsis ? " " : "", spec.synopsis, "\n");
  }
  absl::StrAppend(&usage, "  magi COMMAND --help   (one command's usage)\n", kFilesNote);
  return usage;
}

// One command's usage (for `magi COMMAND --help`).
std::string CommandUsage(const CommandSpec& spec) {
  return absl::StrCat("usage: magi ", spec.name, *spec.synopsis ? " " : "", spec.synopsis, "\n\n", spec.help,
                      spec.positional > 0 ? kFilesNote : "");
}

// Usage errors: an unknown command, wrong argument count, unknown or missing flags.
absl::Status ValidateUsage(const CommandLine& line) {
  for (const CommandSpec& spec : CommandSpecs()) {
    if (line.command != spec.name) continue;
    if (line.positional.size() != spec.positional) {
      return absl::InvalidArgumentError(absl::StrCat("'", line.command, "' takes ", spec.positional,
                                                     " file argument(s), got ", line.positional.size()));
    }
    for (const auto& [flag, value] : line.flags) {
      bool ok = false;
      for (const std::string& name : spec.allowed_flags) ok = ok || name == flag;
      if (!ok)
        return absl::InvalidArgumentError(
            absl::StrCat("'", line.command, "' does not take ", flag == "o" ? "-o" : "--" + flag));
    }
    if (line.flags.count("budget_gb")) {  // the deprecated name of --memory_budget_gb
      if (line.flags.count("memory_budget_gb")) {
        return absl::InvalidArgumentError("--budget_gb is the old name of --memory_budget_gb: give one of them");
      }
      return absl::OkStatus();  // checked again under its new name (main renames it)
    }
    if (line.command == std::string("plan") && line.flags.count("memory_budget_gb") == line.flags.count("frontier")) {
      return absl::InvalidArgumentError(line.flags.count("memory_budget_gb")
                                            ? "'plan' takes --memory_budget_gb=... or --frontier=..., not both"
                                            : "'plan' needs --memory_budget_gb=... (or --frontier=LO:HI:STEP)");
    }
    if (line.command == std::string("plan") && !line.flags.count("frontier") &&
        (line.flags.count("svg") || line.flags.count("exhaustive"))) {
      return absl::InvalidArgumentError("'plan' takes --svg and --exhaustive only with --frontier");
    }
    for (const std::string& flag : spec.required_flags) {
      if (!line.flags.count(flag)) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", line.command, "' needs ", flag == "o" ? "-o OUT" : "--" + flag + "=..."));
      }
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown command '", line.command, "'"));
}

std::string FlagOr(const CommandLine& line, const std::string& name, std::string fallback) {
  auto it = line.flags.find(name);
  return it == line.flags.end() ? fallback : it->second;
}

// The graph --graph names, or the module's first.
absl::StatusOr<Graph*> SelectGraph(const CommandLine& line, const Module& module) {
  std::vector<Graph*> graphs = module.graphs();
  if (graphs.empty()) return absl::InvalidArgumentError(absl::StrCat(line.positional[0], ": the module has no graph"));
  if (!line.flags.count("graph")) return graphs[0];
  Graph* graph = module.FindGraph(line.flags.at("graph"));
  if (graph == nullptr) {
    std::vector<std::string> names;
    for (const Graph* g : graphs) names.push_back(g->name());
    return absl::NotFoundError(absl::StrCat("no graph @", line.flags.at("graph"), " in ", line.positional[0],
                                            "; it has: ", absl::StrJoin(names, ", ")));
  }
  return graph;
}

// A cost model from --device (default h200) and --calibration.
absl::StatusOr<CostModel> MakeCostModel(const CommandLine& line, std::unique_ptr<CalibrationTable>& calibration) {
  MAGI_ASSIGN_OR_RETURN(DeviceProfile profile, LoadDeviceProfile(FlagOr(line, "device", "h200")));
  if (line.flags.count("calibration")) {
    MAGI_ASSIGN_OR_RETURN(CalibrationTable table, CalibrationTable::Load(line.flags.at("calibration")));
    calibration = std::make_unique<CalibrationTable>(std::move(table));
  }
  CostModel model(std::move(profile), calibration.get());
  if (line.flags.count("world")) {
    int64_t world = 0;
    if (!absl::SimpleAtoi(line.flags.at("world"), &world) || world < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--world must be a positive integer, not '", line.flags.at("world"), "'"));
    }
    model.set_world_size_override(world);
  }
  return model;
}

// What the peak is made of: the node, what it allocates while it runs, and the largest
// storages live there with what made them.
void PrintLiveAtPeak(const Graph& graph, const CostModel& model, const SimulationResult& result, int top) {
  std::vector<Node*> nodes = graph.nodes();
  absl::StatusOr<Liveness> liveness = ComputeLiveness(graph, nodes);
  if (!liveness.ok()) return;  // Simulate planned it: cannot fail here
  const Node* peak = result.peak_node >= 0 ? nodes[result.peak_node] : nullptr;
  std::vector<StorageLifetime> live = StoragesLiveAt(*liveness, result.peak_node);
  int64_t total = 0;
  for (const StorageLifetime& storage : live) total += storage.bytes;
  std::printf("peak at node %d (%s%s%s): %zu storages live, %.3f MB (its results included)", result.peak_node,
              peak != nullptr ? peak->op().c_str() : "the inputs", peak != nullptr && peak->op() == kCallOp ? " @" : "",
              peak != nullptr && peak->op() == kCallOp ? CalleeName(*peak).c_str() : "", live.size(), total / 1e6);
  const int64_t working_bytes = peak != nullptr ? model.WorkingBytes(*peak) : 0;
  if (working_bytes > 0) {
    std::printf("; while it runs it allocates %.3f MB, its results included", working_bytes / 1e6);
  }
  std::printf("\n");
  for (int i = 0; i < static_cast<int>(live.size()) && i < top; ++i) {
    const Value& value = *live[i].value;
    std::string made_by = value.is_graph_input() ? "input" : value.producer()->op();
    if (!value.is_graph_input() && !value.producer()->annotations().module_path.empty()) {
      absl::StrAppend(&made_by, " @", value.producer()->annotations().module_path);
    }
    std::printf("  %10.3f MB  %%%s  %s  %s  [%d..%d]\n", live[i].bytes / 1e6, value.name().c_str(),
                value.type().ToString().c_str(), made_by.c_str(), live[i].born, live[i].dies);
  }
}

absl::Status RunSimulate(const CommandLine& line) {
  int live_at_peak = 0;
  if (line.flags.count("live_at_peak") &&
      (!absl::SimpleAtoi(line.flags.at("live_at_peak"), &live_at_peak) || live_at_peak < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--live_at_peak must be a positive integer, not '", line.flags.at("live_at_peak"), "'"));
  }
  MAGI_ASSIGN_OR_RETURN(std::unique_ptr<Module> module, LoadModule(line.positional[0]));
  MAGI_ASSIGN_OR_RETURN(Graph * graph, SelectGraph(line, *module));
  std::unique_ptr<CalibrationTable> calibration;
  MAGI_ASSIGN_OR_RETURN(CostModel model, MakeCostModel(line, calibration));
  MAGI_ASSIGN_OR_RETURN(SimulationResult result, Simulate(*graph, model));
  std::printf("graph @%s on %s: %d nodes, %d collectives\n", graph->name().c_str(), model.profile().name.c_str(),
              graph->num_nodes(), result.num_collectives);
  std::printf("  step time            %10.3f ms\n", result.step_seconds * 1e3);
  std::printf("  compute              %10.3f ms\n", result.compute_seconds * 1e3);
  std::printf("  communication        %10.3f ms (%.1f%% hidden behind compute)\n", result.communication_seconds * 1e3,
              100 * result.overlap_fraction());
  std::printf("  exposed communication%10.3f ms\n", result.exposed_communication_seconds * 1e3);
  std::printf("  peak memory          %10.3f MB\n", result.peak_bytes / 1e6);
  if (live_at_peak > 0) PrintLiveAtPeak(*graph, model, result, live_at_peak);
  if (line.flags.count("trace")) {
    MAGI_RETURN_IF_ERROR(WriteOutput(line.flags.at("trace"), ChromeTraceJson(result, graph->name())));
  }
  return absl::OkStatus();
}

// Budgets in bytes from --frontier: "LO:HI:STEP" (GB, HI included) or "A,B,C".
absl::StatusOr<std::vector<int64_t>> ParseFrontier(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("--frontier=", text, ": ", why));
  };
  std::vector<double> gbs;
  std::vector<std::string> range = absl::StrSplit(text, ':');
  if (range.size() == 3) {
    double low = 0, high = 0, step = 0;
    if (!ParseFiniteDouble(range[0], &low) || !ParseFiniteDouble(range[1], &high) ||
        !ParseFiniteDouble(range[2], &step)) {
      return bad("LO, HI and STEP must be finite numbers of GB");
    }
    if (low <= 0 || high < low || step <= 0) return bad("needs 0 < LO <= HI and STEP > 0");
    const double count = std::floor((high - low) / step + 1e-9) + 1;
    if (count > 1000) return bad(absl::StrFormat("%.0f budgets; at most 1000", count));
    for (int i = 0; i < static_cast<int>(count); ++i) gbs.push_back(low + i * step);
  } else if (range.size() == 1) {
    for (absl::string_view part : absl::StrSplit(text, ',')) {
      double gb = 0;
      if (!ParseFiniteDouble(part, &gb) || gb <= 0) {
        return bad(absl::StrCat("'", part, "' is not a positive, finite number of GB"));
      }
      gbs.push_back(gb);
    }
  } else {
    return bad("expected LO:HI:STEP or a list A,B,C (GB)");
  }
  std::vector<int64_t> budgets;
  for (double gb : gbs) {
    std::optional<int64_t> bytes = BytesFromDouble(gb * 1e9);
    if (!bytes) return bad(absl::StrCat(gb, " GB is more bytes than int64 can hold"));
    budgets.push_back(*bytes);
  }
  return budgets;
}

absl::Status RunFrontier(const CommandLine& line, const Module& module, const Graph& graph, const CostModel& model,
                         const SearchOptions& options) {
  MAGI_ASSIGN_OR_RETURN(std::vector<int64_t> budgets, ParseFrontier(line.flags.at("frontier")));
  MAGI_ASSIGN_OR_RETURN(std::vector<FrontierPoint> points,
                        SearchFrontier(module, graph.name(), model, budgets, options));
  std::printf("graph @%s on %s: %d nodes; budget frontier\n%s", graph.name().c_str(), model.profile().name.c_str(),
              graph.num_nodes(), FormatFrontier(points).c_str());
  if (FlagOr(line, "exhaustive", "false") == "true") {
    // The yardstick: the best setting of a fixed space, tried whole, at each budget.
    PlanEvaluator evaluator(module, graph.name(), model, options.allow_recompute);
    std::vector<StrategyKnobs> settings = ExhaustiveSettings(graph, ExhaustiveSpace());
    const int threads = options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
    std::printf("exhaustive search over %zu settings (every kept-group subset x bucket sizes x prefetch x cap)\n",
                settings.size());
    std::printf("%10s %10s %14s %8s %9s  %s\n", "budget_GB", "search_ms", "exhaustive_ms", "gap", "time_s",
                "exhaustive best");
    for (const FrontierPoint& point : points) {
      auto begin = std::chrono::steady_clock::now();
      MAGI_ASSIGN_OR_RETURN(ExhaustiveResult best,
                            ExhaustiveBest(evaluator, settings, point.budget_bytes, std::max(1, threads)));
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
      if (!best.found || !point.status.ok()) {
        std::printf("%10.6g %10s %14s %8s %9.2f  %s\n", point.budget_bytes / 1e9,
                    point.status.ok() ? absl::StrFormat("%.3f", point.plan.chosen.prediction.step_seconds * 1e3).c_str()
                                      : "-",
                    best.found ? absl::StrFormat("%.3f", best.best.prediction.step_seconds * 1e3).c_str() : "-", "-",
                    seconds, best.found ? best.best.pipeline.c_str() : "(nothing fits)");
        continue;
      }
      const double search_ms = point.plan.chosen.prediction.step_seconds * 1e3;
      const double exhaustive_ms = best.best.prediction.step_seconds * 1e3;
      const std::string pipeline =
          PlanPipeline(best.knobs, best.best.recomputed ? point.budget_bytes : 0, model);
      std::printf("%10.6g %10.3f %14.3f %+7.2f%% %9.2f  %s\n", point.budget_bytes / 1e9, search_ms, exhaustive_ms,
                  100 * (search_ms / exhaustive_ms - 1), seconds, pipeline.c_str());
    }
  }
  if (!line.flags.count("svg")) return absl::OkStatus();
  return WriteFileAtomically(
      line.flags.at("svg"),
      FrontierSvg(points, absl::StrFormat("@%s (%d nodes) on %s: predicted step vs memory budget", graph.name(),
                                          graph.num_nodes(), model.profile().name)));
}

absl::Status RunPlan(const CommandLine& line) {
  MAGI_ASSIGN_OR_RETURN(std::unique_ptr<Module> module, LoadModule(line.positional[0]));
  MAGI_ASSIGN_OR_RETURN(Graph * graph, SelectGraph(line, *module));
  SearchOptions options;
  if (line.flags.count("threads")) {
    if (!absl::SimpleAtoi(line.flags.at("threads"), &options.threads) || options.threads < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--threads must be a positive integer, not '", line.flags.at("threads"), "'"));
    }
  }
  if (line.flags.count("frontier")) {
    if (line.flags.count("o")) return absl::InvalidArgumentError("'plan --frontier' writes no module (-o)");
    std::unique_ptr<CalibrationTable> calibration;
    MAGI_ASSIGN_OR_RETURN(CostModel model, MakeCostModel(line, calibration));
    return RunFrontier(line, *module, *graph, model, options);
  }
  double budget_gb = 0;
  if (!ParseFiniteDouble(line.flags.at("memory_budget_gb"), &budget_gb) || budget_gb <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--memory_budget_gb must be a positive, finite number, not '", line.flags.at("memory_budget_gb"), "'"));
  }
  std::optional<int64_t> budget_bytes = BytesFromDouble(budget_gb * 1e9);
  if (!budget_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--memory_budget_gb=", line.flags.at("memory_budget_gb"), " is more bytes than int64 can hold"));
  }
  std::unique_ptr<CalibrationTable> calibration;
  MAGI_ASSIGN_OR_RETURN(CostModel model, MakeCostModel(line, calibration));
  MAGI_ASSIGN_OR_RETURN(StrategyPlan plan, SearchStrategy(*module, graph->name(), model, *budget_bytes, options));
  std::printf("%s", FormatStrategyPlan(plan).c_str());
  std::printf("reproduce: magi opt %s --passes='%s' --device=%s%s\n", line.positional[0].c_str(), plan.pipeline.c_str(),
              FlagOr(line, "device", "h200").c_str(),
              line.flags.count("calibration") ? absl::StrCat(" --calibration=", line.flags.at("calibration")).c_str()
                                              : "");
  if (!line.flags.count("o")) return absl::OkStatus();
  return SaveModule(*plan.optimized, line.flags.at("o"));
}

absl::Status RunOpt(const CommandLine& line) {
  MAGI_ASSIGN_OR_RETURN(std::unique_ptr<Module> module, LoadModule(line.positional[0]));
  MAGI_ASSIGN_OR_RETURN(PassPipeline pipeline, ParsePassPipeline(FlagOr(line, "passes", "")));
  PassManager manager(/*verify_each=*/true);
  std::unique_ptr<CalibrationTable> calibration;  // outlives the passes built with it
  if (line.flags.count("device") || line.flags.count("calibration")) {
    MAGI_ASSIGN_OR_RETURN(CostModel model, MakeCostModel(line, calibration));
    MAGI_RETURN_IF_ERROR(manager.AddPipeline(pipeline, AutoRecomputeWithCostModel(std::move(model))));
  } else {
    MAGI_RETURN_IF_ERROR(manager.AddPipeline(pipeline));
  }
  if (line.flags.count("dump_dir")) {
    std::string dir = line.flags.at("dump_dir");
    manager.set_after_pass_hook([dir](int index, absl::string_view pass_name, const Module& after) -> absl::Status {
      std::string stem = absl::StrFormat("%s/%02d-%s", dir, index, pass_name);
      MAGI_RETURN_IF_ERROR(WriteFileAtomically(stem + ".mir", PrintModule(after)));
      std::vector<Graph*> graphs = after.graphs();
      if (!graphs.empty()) MAGI_RETURN_IF_ERROR(WriteFileAtomically(stem + ".dot", ExportDot(*graphs[0])));
      return absl::OkStatus();
    });
  }
  MAGI_RETURN_IF_ERROR(manager.Run(*module).status());
  if (FlagOr(line, "stats", "") == "true") {
    for (const PassStatistics& stats : manager.statistics()) {
      std::fprintf(stderr, "%-20s runs %d, changed %d, %.3f ms\n", stats.name.c_str(), stats.runs, stats.changed,
                   stats.seconds * 1e3);
    }
  }
  return SaveModule(*module, FlagOr(line, "o", "-"));
}

absl::Status Run(const CommandLine& line) {
  const std::string& command = line.command;
  if (command == "verify") {
    MAGI_RETURN_IF_ERROR(LoadModule(line.positional[0]).status());
    std::printf("ok\n");
    return absl::OkStatus();
  }
  if (command == "fmt" || command == "convert") {
    MAGI_ASSIGN_OR_RETURN(std::unique_ptr<Module> module, LoadModule(line.positional[0]));
    return SaveModule(*module, FlagOr(line, "o", "-"));
  }
  if (command == "dot") {
    MAGI_ASSIGN_OR_RETURN(std::unique_ptr<Module> module, LoadModule(line.positional[0]));
    MAGI_ASSIGN_OR_RETURN(Graph * graph, SelectGraph(line, *module));
    return WriteOutput(FlagOr(line, "o", "-"), ExportDot(*graph));
  }
  if (command == "partition-map") {
    MAGI_ASSIGN_OR_RETURN(std::unique_ptr<Module> module, LoadModule(line.positional[0]));
    MAGI_ASSIGN_OR_RETURN(Graph * graph, SelectGraph(line, *module));
    std::string compact = FlagOr(line, "compact", "false");
    if (compact != "true" && compact != "false") {
      return absl::InvalidArgumentError(absl::StrCat("--compact is true or false, got '", compact, "'"));
    }
    return WriteOutput(FlagOr(line, "o", "-"), PartitionMapDot(*module, *graph, compact == "true"));
  }
  if (command == "opt") return RunOpt(line);
  if (command == "simulate") return RunSimulate(line);
  if (command == "plan") return RunPlan(line);
  if (command == "registry") {
    for (const auto& [kind, names] : AllRegistries())
      std::printf("%s: %s\n", kind.c_str(), absl::StrJoin(names, ", ").c_str());
    std::vector<std::string> options;
    for (const CompileOptionDoc& doc : DocumentedCompileOptions()) options.push_back(doc.name);
    std::printf("compile-option: %s\n", absl::StrJoin(options, ", ").c_str());
    return absl::OkStatus();
  }
  return absl::InternalError(absl::StrCat("command '", command, "' has no implementation"));
}

// The exit status of a valid command line (failures are returned as a Status: exit 1).
absl::StatusOr<int> RunCommand(const CommandLine& line) {
  if (line.command == "compare") return CompareTensorFiles(line.positional[0], line.positional[1]);
  MAGI_RETURN_IF_ERROR(Run(line));
  return 0;
}

}  // namespace
}  // namespace magi

int main(int argc, char** argv) {
  absl::StatusOr<magi::CommandLine> line = magi::ParseCommandLine(argc, argv);
  if (!line.ok()) {
    std::fprintf(stderr, "magi: %s\n%s", std::string(line.status().message()).c_str(), magi::GeneralUsage().c_str());
    return 2;
  }
  if (line->command == "help" || line->command == "--help" || line->command == "-h") {
    // `magi help opt` is `magi opt --help`.
    if (line->command == "help" && line->positional.size() == 1 && line->flags.empty()) {
      if (const magi::CommandSpec* spec = magi::FindCommand(line->positional[0])) {
        std::printf("%s", magi::CommandUsage(*spec).c_str());
        return 0;
      }
    }
    std::printf("%s", magi::GeneralUsage().c_str());
    return 0;
  }
  if (line->help) {
    const magi::CommandSpec* spec = magi::FindCommand(line->command);
    if (spec == nullptr) {
      std::fprintf(stderr, "magi: unknown command '%s'\n%s", line->command.c_str(), magi::GeneralUsage().c_str());
      return 2;
    }
    std::printf("%s", magi::CommandUsage(*spec).c_str());
    return 0;
  }
  absl::Status usage = magi::ValidateUsage(*line);
  if (usage.ok() && line->flags.count("budget_gb")) {  // the deprecated name of --memory_budget_gb
    line->flags["memory_budget_gb"] = line->flags["budget_gb"];
    line->flags.erase("budget_gb");
    usage = magi::ValidateUsage(*line);
  }
  if (!usage.ok()) {
    std::fprintf(stderr, "magi: %s\n%s", std::string(usage.message()).c_str(), magi::GeneralUsage().c_str());
    return 2;
  }
  absl::StatusOr<int> code = magi::RunCommand(*line);
  if (!code.ok()) {
    std::fprintf(stderr, "magi: %s\n", std::string(code.status().message()).c_str());
    return 1;
  }
  return *code;
}
