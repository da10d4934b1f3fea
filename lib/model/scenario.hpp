#pragma once
// Scenario files (docs/SCENARIOS.md): parse + check. Every error is an InputError naming the
// file, line, key and value.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/spec.hpp"

namespace attn {

struct RequestShape {
  int32_t context_len = 0;  // tokens already in the cache (num_computed_tokens)
  int32_t query_len = 1;    // new tokens this step (1 = decode)
  int32_t seq_len() const { return context_len + query_len; }
};

struct RequestGroup {
  int count = 1;
  int context_len = 0;
  int query_len = 1;
};

struct LengthDist {
  enum class Kind { fixed, uniform, lognormal } kind = Kind::fixed;
  int value = 0;          // fixed
  int min = 0, max = 0;   // uniform (inclusive); also clamps lognormal
  double mean = 0.0;      // lognormal: mean of the length (not of its log)
  double sigma = 1.0;     // lognormal: sigma of log(length)
};

// Lognormal draws without a `max` clamp stop here, so that context + query fits an int32 length.
inline constexpr int kLognormalUnboundedMax = 2147483647 / 4;

struct RandomBatchConfig {
  int num_requests = 0;
  LengthDist context_len;
  LengthDist query_len;
};

struct TraceConfig {
  std::string file;  // resolved: absolute, or relative to the scenario file's folder
  int max_num_batched_tokens = 8192;
  int max_num_seqs = 256;
  double step_ms = 15.0;  // modelled duration of one scheduler step (advances the arrival clock)
  long step = 0;          // which step's batch (0-based) ...
  bool all_steps = false; // ... or every step
  long max_steps = 0;     // 0 = until the trace drains (all_steps only)
};

// Where a batch's keys were written, for the checks made after parsing (expand_shapes,
// make_batch, the trace replay), so that their messages name the file, line and key too.
// Empty for batches made in code: messages then name the batch's label, at line 0.
struct BatchOrigin {
  std::string file;                   // the scenario file (expand_shapes fills it from Scenario::file)
  std::map<std::string, long> lines;  // dotted key ("batch.num_blocks", "batch.trace") -> its line
  // The key that sizes one batch, named by errors about its size (expand_shapes sets it):
  // the largest group's count, batch.random.num_requests, or batch.trace.step.
  std::string size_key, size_value;
  long line(const std::string& key) const {
    const auto it = lines.find(key);
    return it == lines.end() ? 0 : it->second;
  }
};

enum class BlockAllocation { shuffled, contiguous };
enum class BatchSource { groups, random, trace };

struct BatchConfig {
  int shared_prefix_len = 0;
  int local_attention_chunk = 0;
  BlockAllocation block_allocation = BlockAllocation::shuffled;
  int64_t num_blocks = 0;  // 0 = just enough (+ the null block 0)
  BatchSource source = BatchSource::groups;
  std::vector<RequestGroup> groups;
  RandomBatchConfig random;
  TraceConfig trace;
  BatchOrigin origin;  // lines of the [batch] keys (the parser fills them)
};

// [data]: the regime of the generated values (docs/SCENARIOS.md). Unset = the per-feature default.
struct DataConfig {
  std::optional<double> logit_std;   // std of the scaled raw scores q.k * scale
  std::optional<double> sink_logit;  // centre of the per-head sink logits
  bool normal = false;               // distribution = "normal" (a bell of the uniform's variance)
  int k_outlier_channels = 0;        // K head dims much larger than the rest (0 = none)
  double k_outlier_scale = 8.0;      // ... by this factor
};

enum class CascadeMode { auto_, on, off };

// What one timed sample runs (`[run] timed`, `run --timed`): the step as a serving engine runs it
// (each layer's cache write, then its attention), or the attention alone over caches a run wrote
// (BackendInstance::run_attention), which is what the torch peers' kernels do: they write no cache.
enum class TimedPart { step, attention };
inline const char* to_string(TimedPart p) { return p == TimedPart::attention ? "attention" : "step"; }
// The part a name ("step", "attention") says; nullopt for any other text.
inline std::optional<TimedPart> timed_part_named(std::string_view name) {
  if (name == "step") return TimedPart::step;
  if (name == "attention") return TimedPart::attention;
  return std::nullopt;
}

struct RunConfig {
  std::vector<std::string> backends{"auto"};
  // Where each of `backends` was written (its line, and its text as written), for the errors
  // raised when it runs ("not in this build"); empty when the names came from no file.
  struct Written {
    long line = 0;
    std::string text;
  };
  std::vector<Written> backends_written;
  int warmup = 10;
  int iterations = 50;
  // Host (cpu) rows' time budget in seconds, TimingOptions::host_timeout_s (`host_timeout`;
  // run/sweep --host-timeout overrides it); 0: every iteration runs.
  double host_timeout_s = 5.0;
  bool cold_l2 = true;
  bool cuda_graph = false;
  TimedPart timed = TimedPart::step;
  int num_layers = 1;
  CascadeMode cascade = CascadeMode::auto_;
};

struct CheckConfig {  // unset = the dtype default of DESIGN.md
  std::optional<double> atol, rtol, max_rel_l2, min_cosine;
  std::optional<double> k_l2, k_abs;  // factors of the floor-based rule (DESIGN.md)
  bool strict = false;
  bool require_sensitivity = false;  // fail when a declared feature is not exercised by the data
  int64_t sample_pairs = 0;  // check at most this many (request, head) pairs; 0 = all
};

// One `--set KEY=VALUE` of run, validate and describe: a key of the scenario file, dotted
// (model.kv_cache_dtype, check.k_l2, batch.requests[0].count, also written batch.requests.0.count),
// and its value as TOML text, where a bare word (fp8_e4m3) is a string. It is applied to the file's
// TOML before any check (model/scenario_overrides.cpp), so the scenario obeys every rule a file does.
struct ScenarioOverride {
  std::string key;    // normalized: array indices in brackets
  std::string value;  // as given
  std::string text() const { return key + "=" + value; }
};
// "KEY=VALUE" -> ScenarioOverride; a malformed one is an InputError naming --set.
ScenarioOverride parse_override(std::string_view text);

struct Scenario {
  std::string file;  // path it was read from ("<cli>" for --model/--batch)
  std::string name;
  std::string description;
  uint64_t seed = 0;
  std::string preset;
  AttentionSpec spec;
  BatchConfig batch;
  RunConfig run;
  CheckConfig check;
  DataConfig data;
  // The --set overrides it was made with. Its name then ends in them, "quickstart[k=v,k=v]", so
  // that its result rows never pass for the unmodified scenario's (report compare pairs rows by it).
  std::vector<ScenarioOverride> overrides;
};

Scenario load_scenario(const std::string& path, const std::vector<ScenarioOverride>& overrides = {});
Scenario parse_scenario(std::string_view toml_text, const std::string& source_name,
                        const std::string& base_dir = ".", const std::vector<ScenarioOverride>& overrides = {});
// The compact spec "48x1@2048,2x512@1024" (count x query_len @ context_len).
std::vector<RequestGroup> parse_batch_spec(std::string_view spec);
// A scenario from `--model PRESET --batch SPEC` (file = "<cli>").
Scenario scenario_from_cli(const std::string& preset, const std::string& batch_spec, uint64_t seed = 0,
                           const std::vector<ScenarioOverride>& overrides = {});

// One concrete batch shape of a scenario (a trace with step = "all" gives many).
struct BatchShape {
  DataConfig data;
  std::string label;  // scenario name, plus "@step" for traces
  std::vector<RequestShape> requests;
  int shared_prefix_len = 0;
  int local_attention_chunk = 0;
  BlockAllocation block_allocation = BlockAllocation::shuffled;
  int64_t num_blocks = 0;
  long step = -1;  // trace step, -1 otherwise
  BatchOrigin origin;  // file and key lines, for make_batch's messages (empty: the label names it)
};
std::vector<BatchShape> expand_shapes(const Scenario& s);

}  // namespace attn
