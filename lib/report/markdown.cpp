#include "report/markdown.hpp"
#include "report/side_by_side.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace attn {

namespace {

std::string cell(std::string s) {
  std::string out;
  for (char ch : s) {
    if (ch == '|') out += "\\|";
    else if (ch == '\n' || ch == '\r') out += ' ';
    else out += ch;
  }
  return out.empty() ? "-" : out;
}

std::string cut(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(0, n - 3) + "..."; }

bool checked(const ResultRow& r) { return r.status == "pass" || r.status == "fail"; }
bool timed(const ResultRow& r) { return checked(r) && r.samples > 0 && r.median_time_us > 0; }

// The accuracy figure a reader compares: x floor where the floor was measured, else rel_l2.
double accuracy_key(const ResultRow& r) { return r.floor_rel_l2 > 0 ? r.err_over_floor : r.rel_l2; }
std::string accuracy_text(const ResultRow& r) {
  return r.floor_rel_l2 > 0 ? fmt::format("{:.2f} x floor", r.err_over_floor) : fmt::format("rel_l2 {:.2e}", r.rel_l2);
}

// A row timed as the attention alone (`run --timed attention`) says so beside its time.
std::string time_text(const ResultRow& r) {
  if (!timed(r)) return "-";
  return figure_text(r.median_time_us, 2) + (r.timed == "attention" ? " (attention)" : "");
}

// How far a timed row's samples spread, beside how many there were: a reader judges a difference
// between two rows against it ("±1.2% of 30"; "of 1" where one sample gives no spread).
std::string spread_text(const ResultRow& r) {
  if (!timed(r)) return "-";
  if (r.samples < 2) return fmt::format("of {}", r.samples);
  return fmt::format("±{:.1f}% of {}", 100.0 * r.stdev_time_us / r.median_time_us, r.samples);
}

// The reason a backend was skipped on every one of its rows, if it was, and for one reason only.
std::optional<std::string> skipped_everywhere(const std::vector<ResultRow>& rows, const std::string& backend) {
  std::optional<std::string> reason;
  for (const ResultRow& r : rows) {
    if (r.backend != backend) continue;
    if (r.status != "skipped" || (reason && *reason != r.reason)) return std::nullopt;
    reason = r.reason;
  }
  return reason;
}

}  // namespace

std::string markdown_table(const std::vector<std::string>& headers, const std::vector<std::vector<std::string>>& rows,
                           const std::vector<bool>& right) {
  std::string out = "|";
  // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on `" " + cell(h) + " |"`.
  for (const std::string& h : headers) {
    out += ' ';
    out += cell(h);
    out += " |";
  }
  out += "\n|";
  for (size_t i = 0; i < headers.size(); ++i) out += i < right.size() && right[i] ? "---:|" : "---|";
  out += "\n";
  for (const auto& row : rows) {
    out += "|";
    for (const std::string& c : row) {
      out += ' ';
      out += cell(c);
      out += " |";
    }
    out += "\n";
  }
  return out;
}

std::string results_markdown(const std::vector<ResultRow>& rows, int top) {
  std::map<std::string, int> count;
  for (const ResultRow& r : rows) ++count[r.status];
  std::string out = "## attn-bench results\n\n";
  out += fmt::format("**{}: {} pass, {} fail, {} skipped, {} error**", count_of(static_cast<int>(rows.size()), "row"),
                     count["pass"], count["fail"], count["skipped"], count["error"]);
  // Build and device from the rows that have them (a skipped row may have neither), so
  // the line never ends in a separator with nothing after it.
  for (auto field : {&ResultRow::build, &ResultRow::device}) {
    const auto it = std::find_if(rows.begin(), rows.end(), [&](const ResultRow& r) { return !(r.*field).empty(); });
    if (it != rows.end()) out += " · " + (*it).*field;
  }
  const auto attention =
      std::count_if(rows.begin(), rows.end(), [](const ResultRow& r) { return timed(r) && r.timed == "attention"; });
  if (attention > 0)
    out += fmt::format(" · {} timed as the attention alone, without the cache write",
                       count_of(static_cast<int>(attention), "row"));
  out += "\n";

  std::vector<std::string> backends;
  for (const ResultRow& r : rows)
    if (std::find(backends.begin(), backends.end(), r.backend) == backends.end()) backends.push_back(r.backend);
  // `--backend all` without a GPU skips each GPU backend on every scenario for the same reason:
  // one line per reason under the tables says so, where a table would repeat it row after row.
  std::vector<std::pair<std::string, std::vector<std::string>>> skipped;  // reason, its backends
  for (const std::string& be : backends) {
    if (const std::optional<std::string> reason = skipped_everywhere(rows, be)) {
      auto it = std::find_if(skipped.begin(), skipped.end(), [&](const auto& s) { return s.first == *reason; });
      if (it == skipped.end()) it = skipped.insert(skipped.end(), {*reason, {}});
      it->second.push_back(be);
      continue;
    }
    std::vector<std::vector<std::string>> t;
    for (const ResultRow& r : rows) {
      if (r.backend != be) continue;
      const double peak = std::max(r.pct_peak_bw, r.pct_peak_flops);
      t.push_back({r.scenario, r.status, checked(r) ? accuracy_text(r) : "-", time_text(r),
                   timed(r) ? figure_text(r.tflops, 1) : "-", timed(r) ? figure_text(r.tb_per_sec * 1000.0, 0) : "-",
                   timed(r) && peak >= 0 ? fmt::format("{:.0f}%", peak) : "-", spread_text(r), cut(r.reason, 80)});
    }
    out += fmt::format("\n### {}\n\n", be);
    out += markdown_table(
        {"scenario", "status", "accuracy", "median us", "TFLOP/s", "GB/s", "% peak", "spread (samples)", "reason"}, t,
        {false, false, true, true, true, true, true, true, false});
  }
  if (!skipped.empty()) out += "\n";
  for (const auto& [reason, names] : skipped)
    out += fmt::format("{}: skipped on every scenario: {}\n", fmt::join(names, ", "), cell(reason));

  if (const SideBySide sbs = side_by_side(rows); !sbs.lines.empty()) {
    out += "\n### Backends side by side\n\n";
    out += "Each backend's median time over the fastest one's, on the batches that two or more backends timed and "
           "passed (~: within the two rows' noise; a cpu row is wall clock).\n\n";
    std::vector<std::string> head{"scenario", "fastest", "median us"};
    head.insert(head.end(), sbs.backends.begin(), sbs.backends.end());
    std::vector<bool> numeric{false, false, true};
    numeric.resize(head.size(), true);
    std::vector<std::vector<std::string>> t;
    for (const SideBySide::Line& l : sbs.lines) {
      std::vector<std::string> row{l.batch, l.fastest, figure_text(l.fastest_us, 2)};
      row.insert(row.end(), l.cells.begin(), l.cells.end());
      t.push_back(std::move(row));
    }
    out += markdown_table(head, t, numeric);
  }

  std::vector<const ResultRow*> slow, inaccurate;
  for (const ResultRow& r : rows) {
    if (timed(r)) slow.push_back(&r);
    if (checked(r)) inaccurate.push_back(&r);
  }
  const size_t n = static_cast<size_t>(std::max(top, 0));
  std::stable_sort(slow.begin(), slow.end(), [](auto* a, auto* b) { return a->median_time_us > b->median_time_us; });
  std::stable_sort(inaccurate.begin(), inaccurate.end(),
                   [](auto* a, auto* b) { return accuracy_key(*a) > accuracy_key(*b); });
  auto listing = [&](const char* title, const std::vector<const ResultRow*>& list, auto figure) {
    if (list.empty() || n == 0) return;
    out += fmt::format("\n### {}\n\n", title);
    std::vector<std::vector<std::string>> t;
    for (size_t i = 0; i < std::min(n, list.size()); ++i)
      t.push_back({list[i]->scenario, list[i]->backend, figure(*list[i])});
    out += markdown_table({"scenario", "backend", "figure"}, t, {false, false, true});
  };
  listing("Slowest", slow, [](const ResultRow& r) { return fmt::format("{} us", time_text(r)); });
  listing("Least accurate", inaccurate, [](const ResultRow& r) { return accuracy_text(r); });
  return out;
}

std::string compare_markdown(const CompareReport& report, bool all_rows) {
  std::string out = fmt::format("**{}**\n\n", report.verdict);
  // Which builds on which devices were compared: a reviewer sees a misconfigured gate here.
  const std::vector<std::string> sides = compare_provenance_lines(report);
  out += fmt::format("{}  \n{}\n\n", sides[0], sides[1]);
  if (const std::string w = compare_device_warning(report); !w.empty()) out += fmt::format("> {}\n\n", w);
  const std::vector<std::vector<std::string>> cells = compare_cells(report);
  std::vector<std::vector<std::string>> shown;
  int both_skipped = 0;
  for (size_t i = 0; i < report.rows.size(); ++i) {
    const CompareRow& c = report.rows[i];
    // Skipped on both sides (a GPU backend on a machine without one): counted, not listed.
    const bool skipped = c.base_status == "skipped" && c.new_status == "skipped" &&
                         c.change == CompareChange::not_timed;
    if (!all_rows && skipped) ++both_skipped;
    else if (all_rows || c.change != CompareChange::same || c.regression) shown.push_back(cells[i]);
  }
  if (shown.empty()) {
    out += fmt::format("No row slowed beyond {:.1f}%{} or changed status.\n", report.max_slowdown * 100,
                       report.noise_aware ? " and its noise" : "");
  } else {
    out += markdown_table(compare_headers(), shown, compare_numeric_columns());
  }
  if (both_skipped > 0)
    out += fmt::format("\n{} skipped in BASE and NEW not listed.\n", count_of(both_skipped, "row"));
  return out;
}

}  // namespace attn
