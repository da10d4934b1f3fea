#pragma once
// The results schema as data: every ResultRow field with its column name, in the fixed order
// of the CSV header and the JSON keys (docs/RESULTS.md). The CSV, JSON and table writers and
// the CSV reader all walk this one table, so a new field is added in one place.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "report/results.hpp"

namespace attn {

using ResultField = std::variant<std::string ResultRow::*, int ResultRow::*, int64_t ResultRow::*,
                                 uint64_t ResultRow::*, double ResultRow::*, bool ResultRow::*>;

struct ResultColumn {
  const char* name;
  ResultField field;
};

inline constexpr std::array<ResultColumn, 80> kResultColumns{{
    // what
    {"scenario", &ResultRow::scenario},
    {"backend", &ResultRow::backend},
    {"status", &ResultRow::status},
    {"reason", &ResultRow::reason},
    // spec
    {"num_q_heads", &ResultRow::num_q_heads},
    {"num_kv_heads", &ResultRow::num_kv_heads},
    {"head_size_qk", &ResultRow::head_size_qk},
    {"head_size_v", &ResultRow::head_size_v},
    {"dtype", &ResultRow::dtype},
    {"kv_cache_dtype", &ResultRow::kv_cache_dtype},
    {"kv_layout", &ResultRow::kv_layout},
    {"block_size", &ResultRow::block_size},
    {"sliding_window", &ResultRow::sliding_window},
    {"logits_soft_cap", &ResultRow::logits_soft_cap},
    {"scale", &ResultRow::scale},
    {"k_scale", &ResultRow::k_scale},
    {"v_scale", &ResultRow::v_scale},
    {"q_scale", &ResultRow::q_scale},
    {"alibi", &ResultRow::alibi},
    {"sinks", &ResultRow::sinks},
    {"causal", &ResultRow::causal},
    {"mla", &ResultRow::mla},
    // batch
    {"num_reqs", &ResultRow::num_reqs},
    {"num_tokens", &ResultRow::num_tokens},
    {"num_decodes", &ResultRow::num_decodes},
    {"num_prefills", &ResultRow::num_prefills},
    {"num_decode_tokens", &ResultRow::num_decode_tokens},
    {"num_prefill_tokens", &ResultRow::num_prefill_tokens},
    {"kv_tokens", &ResultRow::kv_tokens},
    {"shared_prefix_len", &ResultRow::shared_prefix_len},
    {"cascade", &ResultRow::cascade},
    {"num_layers", &ResultRow::num_layers},
    {"plan_summary", &ResultRow::plan_summary},
    {"batch", &ResultRow::batch},
    {"seed", &ResultRow::seed},
    // errors
    {"max_abs_err", &ResultRow::max_abs_err},
    {"max_rel_err", &ResultRow::max_rel_err},
    {"rel_l2", &ResultRow::rel_l2},
    {"floor_rel_l2", &ResultRow::floor_rel_l2},
    {"err_over_floor", &ResultRow::err_over_floor},
    {"naive_rel_l2", &ResultRow::naive_rel_l2},
    {"sensitivity", &ResultRow::sensitivity},
    {"not_exercised", &ResultRow::not_exercised},
    {"cosine", &ResultRow::cosine},
    {"nmse", &ResultRow::nmse},
    {"quant_rel_l2", &ResultRow::quant_rel_l2},
    {"nan_mismatches", &ResultRow::nan_mismatches},
    {"unwritten", &ResultRow::unwritten},
    {"checked_pairs", &ResultRow::checked_pairs},
    {"total_pairs", &ResultRow::total_pairs},
    {"worst", &ResultRow::worst},
    {"deterministic", &ResultRow::deterministic},
    {"batch_invariant", &ResultRow::batch_invariant},
    // timing
    {"plan_us", &ResultRow::plan_us},
    {"median_time_us", &ResultRow::median_time_us},
    {"min_time_us", &ResultRow::min_time_us},
    {"max_time_us", &ResultRow::max_time_us},
    {"stdev_time_us", &ResultRow::stdev_time_us},
    {"samples", &ResultRow::samples},
    {"timing_method", &ResultRow::timing_method},
    {"cold_l2", &ResultRow::cold_l2},
    {"warmup", &ResultRow::warmup},
    {"iterations", &ResultRow::iterations},
    {"host_timeout_s", &ResultRow::host_timeout_s},
    {"timed", &ResultRow::timed},
    {"flops", &ResultRow::flops},
    {"bytes", &ResultRow::bytes},
    {"tflops", &ResultRow::tflops},
    {"tb_per_sec", &ResultRow::tb_per_sec},
    {"pct_peak_bw", &ResultRow::pct_peak_bw},
    {"pct_peak_flops", &ResultRow::pct_peak_flops},
    {"read_floor_us", &ResultRow::read_floor_us},
    {"pct_read_floor", &ResultRow::pct_read_floor},
    // provenance
    {"device", &ResultRow::device},
    {"build", &ResultRow::build},
    {"git_rev", &ResultRow::git_rev},
    {"timestamp", &ResultRow::timestamp},
    {"sweep", &ResultRow::sweep},
    {"shard", &ResultRow::shard},
    {"case_index", &ResultRow::case_index},
}};

// Shortest decimal that reads back to the same double ("inf", "-inf", "nan" when not finite).
std::string format_double(double x);

// Whether a column holds a value for this row. Rows that were not checked (skipped, error)
// have no errors, rows that were not timed no timings, batch_invariant exists only where
// that check ran, warmup/iterations only for a timed run (iterations > 0), host_timeout_s only
// where it is >= 0 (host rows of a timed run) and case_index only on sweep rows: such cells are
// written empty (CSV) or null (JSON) rather than as defaults (cosine 1, deterministic true) that
// would read as a check passed, or as a setting (iterations 0, a host budget of 0).
bool field_applies(const ResultRow& row, const ResultColumn& c);

// A field's value as text, unescaped: numbers as above, booleans "true"/"false".
std::string field_text(const ResultRow& row, const ResultColumn& c);

// Sets a field from its text (the inverse of field_text; booleans also accept 1/0). An empty
// cell of a column that may not apply leaves the default (batch_invariant: not checked).
// Returns false when the text is not a value of the field's type.
bool set_field(ResultRow& row, const ResultColumn& c, std::string_view text);

}  // namespace attn
