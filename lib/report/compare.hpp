#pragma once
// The regression gate of `attn-bench report compare BASE.csv NEW.csv --max-slowdown 5%`:
// rows are matched by (scenario, backend); the gate fails on a slowdown beyond the threshold and
// beyond the rows' noise, or on a row whose status got worse. Added and removed rows are
// reported, not gated.
#include <string>
#include <string_view>
#include <vector>

#include "report/results.hpp"

namespace attn {

struct CompareOptions {
  double max_slowdown = 0.05;  // fraction: new median may be at most (1 + x) times the base
  // A change no larger than the rows' noise (the smaller relative standard deviation of the two
  // sides' samples, as nvbench's compare judges it) is not a slowdown; false gates on the
  // threshold alone.
  bool noise_aware = true;
  // The files the two sides came from, named in input errors ("base" and "new" when empty).
  std::string base_name, new_name;
};

// "5%" -> 0.05, "0.05" -> 0.05. InputError (naming `what`, e.g. "--max-slowdown") on anything
// that is not a finite, non-negative number, and on a bare number above 1 ("5": did you mean 5%?).
double parse_slowdown(std::string_view text, const std::string& what = "--max-slowdown");

enum class CompareChange {
  same,           // within the threshold (or not timed on both sides)
  faster,         // beyond the threshold the good way (reported)
  slower,         // beyond the threshold (and the noise): gate failure
  within_noise,   // slower beyond the threshold, but not beyond the rows' noise (reported)
  status_worse,   // pass -> fail/error/skipped, skipped -> fail/error: gate failure
  status_better,  // e.g. fail -> pass (reported)
  added,          // only in NEW
  removed,        // only in BASE
};
const char* to_string(CompareChange c);

struct CompareRow {
  std::string scenario, backend;
  std::string base_status, new_status;  // "" where the row is absent
  double base_median_us = 0, new_median_us = 0;
  double ratio = 0;     // new / base median; 0 when either side was not timed
  double slowdown = 0;  // ratio - 1 (fraction; negative = faster)
  double noise = 0;     // the smaller stdev / median of the two sides (0: unknown, under 2 samples)
  // err_over_floor of each side (0: not checked): an accuracy drift is shown, never gated (the
  // status is the accuracy gate).
  double base_x_floor = 0, new_x_floor = 0;
  CompareChange change = CompareChange::same;
  bool regression = false;  // counts against the gate
};

struct CompareReport {
  std::vector<CompareRow> rows;  // BASE order, then rows added in NEW order
  int slowdowns = 0, status_regressions = 0, added = 0, removed = 0, compared = 0, within_noise = 0;
  double max_slowdown = 0;  // the threshold used
  bool pass = true;
  std::string verdict;      // one line: "PASS: ..." or "FAIL: ..."
};

// InputError when a side holds the same (scenario, backend) twice.
CompareReport compare_results(const std::vector<ResultRow>& base, const std::vector<ResultRow>& next,
                              const CompareOptions& opts = {});
// The report as an aligned table followed by the verdict line.
std::string format_compare(const CompareReport& report);
// The same table's header and cells (format_compare and the markdown form share them), and which
// of its columns hold numbers (right-aligned).
std::vector<std::string> compare_headers();
std::vector<bool> compare_numeric_columns();
std::vector<std::vector<std::string>> compare_cells(const CompareReport& report);

}  // namespace attn
