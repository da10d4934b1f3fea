#pragma once
// The regression gate of `attn-bench report compare BASE.csv NEW.csv --max-slowdown 5%`:
// rows are matched by (scenario, backend); the gate fails on a slowdown beyond the threshold and
// beyond the rows' noise, on a row whose status got worse, on a row only in NEW that fails, and
// on matched rows that measured different work (a misconfigured gate). Removed rows, and added
// rows that pass or are skipped, are reported, not gated. A comparison in which no row could be
// compared for time, and nothing failed, says so (`report compare` exits 4): a gate that
// checked nothing never reads as a pass.
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
  // Matched rows that measured different work (measured_work_differs) fail the gate; false lists
  // them, still not time-compared, without failing.
  bool gate_different_work = true;
  // Every row of NEW that fails or errs fails the gate, also one that failed in BASE too.
  bool require_pass = false;
  // The files the two sides came from, named in input errors ("base" and "new" when empty).
  std::string base_name, new_name;
};

// "5%" -> 0.05, "0.05" -> 0.05. InputError (naming `what`, e.g. "--max-slowdown") on anything
// that is not a finite, non-negative number, and on a bare number above 1 ("5": did you mean 5%?).
double parse_slowdown(std::string_view text, const std::string& what = "--max-slowdown");

// What two rows of one (scenario, backend) measured differs: the first fields that differ with
// both values, "num_reqs 5 -> 3, kv_tokens 1200 -> 800"; empty when they measured the same work
// (spec and batch shape). Every column that says what was measured belongs here, so that rows
// of different work are never compared for time. A row that recorded no spec (an error before
// its batch was built: num_q_heads 0) is not compared: its status says what happened.
std::string measured_work_differs(const ResultRow& a, const ResultRow& b);

// Fewer samples than this on either side of a time-compared row: its noise figure is a guess,
// and the row's verdict says "few samples" (its gating is unchanged).
inline constexpr int kFewSamples = 5;

enum class CompareChange {
  same,           // within the threshold
  faster,         // beyond the threshold the good way (reported)
  slower,         // beyond the threshold (and the noise): gate failure
  within_noise,   // slower beyond the threshold, but not beyond the rows' noise (reported)
  status_worse,   // pass -> fail/error/skipped, skipped -> fail/error: gate failure
  status_better,  // e.g. fail -> pass (reported)
  added,          // only in NEW (a gate failure when it fails or errs)
  removed,        // only in BASE
  not_timed,      // same status, but not timed on one side or both: not compared for time
  different_work, // the two rows measured different work (gated unless told otherwise)
  still_failing,  // fail or error on both sides: not compared for time, gated by require_pass
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
  int base_samples = 0, new_samples = 0;
  std::string base_device, new_device;
  CompareChange change = CompareChange::same;
  std::string detail;      // different_work: what differs ("num_reqs 5 -> 3")
  bool few_samples = false;  // time-compared with fewer than kFewSamples on a side
  bool regression = false;  // counts against the gate
};

// Where one side's rows came from: each field is the rows' common value, "mixed" where they
// disagree, "" where none has one (values a row left empty are not counted).
struct CompareSide {
  std::string file, build, git_rev, device;
};

struct CompareReport {
  std::vector<CompareRow> rows;  // BASE order, then rows added in NEW order
  int slowdowns = 0, status_regressions = 0, added = 0, removed = 0, within_noise = 0;
  int in_common = 0;      // rows matched by (scenario, backend)
  int compared = 0;       // matched rows compared for time (timed on both sides, same work and status rank)
  int not_timed = 0, different_work = 0, still_failing = 0, few_samples = 0;
  int added_failures = 0;     // added rows that fail or err (gated)
  int required_failures = 0;  // rows gated by require_pass alone
  int device_changes = 0;     // matched rows whose two sides ran on different devices
  std::string device_change_example;  // the first of them, "s / fa: A -> B"
  CompareSide base, next;
  double max_slowdown = 0;  // the threshold used
  bool noise_aware = true;
  bool pass = true;
  // No row was compared for time and nothing failed: the gate checked nothing (exit 4, not a
  // pass). `nothing_checked_why` says why ("0 rows in common", ...).
  bool nothing_checked = false;
  std::string nothing_checked_why;
  std::string verdict;      // one line: "PASS: ...", "FAIL: ..." or "NOTHING CHECKED: ..."
};

// InputError when a side holds the same (scenario, backend) twice.
CompareReport compare_results(const std::vector<ResultRow>& base, const std::vector<ResultRow>& next,
                              const CompareOptions& opts = {});
// The report as the two sides' provenance (and a warning when devices differ), an aligned table
// and the verdict line.
std::string format_compare(const CompareReport& report);
// "BASE base.csv: build ..., git_rev ..., device ..." and the same for NEW, one line each; then
// the device warning line, if any (format_compare and the markdown form share them).
std::vector<std::string> compare_provenance_lines(const CompareReport& report);
std::string compare_device_warning(const CompareReport& report);  // "" when the devices agree
// The same table's header and cells (format_compare and the markdown form share them), and which
// of its columns hold numbers (right-aligned).
std::vector<std::string> compare_headers();
std::vector<bool> compare_numeric_columns();
std::vector<std::vector<std::string>> compare_cells(const CompareReport& report);

}  // namespace attn
