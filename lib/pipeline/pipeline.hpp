#pragma once
// The one straight data flow of DESIGN.md, shared by the `run` and `validate` verbs:
//   Scenario -> BatchShape(s) -> Batch -> CommonAttentionMetadata -> each backend: supports?
//   -> create/plan/poison/run/fetch -> validate against the reference -> (time) -> ResultRow.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "model/scenario.hpp"
#include "report/results.hpp"

namespace attn {

struct PipelineOptions {
  std::vector<std::string> backends;  // overrides the scenario's [run] backends when non-empty
  std::optional<int> warmup, iterations;
  std::optional<double> host_timeout_s;  // overrides [run] host_timeout (host rows' time budget)
  std::optional<bool> cold_l2, cuda_graph;
  std::optional<TimedPart> timed;        // overrides [run] timed
  std::optional<CascadeMode> cascade;
  std::optional<int64_t> check_sample;  // (request, head) pairs checked; 0 = all
  bool strict = false;                  // as [check] strict = true for every scenario
  bool time = true;                     // run: time every passing backend; validate: checks only
  bool batch_invariance = true;         // run requests alone and compare bitwise (reported)
  bool nan_probe = true;                // one cached key planted NaN reaches exactly its rows (gated)
  bool read_floor = true;               // device rows timed from a cold L2: their bytes' read floor
  double peak_bandwidth_gbs = 0;        // device ceilings for % of peak (0 = unknown)
  double peak_tflops = 0;
  std::string device_name;              // written into every row
  std::function<void(const std::string&)> progress;  // one line per step of a long run
};

// Cross-backend agreement on one batch (printed by `run` when several backends ran).
struct DiffEntry {
  std::string scenario, a, b;
  double max_abs = 0, rel_l2 = 0;
};

struct PipelineResult {
  std::vector<ResultRow> rows;
  std::vector<DiffEntry> diffs;
  // Each distinct resolution of `auto` that passed over a backend: "auto -> cpu (passed over
  // flash_attn: no CUDA device; ...)".
  std::vector<std::string> auto_notes;
};

// Runs one scenario (every batch shape it expands to) on the selected backends.
PipelineResult run_scenario(const Scenario& s, const std::vector<std::unique_ptr<Backend>>& registry,
                            const PipelineOptions& opts);

// A batch's requests as the compact spec `--batch` takes (parse_batch_spec): COUNTxQUERY@CONTEXT
// items in batch order, each run of equal requests one item ("48x1@2048,2x512@1024"). It says
// nothing of a shared prefix, the block allocation, num_blocks or a local attention chunk.
std::string batch_spec_text(const std::vector<RequestShape>& requests);

// Per batch shape of the scenario, the row columns fixed before any backend runs, as run_scenario
// fills them: scenario (the batch label), the spec columns, shared_prefix_len, batch, seed, and
// with opts.time warmup, iterations and host_timeout_s (as for a host row; device rows have -1).
// Builds each batch (make_batch), runs nothing. `sweep --resume` checks stored rows against it.
std::vector<ResultRow> planned_rows(const Scenario& s, const PipelineOptions& opts);

// Names `auto`, `all` and backend names resolved against the registry for one batch;
// an unknown name is an InputError naming `source`, where the names came from ("--backend",
// or "FILE: run.backends").
std::vector<const Backend*> resolve_backends(const std::vector<std::string>& names,
                                             const std::vector<std::unique_ptr<Backend>>& registry,
                                             const AttentionSpec& spec, const Batch& batch,
                                             std::string* auto_note, const std::string& source = "--backend");

// An explicit --cuda-graph (opts.cuda_graph set, in a timed run) that no backend the scenarios
// select can honour on this build and machine is an InputError naming the flag, raised before
// anything runs: its rows would only say timing_method=wall (cpu) or be skipped (no device).
// With one backend that can, it stands, and the others keep their own timing. `auto` counts
// every backend of the registry, as its choice depends on the batch. A scenario's own [run]
// cuda_graph is not checked: it is the file's preference, so a GPU scenario still runs on cpu.
void check_cuda_graph_request(const std::vector<Scenario>& scenarios,
                              const std::vector<std::unique_ptr<Backend>>& registry, const PipelineOptions& opts);

// "describe" facts of one batch.
struct BatchSummary {
  std::string label;
  int num_reqs = 0;
  int64_t num_tokens = 0;
  int num_decodes = 0, num_prefills = 0;
  int64_t num_decode_tokens = 0, num_prefill_tokens = 0;
  int max_query_len = 0, max_seq_len = 0;
  int64_t blocks_used = 0, num_blocks = 0;
  double kv_cache_bytes = 0;  // whole cache (all physical blocks, K and V)
  double flops = 0, bytes = 0;
  double cache_write_bytes = 0;  // of `bytes`: the new K/V written (not moved by an attention-only sample)
  int64_t kv_tokens_read = 0;
  int common_prefix_len = 0;
  bool cascade = false;
  std::string cascade_reason;
  bool reordered = false;  // the decode/prefill reorder would move requests
  double host_bytes = 0;   // run_host_bytes: host memory a run of the batch takes (KV caches aside)
};
BatchSummary summarize_batch(const Batch& b, int num_sms = 132);

// Source revision of this build (`git describe --always --dirty` at build time; "unknown"
// outside a git checkout). Defined in the build folder's generated/git_rev.cpp.
const char* git_rev();
std::string build_info();  // "attn-bench 0.1.0 (git abc, CUDA on, archs 90a)"
std::string now_iso8601();

}  // namespace attn
