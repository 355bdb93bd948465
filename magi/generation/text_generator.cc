#include "magi/generation/text_generator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorIndexing.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "magi/base/status_macros.h"

namespace magi {
namespace {

constexpr int64_t kPadByte = ' ';

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// What a step hands on for each row r read at positions[r] (rows with a negative position:
// nothing): the logits as fp32 CPU tensors [vocab], or with `argmax_only` just their argmax,
// computed on the device so that only the B tokens cross to the host. One device-to-host
// copy for the whole batch either way (each copy waits for the device), and copies, since
// the graph's outputs may be overwritten by the next run.
std::vector<NextToken> ReadRows(const at::Tensor& logits, const std::vector<int64_t>& positions, bool argmax_only) {
  std::vector<int64_t> rows, at;
  for (size_t r = 0; r < positions.size(); ++r) {
    if (positions[r] < 0) continue;
    rows.push_back(static_cast<int64_t>(r));
    at.push_back(positions[r]);
  }
  std::vector<NextToken> result(positions.size());
  if (rows.empty()) return result;
  const at::TensorOptions index = at::TensorOptions().dtype(at::kLong);
  at::Tensor picked = logits.index({at::tensor(rows, index).to(logits.device()), at::tensor(at, index).to(logits.device())});
  if (argmax_only) {
    at::Tensor tokens = picked.argmax(-1).to(at::kCPU);
    for (size_t i = 0; i < rows.size(); ++i) result[rows[i]].argmax = tokens[static_cast<int64_t>(i)].item<int64_t>();
    return result;
  }
  picked = picked.to(at::kCPU, at::kFloat, /*non_blocking=*/false, /*copy=*/true);
  for (size_t i = 0; i < rows.size(); ++i) result[rows[i]].logits = picked[static_cast<int64_t>(i)];
  return result;
}

}  // namespace

absl::Status ValidateGeneration(const GenerationOptions& options, const models::LlamaConfig& config) {
  if (options.window < 2) {
    return absl::InvalidArgumentError(absl::StrCat("--seq_len (the context window) must be >= 2, not ", options.window));
  }
  if (options.window > config.max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat("--seq_len=", options.window, " is longer than the model's ",
                                                   config.max_seq_len, " positions"));
  }
  if (options.overflow_keep != 0 && (options.overflow_keep < 1 || options.overflow_keep >= options.window)) {
    return absl::InvalidArgumentError(absl::StrCat("--overflow_keep must be in [1, ", options.window - 1,
                                                   "] (less than --seq_len) or 0 (half of it), not ",
                                                   options.overflow_keep));
  }
  if (options.tokens_per_read < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tokens_per_read must be >= 1, not ", options.tokens_per_read));
  }
  if (options.batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--batch_size must be >= 1, not ", options.batch));
  }
  if (options.invariant_batch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--invariant_batch must be >= 0 (0: unrolled; the flag's -1 picks the device's default), not ",
                     options.invariant_batch));
  }
  if (options.invariant_batch > 0) {
    if (!options.inference.compile.deterministic || !options.kv_cache) {
      return absl::InvalidArgumentError(
          "--invariant_batch is a mode of deterministic generation with the KV cache: give --deterministic and "
          "--kv_cache (or --invariant_batch=0)");
    }
    if (options.batch > options.invariant_batch) {
      return absl::InvalidArgumentError(absl::StrCat("--batch_size=", options.batch, " does not fit --invariant_batch=",
                                                     options.invariant_batch, " rows: give --invariant_batch >= ",
                                                     options.batch, " (and the same value in every run compared)"));
    }
  }
  if (!options.prefill_buckets.empty() && options.inference.compile.deterministic) {
    return absl::InvalidArgumentError(
        "--prefill_buckets and --deterministic: deterministic generation prefills the whole window (a bucket "
        "follows the batch's longest prompt, so a prompt's bits would depend on the others)");
  }
  for (int64_t bucket : options.prefill_buckets) {
    if (bucket < 1 || bucket > options.window) {
      return absl::InvalidArgumentError(absl::StrCat("--prefill_buckets: ", bucket, " is not a length in [1, ",
                                                     options.window, "] (--seq_len)"));
    }
  }
  if (options.unrolled_prefill && options.invariant_batch == 0) {
    return absl::InvalidArgumentError(
        "--unrolled_prefill is a form of --invariant_batch > 0 (deterministic, with the KV cache); without it every "
        "graph is unrolled already");
  }
  return ValidateSampling(options.sampling, config.vocab_size);
}

// One sequence of the batch being generated.
struct TextGenerator::Row {
  std::string text;   // prompt + generated bytes
  size_t start = 0;   // the context is text[start:], at positions 0..
  int64_t cached = 0;  // positions of the context whose keys and values are in the cache
  bool padding = false;
  bool needs_prefill = true;  // a new context: the cache has nothing of it
  bool reprefill = false;     // the new context is a cut one (overflow)
  int64_t context_length() const { return static_cast<int64_t>(text.size() - start); }
  int64_t last_byte() const { return static_cast<unsigned char>(text.back()); }
};

namespace {

// The cached forward of the model as a graph function: (tokens, positions, keys[0],
// values[0], ...) -> (logits, keys[0]', values[0]', ...).
ForwardFunction CachedForward(models::LlamaImpl& model, models::CacheWrite write) {
  return [&model, write](const std::vector<at::Tensor>& in) {
    models::LlamaImpl::CachedOutput out = model.ForwardWithCache(in[0], in[1], models::KvCache::FromFlat(in, 2), write);
    std::vector<at::Tensor> results = {out.logits};
    for (const at::Tensor& t : out.cache.Flat()) results.push_back(t);
    return results;
  };
}

}  // namespace

std::vector<int64_t> DefaultPrefillBuckets(int64_t window) {
  std::vector<int64_t> buckets;
  for (int64_t length = 16; length < window; length *= 2) buckets.push_back(length);
  buckets.push_back(window);
  return buckets;
}

absl::StatusOr<std::unique_ptr<TextGenerator>> TextGenerator::Create(models::LlamaImpl& model,
                                                                     std::shared_ptr<Communicator> communicator,
                                                                     const GenerationOptions& options) {
  MAGI_RETURN_IF_ERROR(ValidateGeneration(options, model.config));
  auto generator = std::unique_ptr<TextGenerator>(new TextGenerator());
  generator->options_ = options;
  if (generator->options_.overflow_keep == 0) generator->options_.overflow_keep = options.window / 2;
  std::vector<int64_t>& buckets = generator->options_.prefill_buckets;
  // Deterministic generation prefills the whole window: a bucket follows the batch's longest
  // context, so it would make a prompt's shapes, and its bits, depend on the other prompts.
  if (options.inference.compile.deterministic) buckets = {options.window};
  if (buckets.empty()) buckets = DefaultPrefillBuckets(options.window);
  buckets.push_back(options.window);
  std::sort(buckets.begin(), buckets.end());
  buckets.erase(std::unique(buckets.begin(), buckets.end()), buckets.end());
  generator->config_ = model.config;
  generator->model_ = &model;
  generator->communicator_ = communicator;
  const at::Tensor& weight = model.tok_embeddings->weight;
  generator->device_ = weight.device();
  generator->cache_options_ = weight.options().requires_grad(false);
  const int64_t batch = generator->graph_rows(), window = options.window;
  at::TensorOptions ids = at::TensorOptions().dtype(at::kLong).device(generator->device_);
  if (!options.kv_cache) {
    ForwardFunction forward = [&](const std::vector<at::Tensor>& in) {
      return std::vector<at::Tensor>{model.forward(in[0])};
    };
    MAGI_ASSIGN_OR_RETURN(generator->forward_, FsdpInference::Create(model, forward, {at::full({batch, window}, kPadByte, ids)},
                                                                     communicator, options.inference));
  } else {
    MAGI_ASSIGN_OR_RETURN(generator->decode_,
                          FsdpInference::Create(model, CachedForward(model, models::CacheWrite::kAtPositions),
                                                generator->GraphInputs(1), communicator, generator->GraphOptions(false)));
  }
  generator->ShareWeightsWithModel();
  return generator;
}

void TextGenerator::ShareWeightsWithModel() {
  // Only the shapes and dtypes of the parameters matter to a later capture, and a graph's
  // weights have both: the model's own copy of the weights can go.
  const std::map<std::string, at::Tensor> weights = (forward_ != nullptr ? forward_ : decode_)->WholeParameters();
  torch::NoGradGuard no_grad;
  for (auto& item : model_->named_parameters()) {
    auto it = weights.find(item.key());
    if (it == weights.end() || it->second.scalar_type() != item.value().scalar_type() ||
        it->second.device() != item.value().device()) {
      continue;
    }
    item.value().set_data(it->second);
  }
}

InferenceOptions TextGenerator::GraphOptions(bool prefill) const {
  InferenceOptions inference = options_.inference;
  // Output 1 + i (the new cache) over input 2 + i (the cache).
  for (int i = 0; i < 2 * config_.n_layers; ++i) inference.donated_inputs.push_back({1 + i, 2 + i});
  if (options_.invariant_batch > 0) inference.batch_invariance = BatchInvariance::kFixedBatch;
  if (prefill && options_.unrolled_prefill) inference.batch_invariance = BatchInvariance::kUnrolled;
  return inference;
}

std::vector<at::Tensor> TextGenerator::GraphInputs(int64_t length) const {
  const int64_t batch = graph_rows();
  at::TensorOptions ids = at::TensorOptions().dtype(at::kLong).device(device_);
  std::vector<at::Tensor> in = {at::full({batch, length}, kPadByte, ids), at::zeros({batch}, ids)};
  for (const at::Tensor& t : models::KvCache::Zeros(config_, batch, options_.window, cache_options_).Flat()) {
    in.push_back(t);
  }
  return in;
}

int64_t TextGenerator::PrefillBucket(int64_t length) const {
  for (int64_t bucket : options_.prefill_buckets) {
    if (bucket >= length) return bucket;
  }
  return options_.window;
}

absl::StatusOr<FsdpInference*> TextGenerator::PrefillGraph(int64_t bucket) {
  auto it = prefills_.find(bucket);
  if (it != prefills_.end()) return it->second.get();
  // A window-long block is the whole cache: written without a scatter (llama.h, CacheWrite).
  const models::CacheWrite write =
      bucket == options_.window ? models::CacheWrite::kWholeWindow : models::CacheWrite::kAtPositions;
  MAGI_ASSIGN_OR_RETURN(std::unique_ptr<FsdpInference> graph,
                        FsdpInference::Create(*model_, CachedForward(*model_, write), GraphInputs(bucket),
                                              communicator_, GraphOptions(true)));
  // The weights the decode graph runs on (a checkpoint's, once loaded), not the module's.
  MAGI_RETURN_IF_ERROR(graph->ShareWeightsWith(*decode_));
  return (prefills_[bucket] = std::move(graph)).get();
}

absl::Status TextGenerator::LoadShardsFromCheckpoint(const std::string& root) {
  if (forward_ != nullptr) {
    MAGI_RETURN_IF_ERROR(forward_->LoadShardsFromCheckpoint(root));
  } else {
    MAGI_RETURN_IF_ERROR(decode_->LoadShardsFromCheckpoint(root));
    for (auto& [bucket, prefill] : prefills_) MAGI_RETURN_IF_ERROR(prefill->ShareWeightsWith(*decode_));
  }
  ShareWeightsWithModel();
  return absl::OkStatus();
}

int64_t TextGenerator::cache_bytes() const {
  if (forward_ != nullptr) return 0;
  return 2 * config_.n_layers * graph_rows() * config_.kv_heads() * options_.window * config_.head_dim() *
         static_cast<int64_t>(c10::elementSize(c10::typeMetaToScalarType(cache_options_.dtype())));
}

absl::Status TextGenerator::Warmup(int runs, const std::vector<int64_t>& prefill_lengths) {
  if (forward_ != nullptr) {
    at::TensorOptions ids = at::TensorOptions().dtype(at::kLong).device(device_);
    for (int i = 0; i < runs; ++i) {
      MAGI_RETURN_IF_ERROR(forward_->Run({at::full({graph_rows(), options_.window}, kPadByte, ids)}).status());
    }
    return absl::OkStatus();
  }
  std::vector<int64_t> buckets = options_.prefill_buckets;
  if (!prefill_lengths.empty()) {
    buckets.clear();
    for (int64_t length : prefill_lengths) buckets.push_back(PrefillBucket(length));
  }
  std::vector<std::pair<FsdpInference*, int64_t>> graphs = {{decode_.get(), 1}};  // (graph, tokens per row)
  for (int64_t bucket : buckets) {
    MAGI_ASSIGN_OR_RETURN(FsdpInference * graph, PrefillGraph(bucket));
    if (std::find(graphs.begin(), graphs.end(), std::make_pair(graph, bucket)) == graphs.end()) {
      graphs.emplace_back(graph, bucket);
    }
  }
  for (int i = 0; i < runs; ++i) {
    for (const auto& [graph, length] : graphs) MAGI_RETURN_IF_ERROR(graph->RunDonating(GraphInputs(length)).status());
  }
  return absl::OkStatus();
}

at::Tensor TextGenerator::WindowTokens(const std::vector<Row>& rows, const std::vector<bool>& take,
                                       int64_t window) const {
  std::vector<int64_t> tokens(rows.size() * window, kPadByte);
  for (size_t r = 0; r < rows.size(); ++r) {
    if (!take[r]) continue;
    for (int64_t j = 0; j < rows[r].context_length(); ++j) {
      tokens[r * window + j] = static_cast<unsigned char>(rows[r].text[rows[r].start + j]);
    }
  }
  return at::tensor(tokens, at::kLong).view({static_cast<int64_t>(rows.size()), window}).to(device_);
}

absl::StatusOr<std::vector<NextToken>> TextGenerator::StepRecompute(std::vector<Row>& rows) {
  auto start = std::chrono::steady_clock::now();
  std::vector<bool> all(rows.size(), true);
  MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> out, forward_->Run({WindowTokens(rows, all, options_.window)}));
  std::vector<int64_t> read(rows.size(), -1);
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r].padding) continue;
    read[r] = rows[r].context_length() - 1;
    ++stats_.decode_bytes;
  }
  std::vector<NextToken> logits = ReadRows(out[0], read, device_argmax());
  ++stats_.decode_runs;
  ++stats_.decode_reads;
  stats_.decode_seconds += SecondsSince(start);
  return logits;
}

absl::StatusOr<std::vector<NextToken>> TextGenerator::StepWithCache(std::vector<Row>& rows) {
  const int64_t batch = static_cast<int64_t>(rows.size());
  at::TensorOptions ids = at::TensorOptions().dtype(at::kLong).device(device_);
  std::vector<NextToken> logits(rows.size());
  std::vector<bool> prefill(rows.size());
  bool any_prefill = false, any_decode = false;
  for (size_t r = 0; r < rows.size(); ++r) {
    // A new context is prefilled; otherwise the cache holds all but its last byte, which is decoded.
    prefill[r] = rows[r].needs_prefill || cache_.empty();
    if (!prefill[r] && rows[r].cached != rows[r].context_length() - 1) {
      return absl::InternalError(absl::StrCat("the cache holds ", rows[r].cached, " positions of a context of ",
                                              rows[r].context_length()));
    }
    any_prefill = any_prefill || prefill[r];
    any_decode = any_decode || !prefill[r];
  }
  if (any_decode) {
    auto start = std::chrono::steady_clock::now();
    // Rows being prefilled decode a placeholder at position 0; the prefill replaces their rows.
    std::vector<int64_t> tokens(rows.size(), kPadByte), positions(rows.size(), 0);
    for (size_t r = 0; r < rows.size(); ++r) {
      if (prefill[r]) continue;
      tokens[r] = rows[r].last_byte();
      positions[r] = rows[r].context_length() - 1;
      if (positions[r] < 0 || positions[r] >= options_.window) {
        return absl::InternalError(absl::StrCat("decode position ", positions[r], " outside the window"));
      }
    }
    std::vector<at::Tensor> in = {at::tensor(tokens, at::kLong).view({batch, 1}).to(device_),
                                  at::tensor(positions, at::kLong).to(device_)};
    for (at::Tensor& t : cache_) in.push_back(std::move(t));
    cache_.clear();  // donated
    MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> out, decode_->RunDonating(std::move(in)));
    cache_.assign(out.begin() + 1, out.end());
    std::vector<int64_t> read(rows.size(), -1);
    for (size_t r = 0; r < rows.size(); ++r) {
      if (prefill[r]) continue;
      rows[r].cached = rows[r].context_length();
      if (rows[r].padding) continue;
      read[r] = 0;
      ++stats_.decode_bytes;
    }
    std::vector<NextToken> decoded = ReadRows(out[0], read, device_argmax());
    for (size_t r = 0; r < rows.size(); ++r) {
      if (read[r] >= 0) logits[r] = decoded[r];
    }
    ++stats_.decode_runs;
    ++stats_.decode_reads;
    stats_.decode_seconds += SecondsSince(start);
  }
  if (any_prefill) {
    auto start = std::chrono::steady_clock::now();
    const bool all = std::all_of(prefill.begin(), prefill.end(), [](bool p) { return p; });
    int64_t longest = 1;
    for (size_t r = 0; r < rows.size(); ++r) {
      if (prefill[r]) longest = std::max(longest, rows[r].context_length());
    }
    const int64_t bucket = PrefillBucket(longest);
    MAGI_ASSIGN_OR_RETURN(FsdpInference * prefill_graph, PrefillGraph(bucket));
    start = std::chrono::steady_clock::now();  // a first use's compile is not prefill time
    std::vector<at::Tensor> in = {WindowTokens(rows, prefill, bucket), at::zeros({batch}, ids)};
    if (all && !cache_.empty()) {
      for (at::Tensor& t : cache_) in.push_back(std::move(t));  // donated: every row is rewritten
      cache_.clear();
    } else {
      // A scratch cache: the rows that are not prefilled keep theirs.
      for (const at::Tensor& t : models::KvCache::Zeros(config_, batch, options_.window, cache_options_).Flat()) {
        in.push_back(t);
      }
    }
    MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> out, prefill_graph->RunDonating(std::move(in)));
    if (cache_.empty()) {
      cache_.assign(out.begin() + 1, out.end());
    } else {
      for (size_t r = 0; r < rows.size(); ++r) {
        if (!prefill[r]) continue;
        for (size_t i = 0; i < cache_.size(); ++i) cache_[i][r].copy_(out[1 + i][r]);
      }
    }
    std::vector<int64_t> read(rows.size(), -1);
    for (size_t r = 0; r < rows.size(); ++r) {
      if (prefill[r] && !rows[r].padding) read[r] = rows[r].context_length() - 1;
    }
    std::vector<NextToken> prefilled = ReadRows(out[0], read, device_argmax());
    for (size_t r = 0; r < rows.size(); ++r) {
      if (!prefill[r]) continue;
      rows[r].cached = rows[r].context_length();
      if (!rows[r].padding) {
        logits[r] = prefilled[r];
        ++stats_.prefill_sequences;
        stats_.prefill_bytes += rows[r].context_length();
        stats_.prefill_positions += bucket;
        stats_.reprefills += rows[r].reprefill;
      }
      rows[r].needs_prefill = false;
      rows[r].reprefill = false;
    }
    ++stats_.prefill_runs;
    stats_.prefill_seconds += SecondsSince(start);
  }
  return logits;
}

int TextGenerator::DecodeRunLength(const std::vector<Row>& rows, int limit) const {
  if (!device_argmax() || forward_ != nullptr || cache_.empty()) return 0;
  int64_t steps = std::min<int64_t>(limit, options_.tokens_per_read);
  for (const Row& row : rows) {
    if (row.needs_prefill || row.cached != row.context_length() - 1) return 0;
    // Step j decodes the context's byte at position length - 1 + j, which must be in the window.
    steps = std::min(steps, options_.window - row.context_length() + 1);
  }
  return static_cast<int>(std::max<int64_t>(steps, 0));
}

absl::StatusOr<at::Tensor> TextGenerator::DecodeRun(std::vector<Row>& rows, int steps) {
  auto start = std::chrono::steady_clock::now();
  const int64_t batch = static_cast<int64_t>(rows.size());
  std::vector<int64_t> tokens(rows.size()), positions(rows.size());
  std::vector<uint8_t> padding(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    tokens[r] = rows[r].last_byte();
    positions[r] = rows[r].context_length() - 1;
    padding[r] = rows[r].padding;
  }
  at::Tensor next = at::tensor(tokens, at::kLong).to(device_);
  at::Tensor position = at::tensor(positions, at::kLong).to(device_);
  const at::Tensor padding_rows = at::tensor(padding, at::kByte).to(device_, at::kBool);
  const at::Tensor pad = at::full({}, kPadByte, at::TensorOptions().dtype(at::kLong).device(device_));
  std::vector<at::Tensor> generated;
  for (int j = 0; j < steps; ++j) {
    std::vector<at::Tensor> in = {next.view({batch, 1}), position};
    for (at::Tensor& t : cache_) in.push_back(std::move(t));
    cache_.clear();  // donated
    MAGI_ASSIGN_OR_RETURN(std::vector<at::Tensor> out, decode_->RunDonating(std::move(in)));
    cache_.assign(out.begin() + 1, out.end());
    // The same argmax as ReadRows' (logits [rows, 1, vocab]); padding rows go on with padding.
    next = at::where(padding_rows, pad, out[0].select(1, 0).argmax(-1));
    generated.push_back(next);
    position = position + 1;
  }
  at::Tensor read = at::stack(generated).to(at::kCPU);  // the one wait for the device
  for (Row& row : rows) {
    row.cached = row.context_length() - 1 + steps;
    if (!row.padding) stats_.decode_bytes += steps;
  }
  stats_.decode_runs += steps;
  ++stats_.decode_reads;
  stats_.decode_seconds += SecondsSince(start);
  return read;
}

absl::StatusOr<std::vector<NextToken>> TextGenerator::Step(std::vector<Row>& rows) {
  return forward_ != nullptr ? StepRecompute(rows) : StepWithCache(rows);
}

absl::StatusOr<Generated> TextGenerator::Generate(const std::vector<std::string>& prompts, int length,
                                                  const std::function<void(size_t, char)>& on_byte) {
  if (prompts.empty()) return absl::InvalidArgumentError("no prompts");
  for (size_t p = 0; p < prompts.size(); ++p) {
    if (prompts[p].empty()) return absl::InvalidArgumentError(absl::StrCat("prompt ", p, " is empty"));
  }
  if (length < 0) return absl::InvalidArgumentError(absl::StrCat("--length must be >= 0, not ", length));
  const SamplingOptions& sampling = options_.sampling;
  const int64_t window = options_.window, keep = options_.overflow_keep;
  Generated result;
  result.texts = prompts;
  result.logits.resize(prompts.size());
  std::vector<std::vector<at::Tensor>> logits_of(prompts.size());
  std::vector<at::Generator> generators;
  for (size_t i = 0; i < prompts.size(); ++i) {
    generators.push_back(at::make_generator<at::CPUGeneratorImpl>(sampling.seed + static_cast<int64_t>(i)));
  }
  // A context longer than the window keeps its last `keep` bytes.
  auto fit = [&](Row& row) {
    if (row.context_length() <= window) return;
    row.start = row.text.size() - static_cast<size_t>(keep);
    row.cached = 0;
    row.needs_prefill = true;
    row.reprefill = true;
  };
  const size_t batch = static_cast<size_t>(options_.batch);
  for (size_t first = 0; first < prompts.size(); first += batch) {
    // Rows past this batch's prompts (the last batch's, and with invariant_batch every batch's
    // rows past `batch`) repeat its last prompt and are discarded.
    const size_t last = std::min(first + batch, prompts.size()) - 1;
    std::vector<Row> rows(static_cast<size_t>(graph_rows()));
    std::vector<size_t> prompt_of(rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      prompt_of[r] = std::min(first + r, last);
      rows[r].text = prompts[prompt_of[r]];
      rows[r].padding = first + r > last;
      fit(rows[r]);
      rows[r].reprefill = false;  // a long prompt's first prefill is no re-prefill
    }
    cache_.clear();  // a new batch starts with a prefill
    // Row r's next byte (padding rows' are discarded: only their length, the overflow
    // schedule, follows the batch).
    auto append = [&](size_t r, int64_t next, const at::Tensor& logits) {
      rows[r].text.push_back(static_cast<char>(next));
      fit(rows[r]);
      if (rows[r].padding) return;
      const size_t p = prompt_of[r];
      result.texts[p].push_back(static_cast<char>(next));
      if (options_.record_logits) logits_of[p].push_back(logits);
      if (on_byte) on_byte(p, static_cast<char>(next));
    };
    for (int i = 0; i < length;) {
      if (const int steps = DecodeRunLength(rows, length - i); steps > 1) {
        MAGI_ASSIGN_OR_RETURN(at::Tensor tokens, DecodeRun(rows, steps));
        const int64_t* read = tokens.data_ptr<int64_t>();
        for (int j = 0; j < steps; ++j) {
          for (size_t r = 0; r < rows.size(); ++r) append(r, read[j * rows.size() + r], at::Tensor());
        }
        i += steps;
        continue;
      }
      MAGI_ASSIGN_OR_RETURN(std::vector<NextToken> next_tokens, Step(rows));
      for (size_t r = 0; r < rows.size(); ++r) {
        // Padding rows read no logits back (a device sync each) and draw from no prompt's generator.
        const int64_t next = rows[r].padding             ? kPadByte
                             : next_tokens[r].argmax >= 0 ? next_tokens[r].argmax
                                                          : SampleNext(next_tokens[r].logits, sampling,
                                                                       generators[prompt_of[r]]);
        append(r, next, next_tokens[r].logits);
      }
      ++i;
    }
  }
  cache_.clear();
  for (size_t p = 0; p < prompts.size(); ++p) {
    if (options_.record_logits) {
      result.logits[p] = logits_of[p].empty() ? at::zeros({0, config_.vocab_size}) : at::stack(logits_of[p]);
    }
  }
  return result;
}

}  // namespace magi
