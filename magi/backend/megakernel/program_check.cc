#include "magi/backend/megakernel/program_check.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace magi::megakernel {
namespace {

constexpr int kStepInput = -1;  // the "writer" of the step's inputs: before every instruction
constexpr int kUnwritten = -2;

// The elements of one buffer (of one layer), sequence after sequence, as runs of elements
// with the same last writer and readers since: accesses are tiles, so runs stay few and a
// check costs runs, not elements.
struct ElementRun {
  int writer = kUnwritten;
  std::vector<int> readers;
};
struct Elements {
  int64_t rows = 0;
  std::map<int64_t, ElementRun> runs;  // by first element; a run ends where the next begins

  // Makes `element` the first of a run (unless it is the end); returns that run.
  std::map<int64_t, ElementRun>::iterator SplitAt(int64_t element) {
    auto next = runs.upper_bound(element);
    auto run = std::prev(next);
    if (run->first == element) return run;
    return runs.emplace_hint(next, element, run->second);
  }
};

class Checker {
 public:
  explicit Checker(const Program& program) : p_(program), sms_(static_cast<int>(program.queues.size())) {}

  absl::Status Run() {
    const int n = static_cast<int>(p_.instructions.size());
    if (absl::Status s = CheckStructure(); !s.ok()) return s;
    // clocks_[i][s]: how many of SM s's first instructions happen before instruction i ends
    // (i's own SM entry counts i itself).
    clocks_.assign(n, std::vector<int>(sms_, 0));
    std::vector<std::vector<int>> counter_clock(p_.counters.size(), std::vector<int>(sms_, 0));
    std::vector<int> previous_on_sm(sms_, -1);
    for (int i = 0; i < n; ++i) {
      const Instruction& in = p_.instructions[i];
      std::vector<int>& clock = clocks_[i];
      if (previous_on_sm[in.sm] >= 0) Join(clock, clocks_[previous_on_sm[in.sm]]);
      for (int c : in.waits) Join(clock, counter_clock[c]);
      // Reads and writes are checked against what happens before i starts.
      if (absl::Status s = CheckAccesses(i); !s.ok()) return s;
      clock[in.sm] = position_[i] + 1;
      for (int c : in.signals) Join(counter_clock[c], clock);
      previous_on_sm[in.sm] = i;
    }
    return absl::OkStatus();
  }

 private:
  static void Join(std::vector<int>& into, const std::vector<int>& from) {
    for (size_t s = 0; s < into.size(); ++s) into[s] = std::max(into[s], from[s]);
  }

  // Whether instruction a (finished) happens before instruction b starts (b's clock so far).
  bool HappensBefore(int a, int b) const {
    if (a == kStepInput) return true;
    return clocks_[b][p_.instructions[a].sm] >= position_[a] + 1;
  }

  std::string Describe(int i) const {
    if (i == kStepInput) return "the step's inputs";
    return absl::StrCat("#", i, " (", p_.instructions[i].DebugString(), ")");
  }

  absl::Status CheckStructure() {
    const int n = static_cast<int>(p_.instructions.size());
    position_.assign(n, -1);
    for (int sm = 0; sm < sms_; ++sm) {
      const std::vector<int>& queue = p_.queues[sm];
      for (size_t k = 0; k < queue.size(); ++k) {
        const int i = queue[k];
        if (i < 0 || i >= n) return absl::FailedPreconditionError(absl::StrCat("SM ", sm, " queues instruction #", i, ", not one of the ", n));
        if (position_[i] >= 0) return absl::FailedPreconditionError(absl::StrCat(Describe(i), " is queued twice"));
        if (p_.instructions[i].sm != sm) {
          return absl::FailedPreconditionError(absl::StrCat(Describe(i), " is in SM ", sm, "'s queue"));
        }
        if (k > 0 && queue[k - 1] > i) {
          return absl::FailedPreconditionError(absl::StrCat("SM ", sm, " runs ", Describe(queue[k - 1]), " before ",
                                                            Describe(i), ", against the sequential order"));
        }
        position_[i] = static_cast<int>(k);
      }
    }
    std::vector<int> increments(p_.counters.size(), 0), last_signaller(p_.counters.size(), -1);
    for (int i = 0; i < n; ++i) {
      if (position_[i] < 0) return absl::FailedPreconditionError(absl::StrCat(Describe(i), " is in no SM's queue"));
      for (int c : p_.instructions[i].signals) {
        if (c < 0 || c >= static_cast<int>(p_.counters.size())) {
          return absl::FailedPreconditionError(absl::StrCat(Describe(i), " signals counter ", c, ", which does not exist"));
        }
        ++increments[c];
        last_signaller[c] = i;
      }
    }
    for (size_t c = 0; c < p_.counters.size(); ++c) {
      if (increments[c] != p_.counters[c].increments) {
        return absl::FailedPreconditionError(absl::StrCat("counter '", p_.counters[c].name, "' is declared to get ",
                                                          p_.counters[c].increments, " increments but gets ",
                                                          increments[c]));
      }
    }
    for (int i = 0; i < n; ++i) {
      for (int c : p_.instructions[i].waits) {
        if (c < 0 || c >= static_cast<int>(p_.counters.size())) {
          return absl::FailedPreconditionError(absl::StrCat(Describe(i), " waits for counter ", c, ", which does not exist"));
        }
        if (last_signaller[c] >= i) {
          return absl::FailedPreconditionError(absl::StrCat(Describe(i), " waits for counter '", p_.counters[c].name,
                                                            "', which ", Describe(last_signaller[c]),
                                                            " signals later in the sequential order: it can deadlock"));
        }
      }
    }
    return absl::OkStatus();
  }

  Elements& ElementsOf(const Access& access) {
    Elements& e = elements_[{access.buffer, access.layer}];
    if (e.rows == 0) {
      e.rows = BufferRows(p_, access.buffer);
      const bool input = access.buffer == Buffer::kTokens || access.buffer == Buffer::kKeyCache ||
                         access.buffer == Buffer::kValueCache;
      e.runs[0].writer = input ? kStepInput : kUnwritten;
      e.runs[p_.model.batch * e.rows];  // the end
    }
    return e;
  }

  std::string Element(const Access& a, int64_t b, int64_t r) const {
    return absl::StrCat(BufferName(a.buffer), a.layer >= 0 ? absl::StrCat(".", a.layer) : "", "[seq ", b, "][row ", r, "]");
  }

  absl::Status CheckAccesses(int i) {
    const Instruction& in = p_.instructions[i];
    for (const Access& a : in.accesses) {
      Elements& e = ElementsOf(a);
      if (a.batch_begin < 0 || a.batch_end > p_.model.batch || a.row_begin < 0 || a.row_end > e.rows ||
          a.batch_begin >= a.batch_end || a.row_begin >= a.row_end) {
        return absl::FailedPreconditionError(absl::StrCat(Describe(i), " accesses ", BufferName(a.buffer), " rows [",
                                                          a.row_begin, ", ", a.row_end, ") of sequences [", a.batch_begin,
                                                          ", ", a.batch_end, "), outside its ", e.rows, " rows"));
      }
      for (int64_t b = a.batch_begin; b < a.batch_end; ++b) {
        const int64_t first = b * e.rows + a.row_begin, last = b * e.rows + a.row_end;
        auto end = e.SplitAt(last);
        for (auto run = e.SplitAt(first); run != end; ++run) {
          const int64_t r = run->first - b * e.rows;  // the run's first element: the one reported
          ElementRun& state = run->second;
          const int writer = state.writer;
          if (!a.write && writer == kUnwritten) {
            return absl::FailedPreconditionError(
                absl::StrCat(Describe(i), " reads ", Element(a, b, r), ", which no instruction before it writes"));
          }
          if (writer != kUnwritten && writer != i && !HappensBefore(writer, i)) {
            return absl::FailedPreconditionError(absl::StrCat(Describe(i), a.write ? " overwrites " : " reads ",
                                                              Element(a, b, r), ", written by ", Describe(writer),
                                                              ", with no wait between them"));
          }
          if (!a.write) {
            state.readers.push_back(i);
            continue;
          }
          for (int reader : state.readers) {
            if (reader != i && !HappensBefore(reader, i)) {
              return absl::FailedPreconditionError(absl::StrCat(Describe(i), " overwrites ", Element(a, b, r),
                                                                ", which ", Describe(reader),
                                                                " reads before it, with no wait between them"));
            }
          }
          state.writer = i;
          state.readers.clear();
        }
      }
    }
    return absl::OkStatus();
  }

  const Program& p_;
  const int sms_;
  std::vector<int> position_;
  std::vector<std::vector<int>> clocks_;
  std::map<std::pair<Buffer, int>, Elements> elements_;
};

}  // namespace

absl::Status CheckProgram(const Program& program) { return Checker(program).Run(); }

}  // namespace magi::megakernel
