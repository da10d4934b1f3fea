#pragma once
// One results row per (scenario batch, backend). The CSV/JSON schema is documented in
// docs/RESULTS.md; column names follow FlashInfer's benchmarks and nvbench
// (median_time_us, tflops, tb_per_sec, ...).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/spec.hpp"

namespace attn {

enum class RowStatus { pass, fail, skipped, error };
const char* to_string(RowStatus s);

struct ResultRow {
  // what
  std::string scenario, backend, status = "pass", reason;
  // spec
  int num_q_heads = 0, num_kv_heads = 0, head_size_qk = 0, head_size_v = 0;
  std::string dtype, kv_cache_dtype, kv_layout;
  int block_size = 0, sliding_window = 0;
  double logits_soft_cap = 0, scale = 0, k_scale = 1, v_scale = 1;
  double q_scale = 0;  // fp8 query quantization's scale (vLLM, fp8 e4m3 cache); 0 = not quantized
  bool alibi = false, sinks = false, causal = true, mla = false;
  // batch
  int num_reqs = 0;
  int64_t num_tokens = 0;
  int num_decodes = 0, num_prefills = 0;
  int64_t num_decode_tokens = 0, num_prefill_tokens = 0, kv_tokens = 0;
  int shared_prefix_len = 0;
  bool cascade = false;
  // [run] num_layers: run() ran this many layers, each over its own cache, so flops, bytes and
  // the times are of all of them (files without the column read as 1).
  int num_layers = 1;
  std::string plan_summary;
  // What reproduces the batch: its requests as `--batch` takes them ("48x1@2048,2x512@1024", in
  // batch order) and the data seed actually used (after --seed).
  std::string batch;
  uint64_t seed = 0;
  // errors (validation)
  double max_abs_err = 0, max_rel_err = 0, rel_l2 = 0, cosine = 1, nmse = 0, quant_rel_l2 = -1;
  double floor_rel_l2 = 0, err_over_floor = 0;  // the output-rounding floor and rel_l2 / floor
  double naive_rel_l2 = -1;
  // Per declared feature: its typical bug's effect on this batch in rel_l2 budgets,
  // "soft_cap=12.3 sinks=5.02"; the features below 4 budgets, space-separated.
  std::string sensitivity, not_exercised;
  int64_t nan_mismatches = 0, unwritten = 0, checked_pairs = 0, total_pairs = 0;
  std::string worst;  // "req=3 tok=17 pos=2064 head=5 dim=9 got=.. want=.."
  bool deterministic = true;    // two runs bitwise equal
  bool batch_invariant = true;  // requests run alone match their rows inside the batch bitwise
  // Whether that check ran (not with --no-invariance, nor for a one-request batch); not a
  // column of its own: where it did not run, batch_invariant is written empty (CSV) or null.
  bool batch_invariance_checked = false;
  // timing
  double plan_us = 0, median_time_us = 0, min_time_us = 0, max_time_us = 0, stdev_time_us = 0;
  int samples = 0;
  std::string timing_method;
  bool cold_l2 = false;
  // The timing settings asked for (samples says how many ran): warmup and iterations of a timed
  // run (iterations 0: nothing was to be timed, both written empty), and the host rows' time
  // budget in seconds (-1: does not apply, a device row or an untimed run; written empty).
  int warmup = 0, iterations = 0;
  double host_timeout_s = -1;
  // What each sample of a timed run ran (TimedPart): "step" (cache write + attention) or
  // "attention" (over caches already written). Empty where nothing was to be timed, and in files of
  // builds that timed only the step (compare reads that as "step").
  std::string timed;
  double flops = 0, bytes = 0, tflops = 0, tb_per_sec = 0;
  double pct_peak_bw = -1, pct_peak_flops = -1;  // -1: ceiling unknown
  // A bare streaming read of `bytes` on the device from the same cold L2 (timing/read_floor.hpp),
  // and that time as a percentage of median_time_us; -1: not measured.
  double read_floor_us = -1, pct_read_floor = -1;
  // provenance
  std::string device, build, git_rev, timestamp;
  // Sweep rows: the sweep's name, the shard that ran them ("I/N"; empty when unsharded) and the
  // case's index in the sweep's own order (written only where `sweep` is set). Empty for `run`.
  std::string sweep, shard;
  int case_index = 0;
};

// Writers are atomic: a temp file beside the target, then rename. Throw RuntimeError on I/O.
void write_csv(const std::string& path, const std::vector<ResultRow>& rows);
void write_json(const std::string& path, const std::vector<ResultRow>& rows);
std::string rows_to_csv(const std::vector<ResultRow>& rows);
std::string rows_to_json(const std::vector<ResultRow>& rows);
// Reads a CSV written by write_csv (fast-cpp-csv-parser); InputError on a malformed file.
std::vector<ResultRow> read_csv(const std::string& path);
// Human table for the console.
std::string format_table(const std::vector<ResultRow>& rows);
// Writes `content` to `path` atomically.
void write_file_atomic(const std::string& path, const std::string& content);
// Writes each (path, content) atomically, all or none: every temp file is written before any is
// renamed, so one that fails (RuntimeError) leaves every target as it was and no temp file
// behind. Only a rename failing part-way (the temp files were made in the targets' folders, so
// rare) can leave the earlier targets replaced.
void write_files_atomic(const std::vector<std::pair<std::string, std::string>>& files);
// JUnit XML for CI (`validate --junit`): a testsuite per scenario, a testcase per backend,
// <failure>/<error> with the reason for fail/error rows, <skipped> for skipped ones. Atomic.
void write_junit(const std::string& path, const std::vector<ResultRow>& rows);
std::string rows_to_junit(const std::vector<ResultRow>& rows);
// "pass" | "fail" | "skipped" | "error" -> RowStatus; nullopt for anything else.
std::optional<RowStatus> parse_row_status(std::string_view s);
// The CSV header / JSON keys, in their fixed order (docs/RESULTS.md).
std::vector<std::string> result_column_names();

}  // namespace attn
