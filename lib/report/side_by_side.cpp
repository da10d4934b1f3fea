#include "report/side_by_side.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

#include <fmt/format.h>

#include "report/compare.hpp"
#include "report/text.hpp"

namespace attn {
namespace {

bool timed(const ResultRow& r) { return r.samples > 0 && r.median_time_us > 0; }
bool timed_pass(const ResultRow& r) { return r.status == "pass" && timed(r); }

// A row's relative noise: stdev / median of its samples (0 with fewer than 2).
double noise(const ResultRow& r) { return r.samples >= 2 ? r.stdev_time_us / r.median_time_us : 0.0; }

// The batch a row measures, the same for every backend: a sweep names its cases
// PRESET:NxQ@C[...]:BACKEND (docs/SCENARIOS.md), so a sweep row's suffix is dropped to pair the rows
// of different backends (scripts/plot.py's speedup pairs them the same way); other names as they are.
std::string batch_of(const ResultRow& r) {
  const size_t colon = r.scenario.rfind(':');
  if (r.sweep.empty() || colon == std::string::npos || colon == 0) return r.scenario;
  const std::string suffix = r.scenario.substr(colon + 1);
  const bool same = suffix.size() == r.backend.size() &&
                    std::equal(suffix.begin(), suffix.end(), r.backend.begin(), [](char a, char b) {
                      return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
                    });
  return same ? r.scenario.substr(0, colon) : r.scenario;
}

std::string ratio_text(double x) {
  if (x < 100) return fmt::format("{:.2f}", x);
  if (x < 1e6) return fmt::format("{:.0f}", x);
  return fmt::format("{:.2g}", x);
}

}  // namespace

SideBySide side_by_side(const std::vector<ResultRow>& rows) {
  std::vector<std::string> backends, batches;
  for (const ResultRow& r : rows) {
    if (std::find(backends.begin(), backends.end(), r.backend) == backends.end()) backends.push_back(r.backend);
    const std::string batch = batch_of(r);
    if (std::find(batches.begin(), batches.end(), batch) == batches.end()) batches.push_back(batch);
  }
  SideBySide out;
  std::vector<bool> shown(backends.size(), false);  // a backend with a ratio on some line
  for (const std::string& batch : batches) {
    // The batch's row of each backend, and how many it has (a file that repeats one is ambiguous).
    std::vector<const ResultRow*> of(backends.size(), nullptr);
    std::vector<int> count(backends.size(), 0);
    for (const ResultRow& r : rows) {
      if (batch_of(r) != batch) continue;
      const size_t b = static_cast<size_t>(std::find(backends.begin(), backends.end(), r.backend) - backends.begin());
      if (count[b]++ == 0) of[b] = &r;
    }
    // The rows compared: passing, timed, one per backend, and the same work as the first of them
    // (spec and batch shape: two rows of one name from different runs may differ).
    const ResultRow* first = nullptr;
    auto compared = [&](size_t b) {
      return of[b] != nullptr && count[b] == 1 && timed_pass(*of[b]) &&
             (first == nullptr || measured_work_differs(*first, *of[b]).empty());
    };
    const ResultRow* fastest = nullptr;
    int n = 0;
    for (size_t b = 0; b < backends.size(); ++b) {
      if (!compared(b)) continue;
      if (first == nullptr) first = of[b];
      ++n;
      if (fastest == nullptr || of[b]->median_time_us < fastest->median_time_us) fastest = of[b];
    }
    if (n < 2) continue;
    SideBySide::Line line{batch, fastest->backend, fastest->median_time_us, {}};
    for (size_t b = 0; b < backends.size(); ++b) {
      const ResultRow* r = of[b];
      if (r == nullptr) {
        line.cells.emplace_back("-");
      } else if (count[b] > 1) {
        line.cells.push_back(fmt::format("{} rows", count[b]));
      } else if (r->status != "pass") {
        line.cells.push_back(r->status);
      } else if (!timed(*r)) {
        line.cells.emplace_back("untimed");
      } else if (!compared(b)) {
        line.cells.emplace_back("other work");
      } else {
        const double x = r->median_time_us / fastest->median_time_us;
        // Slower by no more than the smaller of the two rows' noise is no difference to read
        // (report compare's rule for two runs of one row).
        const bool within = r != fastest && x - 1.0 <= std::min(noise(*r), noise(*fastest));
        std::string cell = within ? "~" : "";
        cell += ratio_text(x);
        line.cells.push_back(std::move(cell));
        shown[b] = true;
      }
    }
    out.lines.push_back(std::move(line));
  }
  // Columns of the backends with a ratio somewhere (one skipped everywhere has its own table's note).
  for (size_t b = 0; b < backends.size(); ++b)
    if (shown[b]) out.backends.push_back(backends[b]);
  for (SideBySide::Line& l : out.lines) {
    std::vector<std::string> cells;
    for (size_t b = 0; b < backends.size(); ++b)
      if (shown[b]) cells.push_back(std::move(l.cells[b]));
    l.cells = std::move(cells);
  }
  return out;
}

std::string side_by_side_text(const SideBySide& s) {
  if (s.lines.empty()) return {};
  std::vector<std::vector<std::string>> cells;
  std::vector<std::string> head{"batch", "fastest", "median_us"};
  head.insert(head.end(), s.backends.begin(), s.backends.end());
  cells.push_back(head);
  for (const SideBySide::Line& l : s.lines) {
    std::vector<std::string> row{l.batch, l.fastest, figure_text(l.fastest_us, 2)};
    row.insert(row.end(), l.cells.begin(), l.cells.end());
    cells.push_back(std::move(row));
  }
  std::vector<size_t> width(head.size(), 0);
  for (const auto& row : cells)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::string out;
  for (const auto& row : cells) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c) line += "  ";
      line += c < 2 ? fmt::format("{:<{}}", row[c], width[c]) : fmt::format("{:>{}}", row[c], width[c]);
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out += line + '\n';
  }
  return out;
}

}  // namespace attn
