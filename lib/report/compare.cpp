// The regression gate. Status ranks: pass < skipped < fail = error; a row whose rank rises
// is a status regression (pass -> skipped means a backend stopped supporting a case it ran).
// A row timed on both sides (median > 0) is slower when new / base > 1 + max_slowdown and the
// change exceeds the rows' noise: |new / base - 1| <= min(stdev / median of each side) is the
// same time as far as the samples can tell (nvbench's compare rule).
#include "report/compare.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"

namespace attn {

namespace {

int status_rank(const std::string& s) {
  if (s == "pass") return 0;
  if (s == "skipped") return 1;
  return 2;  // fail, error (and anything unknown: never better than a failure)
}

using Key = std::pair<std::string, std::string>;  // (scenario, backend)

std::map<Key, const ResultRow*> index_rows(const std::vector<ResultRow>& rows, const std::string& side) {
  std::map<Key, const ResultRow*> idx;
  for (const ResultRow& r : rows) {
    if (!idx.emplace(Key{r.scenario, r.backend}, &r).second) {
      throw InputError(fmt::format("{}: scenario '{}' backend '{}' appears twice (hint: compare files of "
                                   "one run each)",
                                   side, r.scenario, r.backend));
    }
  }
  return idx;
}

std::string percent(double fraction) { return fmt::format("{:+.1f}%", fraction * 100.0); }

// A row's relative noise: the standard deviation of its samples over their median; 0 where it
// is unknown (fewer than 2 samples, or not timed).
double relative_noise(const ResultRow& r) {
  if (r.samples < 2 || !(r.median_time_us > 0) || !(r.stdev_time_us > 0) || !std::isfinite(r.stdev_time_us)) return 0;
  return r.stdev_time_us / r.median_time_us;
}

// The noise two rows' change is judged against: the smaller of the known ones (either side's
// alone where the other is unknown), as nvbench's compare does.
double pair_noise(const ResultRow& a, const ResultRow& b) {
  const double na = relative_noise(a), nb = relative_noise(b);
  if (na > 0 && nb > 0) return std::min(na, nb);
  return std::max(na, nb);
}

}  // namespace

double parse_slowdown(std::string_view text, const std::string& what) {
  std::string_view s = text;
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  const bool pct = !s.empty() && s.back() == '%';
  if (pct) s.remove_suffix(1);
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v) || v < 0) {
    throw InputError(InputSite{"<cli>", 0, what, std::string(text), "not a slowdown threshold",
                                         "a non-negative fraction (0.05) or percentage (5%)"});
  }
  // A bare number is a fraction, so "5" would be +500 %: almost always "5 %" typed without its
  // sign. Above 1 (a slowdown of more than 100 %) it is refused with the percentage it likely meant.
  if (!pct && v > 1) {
    const std::string bare(s);
    throw InputError(fmt::format("{} {}: a fraction ({:g}) or a percentage ({}%); did you mean {}%?", what, bare,
                                 v / 100, bare, bare));
  }
  return pct ? v / 100.0 : v;
}

const char* to_string(CompareChange c) {
  switch (c) {
    case CompareChange::same: return "same";
    case CompareChange::faster: return "faster";
    case CompareChange::slower: return "slower";
    case CompareChange::within_noise: return "slower, within noise";
    case CompareChange::status_worse: return "status worse";
    case CompareChange::status_better: return "status better";
    case CompareChange::added: return "added";
    case CompareChange::removed: return "removed";
  }
  return "?";
}

CompareReport compare_results(const std::vector<ResultRow>& base, const std::vector<ResultRow>& next,
                              const CompareOptions& opts) {
  if (!std::isfinite(opts.max_slowdown) || opts.max_slowdown < 0) {
    throw InputError(fmt::format("max_slowdown {} must be a non-negative fraction", opts.max_slowdown));
  }
  const auto base_idx = index_rows(base, opts.base_name.empty() ? "base results" : opts.base_name);
  const auto next_idx = index_rows(next, opts.new_name.empty() ? "new results" : opts.new_name);
  CompareReport rep;
  rep.max_slowdown = opts.max_slowdown;

  for (const ResultRow& b : base) {
    CompareRow c;
    c.scenario = b.scenario;
    c.backend = b.backend;
    c.base_status = b.status;
    c.base_median_us = b.median_time_us;
    c.base_x_floor = b.err_over_floor;
    const auto it = next_idx.find(Key{b.scenario, b.backend});
    if (it == next_idx.end()) {
      c.change = CompareChange::removed;
      ++rep.removed;
      rep.rows.push_back(std::move(c));
      continue;
    }
    const ResultRow& n = *it->second;
    ++rep.compared;
    c.new_status = n.status;
    c.new_median_us = n.median_time_us;
    c.new_x_floor = n.err_over_floor;
    if (b.median_time_us > 0 && n.median_time_us > 0) {
      c.ratio = n.median_time_us / b.median_time_us;
      c.slowdown = c.ratio - 1.0;
      c.noise = pair_noise(b, n);
    }
    const bool beyond_noise = !opts.noise_aware || std::abs(c.slowdown) > c.noise;
    // "Beyond" the threshold: a tiny relative tolerance keeps exactly +5% at 5% a pass.
    const double tol = 1e-12 * (1.0 + opts.max_slowdown);
    if (status_rank(n.status) > status_rank(b.status)) {
      c.change = CompareChange::status_worse;
      c.regression = true;
      ++rep.status_regressions;
    } else if (status_rank(n.status) < status_rank(b.status)) {
      c.change = CompareChange::status_better;
    } else if (c.ratio > 0 && c.slowdown > opts.max_slowdown + tol && !beyond_noise) {
      c.change = CompareChange::within_noise;
      ++rep.within_noise;
    } else if (c.ratio > 0 && c.slowdown > opts.max_slowdown + tol) {
      c.change = CompareChange::slower;
      c.regression = true;
      ++rep.slowdowns;
    } else if (c.ratio > 0 && -c.slowdown > opts.max_slowdown + tol && beyond_noise) {
      c.change = CompareChange::faster;
    }
    rep.rows.push_back(std::move(c));
  }
  for (const ResultRow& n : next) {
    if (base_idx.count(Key{n.scenario, n.backend})) continue;
    CompareRow c;
    c.scenario = n.scenario;
    c.backend = n.backend;
    c.new_status = n.status;
    c.new_median_us = n.median_time_us;
    c.change = CompareChange::added;
    ++rep.added;
    rep.rows.push_back(std::move(c));
  }

  const std::string threshold = percent(opts.max_slowdown) + (opts.noise_aware ? " beyond its noise" : "");
  std::string tail = fmt::format("{} compared, {} added, {} removed", rep.compared, rep.added, rep.removed);
  if (rep.within_noise > 0) tail += fmt::format(", {} slower than the threshold within their noise", rep.within_noise);
  rep.pass = rep.slowdowns == 0 && rep.status_regressions == 0;
  if (rep.pass) {
    rep.verdict = fmt::format("PASS: no row slower than {} or worse in status ({})", threshold, tail);
  } else {
    rep.verdict = fmt::format("FAIL: {} slower than {}, {} worse in status ({})", rep.slowdowns, threshold,
                              rep.status_regressions, tail);
  }
  return rep;
}

std::vector<std::string> compare_headers() {
  return {"scenario", "backend", "base_us", "new_us", "change", "noise", "x_floor", "status", "verdict"};
}

std::vector<bool> compare_numeric_columns() { return {false, false, true, true, true, true, true, false, false}; }

std::vector<std::vector<std::string>> compare_cells(const CompareReport& report) {
  std::vector<std::vector<std::string>> cells;
  for (const CompareRow& c : report.rows) {
    auto time = [](double us) { return us > 0 ? fmt::format("{:.2f}", us) : std::string("-"); };
    std::string status = c.base_status.empty() ? "-> " + c.new_status
                         : c.new_status.empty() ? c.base_status + " ->"
                         : c.base_status == c.new_status ? c.base_status
                                                         : c.base_status + " -> " + c.new_status;
    std::string verdict = to_string(c.change);
    if (c.regression) verdict += " (REGRESSION)";
    // The error against the precision floor, base -> new where both rows were checked.
    auto x_floor = [](double x) { return x > 0 ? fmt::format("{:.2f}", x) : std::string("-"); };
    const std::string accuracy = c.base_x_floor > 0 && c.new_x_floor > 0
                                     ? x_floor(c.base_x_floor) + " -> " + x_floor(c.new_x_floor)
                                     : x_floor(c.new_x_floor > 0 ? c.new_x_floor : c.base_x_floor);
    cells.push_back({c.scenario, c.backend, time(c.base_median_us), time(c.new_median_us),
                     c.ratio > 0 ? percent(c.slowdown) : "-",
                     c.noise > 0 ? fmt::format("{:.1f}%", c.noise * 100.0) : "-", accuracy, status, verdict});
  }
  return cells;
}

std::string format_compare(const CompareReport& report) {
  const std::vector<std::string> headers = compare_headers();
  const std::vector<bool> numeric = compare_numeric_columns();
  const std::vector<std::vector<std::string>> cells = compare_cells(report);
  std::vector<size_t> width(headers.size());
  for (size_t i = 0; i < headers.size(); ++i) {
    width[i] = headers[i].size();
    for (const auto& row : cells) width[i] = std::max(width[i], row[i].size());
  }
  auto line = [&](const std::vector<std::string>& row) {
    std::string l;
    for (size_t i = 0; i < row.size(); ++i) {
      if (i) l += "  ";
      const bool number = numeric[i];
      const bool last = i + 1 == row.size();
      l += number ? fmt::format("{:>{}}", row[i], width[i]) : last ? row[i] : fmt::format("{:<{}}", row[i], width[i]);
    }
    return l + '\n';
  };
  std::string out = line(headers);
  for (const auto& row : cells) out += line(row);
  out += report.verdict + '\n';
  return out;
}

}  // namespace attn
