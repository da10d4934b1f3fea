// format_table: the console view of a results set, one line per row. Numbers are rounded for
// reading; the CSV/JSON hold the exact values.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "report/results.hpp"
#include "report/text.hpp"

namespace attn {

namespace {

constexpr size_t kMaxReason = 60;  // longer reasons are cut; the CSV has them whole

struct TableColumn {
  const char* header;
  bool right;  // numbers align right
};
constexpr std::array<TableColumn, 14> kTableColumns{{
    {"scenario", false},
    {"backend", false},
    {"status", false},
    {"reqs", true},
    {"tokens", true},
    {"max_abs_err", true},
    {"rel_l2", true},
    {"x floor", true},
    {"weakest feature (budgets)", false},  // how many budgets its typical bug moves the output
    {"median_us", true},
    {"TFLOP/s", true},
    {"GB/s", true},
    {"%peak", true},
    {"reason", false},
}};

std::string cut(const std::string& s, size_t n) {
  std::string one_line = s;
  std::replace(one_line.begin(), one_line.end(), '\n', ' ');
  if (one_line.size() <= n) return one_line;
  // At a word's end where one is near, so a reason never ends in half a word ("cudaErrorI...").
  size_t end = one_line.rfind(' ', n - 3);
  if (end == std::string::npos || end < n / 2) end = n - 3;
  return one_line.substr(0, end) + "...";
}

// The declared feature whose bug would move the output least, "soft_cap 6.5" (from the
// `sensitivity` column, "name=value ..."); "-" when the batch declares none.
std::string weakest_feature(const std::string& sensitivity) {
  std::string best = "-";
  double best_value = HUGE_VAL;
  size_t start = 0;
  while (start < sensitivity.size()) {
    size_t end = sensitivity.find(' ', start);
    if (end == std::string::npos) end = sensitivity.size();
    const std::string item = sensitivity.substr(start, end - start);
    const size_t eq = item.find('=');
    if (eq != std::string::npos) {
      const double v = std::strtod(item.c_str() + eq + 1, nullptr);
      if (v < best_value) {
        best_value = v;
        best = fmt::format("{} {:.3g}", item.substr(0, eq), v);
      }
    }
    start = end + 1;
  }
  return best;
}

std::array<std::string, kTableColumns.size()> cells_of(const ResultRow& r) {
  const bool ran = r.status == "pass" || r.status == "fail";
  const bool timed = ran && r.samples > 0;
  const double peak = std::max(r.pct_peak_bw, r.pct_peak_flops);  // the bound that binds
  return {
      r.scenario,
      r.backend,
      r.status,
      std::to_string(r.num_reqs),
      std::to_string(r.num_tokens),
      ran ? fmt::format("{:.2e}", r.max_abs_err) : "-",
      ran ? fmt::format("{:.2e}", r.rel_l2) : "-",
      ran && r.floor_rel_l2 > 0 ? fmt::format("{:.2f}", r.err_over_floor) : "-",
      ran ? weakest_feature(r.sensitivity) : "-",
      timed ? fmt::format("{:.2f}", r.median_time_us) : "-",
      timed ? figure_text(r.tflops, 1) : "-",
      timed ? figure_text(r.tb_per_sec * 1000.0, 0) : "-",
      timed && peak >= 0 ? fmt::format("{:.0f}%", peak) : "-",
      cut(r.reason, kMaxReason),
  };
}

}  // namespace

std::string count_of(int n, std::string_view noun) { return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s"); }

std::string figure_text(double v, int decimals) {
  return std::abs(v) >= 10 ? fmt::format("{:.{}f}", v, decimals) : fmt::format("{:.3g}", v);
}

std::string format_table(const std::vector<ResultRow>& rows) {
  std::vector<std::array<std::string, kTableColumns.size()>> cells;
  cells.reserve(rows.size());
  for (const ResultRow& r : rows) cells.push_back(cells_of(r));

  std::array<size_t, kTableColumns.size()> width{};
  for (size_t c = 0; c < kTableColumns.size(); ++c) {
    width[c] = std::string_view(kTableColumns[c].header).size();
    for (const auto& row : cells) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](auto cell_at) {
    std::string l;
    for (size_t c = 0; c < kTableColumns.size(); ++c) {
      const std::string& s = cell_at(c);
      const bool last = c + 1 == kTableColumns.size();
      if (c) l += "  ";
      if (kTableColumns[c].right) {
        l += fmt::format("{:>{}}", s, width[c]);
      } else {
        l += last ? s : fmt::format("{:<{}}", s, width[c]);  // no trailing blanks
      }
    }
    l.erase(l.find_last_not_of(' ') + 1);  // an empty last cell leaves the padding behind
    return l + '\n';
  };
  std::string out = line([&](size_t c) -> std::string { return kTableColumns[c].header; });
  for (const auto& row : cells) out += line([&](size_t c) -> const std::string& { return row[c]; });
  return out;
}

}  // namespace attn
