// The regression gate. Status ranks: pass < skipped < fail = error; a row whose rank rises
// is a status regression (pass -> skipped means a backend stopped supporting a case it ran).
// A row timed on both sides (median > 0) is slower when new / base > 1 + max_slowdown and the
// change exceeds the rows' noise: |new / base - 1| <= min(stdev / median of each side) is the
// same time as far as the samples can tell (nvbench's compare rule). Only rows that measured
// the same work with the same status rank are compared for time: a 5-request batch against a
// 3-request one under one name is a misconfigured gate, not a speed-up.
#include "report/compare.hpp"
#include "report/text.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

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

bool failing(const std::string& status) { return status == "fail" || status == "error"; }
bool timed(const ResultRow& r) { return r.median_time_us > 0; }

// One field of measured_work_differs: "name a -> b" when the two values' texts differ ({}
// writes a double's shortest exact form, so equal texts are equal values).
template <class T>
void differ(std::vector<std::string>& out, const char* name, const T& a, const T& b) {
  auto text = [](const T& v) {
    std::string t = fmt::format("{}", v);
    return t.empty() ? std::string("''") : t;
  };
  if (text(a) != text(b)) out.push_back(fmt::format("{} {} -> {}", name, text(a), text(b)));
}

// The value every row of `rows` that has one agrees on; "mixed" where they disagree.
std::string common_value(const std::vector<ResultRow>& rows, std::string ResultRow::*field) {
  std::string v;
  for (const ResultRow& r : rows) {
    const std::string& x = r.*field;
    if (x.empty() || x == v) continue;
    if (!v.empty()) return "mixed";
    v = x;
  }
  return v;
}

CompareSide side_of(const std::vector<ResultRow>& rows, const std::string& file) {
  return {file, common_value(rows, &ResultRow::build), common_value(rows, &ResultRow::git_rev),
          common_value(rows, &ResultRow::device)};
}

// Why a comparison that compared no row for time checked nothing.
std::string nothing_checked_why(const CompareReport& rep) {
  if (rep.in_common == 0) return "0 rows in common";
  const std::string common = count_of(rep.in_common, "row") + " in common";
  if (rep.not_timed == rep.in_common) return common + ", none timed on both sides";
  std::vector<std::string> parts;
  if (rep.not_timed > 0) parts.push_back(fmt::format("{} not timed on both sides", rep.not_timed));
  if (rep.different_work > 0) parts.push_back(fmt::format("{} measured different work", rep.different_work));
  if (rep.still_failing > 0) parts.push_back(fmt::format("{} failing on both sides", rep.still_failing));
  const int changed = rep.in_common - rep.not_timed - rep.different_work - rep.still_failing;
  if (changed > 0) parts.push_back(fmt::format("{} changed status", changed));
  return fmt::format("{}, none compared for time ({})", common, fmt::join(parts, ", "));
}

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


std::string measured_work_differs(const ResultRow& a, const ResultRow& b) {
  if (a.num_q_heads == 0 || b.num_q_heads == 0) return "";
  std::vector<std::string> out;
  auto field = [&](const char* name, auto member) { differ(out, name, a.*member, b.*member); };
  // spec
  field("num_q_heads", &ResultRow::num_q_heads);
  field("num_kv_heads", &ResultRow::num_kv_heads);
  field("head_size_qk", &ResultRow::head_size_qk);
  field("head_size_v", &ResultRow::head_size_v);
  field("dtype", &ResultRow::dtype);
  field("kv_cache_dtype", &ResultRow::kv_cache_dtype);
  field("kv_layout", &ResultRow::kv_layout);
  field("block_size", &ResultRow::block_size);
  field("sliding_window", &ResultRow::sliding_window);
  field("logits_soft_cap", &ResultRow::logits_soft_cap);
  field("alibi", &ResultRow::alibi);
  field("sinks", &ResultRow::sinks);
  field("causal", &ResultRow::causal);
  field("mla", &ResultRow::mla);
  // batch
  field("num_reqs", &ResultRow::num_reqs);
  field("num_tokens", &ResultRow::num_tokens);
  field("num_decodes", &ResultRow::num_decodes);
  field("num_prefills", &ResultRow::num_prefills);
  field("kv_tokens", &ResultRow::kv_tokens);
  field("shared_prefix_len", &ResultRow::shared_prefix_len);
  field("cascade", &ResultRow::cascade);
  field("num_layers", &ResultRow::num_layers);
  // What each sample ran, where both sides were timed: the attention alone is not the step.
  if (a.iterations > 0 && b.iterations > 0) {
    const auto part = [](const ResultRow& r) { return r.timed.empty() ? std::string("step") : r.timed; };
    differ(out, "timed", part(a), part(b));
  }
  // The request list and the data seed, where both sides wrote them (files of older builds have
  // no such columns: their rows are judged by the aggregates above).
  if (!a.batch.empty() && !b.batch.empty()) {
    field("batch", &ResultRow::batch);
    field("seed", &ResultRow::seed);
  }
  // The first three: enough to see the mistake, short enough for a table cell.
  constexpr size_t kShown = 3;
  std::string text = fmt::format("{}", fmt::join(out.begin(), out.begin() + std::min(out.size(), kShown), ", "));
  if (out.size() > kShown) text += fmt::format(" (+{} more)", out.size() - kShown);
  return text;
}

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
    case CompareChange::not_timed: return "not timed";
    case CompareChange::different_work: return "different work";
    case CompareChange::still_failing: return "fails in both";
  }
  return "?";
}

namespace {

// A matched pair's verdict, and the report's counts of it. `tol` keeps exactly +5% at 5% a pass.
void judge_matched(CompareRow& c, const ResultRow& b, const ResultRow& n, const CompareOptions& opts,
                   CompareReport& rep) {
  const double tol = 1e-12 * (1.0 + opts.max_slowdown);
  const bool worse = status_rank(n.status) > status_rank(b.status);
  c.detail = measured_work_differs(b, n);
  if (!c.detail.empty()) {
    // Checked first: the time of different work says nothing about this change. Where such
    // rows are allowed, a status that got worse still fails the gate.
    c.change = CompareChange::different_work;
    c.regression = opts.gate_different_work || worse;
    rep.status_regressions += !opts.gate_different_work && worse;
    ++rep.different_work;
    return;
  }
  if (worse) {
    c.change = CompareChange::status_worse;
    c.regression = true;
    ++rep.status_regressions;
    return;
  }
  if (status_rank(n.status) < status_rank(b.status)) {
    c.change = CompareChange::status_better;
    return;
  }
  if (failing(b.status) && failing(n.status)) {
    // A known failure: gated by require_pass, never by its time (the time of a wrong answer).
    c.change = CompareChange::still_failing;
    ++rep.still_failing;
    return;
  }
  if (!timed(b) || !timed(n)) {
    // validate does not time: a timed BASE against it compared nothing, and is not a "same".
    c.change = CompareChange::not_timed;
    ++rep.not_timed;
    return;
  }
  ++rep.compared;
  c.ratio = n.median_time_us / b.median_time_us;
  c.slowdown = c.ratio - 1.0;
  c.noise = pair_noise(b, n);
  c.few_samples = b.samples < kFewSamples || n.samples < kFewSamples;
  rep.few_samples += c.few_samples;
  const bool beyond_noise = !opts.noise_aware || std::abs(c.slowdown) > c.noise;
  if (c.slowdown > opts.max_slowdown + tol && !beyond_noise) {
    c.change = CompareChange::within_noise;
    ++rep.within_noise;
  } else if (c.slowdown > opts.max_slowdown + tol) {
    c.change = CompareChange::slower;
    c.regression = true;
    ++rep.slowdowns;
  } else if (-c.slowdown > opts.max_slowdown + tol && beyond_noise) {
    c.change = CompareChange::faster;
  }
}

// The verdict line: what failed the gate (or why it checked nothing), then the counts.
std::string verdict_line(const CompareReport& rep, const CompareOptions& opts) {
  const std::string threshold = percent(opts.max_slowdown) + (opts.noise_aware ? " beyond its noise" : "");
  std::string tail = fmt::format("{} compared, {} added, {} removed", rep.compared, rep.added, rep.removed);
  if (rep.not_timed > 0) tail += fmt::format(", {} not timed", rep.not_timed);
  if (rep.different_work > 0 && !opts.gate_different_work)
    tail += fmt::format(", {} measured different work (not gated)", rep.different_work);
  if (rep.within_noise > 0)
    tail += fmt::format(", {} slower than the threshold within {} noise", rep.within_noise,
                        rep.within_noise == 1 ? "its" : "their");
  if (rep.few_samples > 0)
    tail += fmt::format(", {} compared on fewer than {} samples", count_of(rep.few_samples, "row"), kFewSamples);
  if (rep.still_failing > 0 && !opts.require_pass)
    tail += fmt::format(", {} {} in NEW and BASE", count_of(rep.still_failing, "row"),
                        rep.still_failing == 1 ? "fails" : "fail");
  if (rep.pass && rep.nothing_checked)
    return fmt::format("NOTHING CHECKED: no row of NEW could be compared with BASE: {} ({})", rep.nothing_checked_why,
                       tail);
  if (rep.pass) return fmt::format("PASS: no row slower than {} or worse in status ({})", threshold, tail);
  std::string failed = fmt::format("{} slower than {}, {} worse in status", rep.slowdowns, threshold,
                                   rep.status_regressions);
  if (rep.added_failures > 0)
    failed += fmt::format(", {} only in NEW {}", count_of(rep.added_failures, "row"),
                          rep.added_failures == 1 ? "fails" : "fail");
  if (rep.different_work > 0 && opts.gate_different_work)
    failed += fmt::format(", {} measured different work than BASE (a misconfigured gate: compare runs of the same "
                          "scenarios; --allow-different-work lists them ungated)",
                          count_of(rep.different_work, "row"));
  if (rep.required_failures > 0)
    failed += fmt::format(", {} {} (--require-pass)", count_of(rep.required_failures, "row"),
                          rep.required_failures == 1 ? "fails" : "fail");
  return fmt::format("FAIL: {} ({})", failed, tail);
}

}  // namespace

CompareReport compare_results(const std::vector<ResultRow>& base, const std::vector<ResultRow>& next,
                              const CompareOptions& opts) {
  if (!std::isfinite(opts.max_slowdown) || opts.max_slowdown < 0) {
    throw InputError(fmt::format("max_slowdown {} must be a non-negative fraction", opts.max_slowdown));
  }
  const auto base_idx = index_rows(base, opts.base_name.empty() ? "base results" : opts.base_name);
  const auto next_idx = index_rows(next, opts.new_name.empty() ? "new results" : opts.new_name);
  CompareReport rep;
  rep.max_slowdown = opts.max_slowdown;
  rep.noise_aware = opts.noise_aware;
  rep.base = side_of(base, opts.base_name);
  rep.next = side_of(next, opts.new_name);

  for (const ResultRow& b : base) {
    CompareRow c;
    c.scenario = b.scenario;
    c.backend = b.backend;
    c.base_status = b.status;
    c.base_median_us = b.median_time_us;
    c.base_x_floor = b.err_over_floor;
    c.base_samples = b.samples;
    c.base_device = b.device;
    const auto it = next_idx.find(Key{b.scenario, b.backend});
    if (it == next_idx.end()) {
      c.change = CompareChange::removed;
      ++rep.removed;
      rep.rows.push_back(std::move(c));
      continue;
    }
    const ResultRow& n = *it->second;
    ++rep.in_common;
    c.new_status = n.status;
    c.new_median_us = n.median_time_us;
    c.new_x_floor = n.err_over_floor;
    c.new_samples = n.samples;
    c.new_device = n.device;
    judge_matched(c, b, n, opts, rep);
    if (!b.device.empty() && !n.device.empty() && b.device != n.device && ++rep.device_changes == 1)
      rep.device_change_example = fmt::format("{} / {}: {} -> {}", b.scenario, b.backend, b.device, n.device);
    rep.rows.push_back(std::move(c));
  }
  for (const ResultRow& n : next) {
    if (base_idx.count(Key{n.scenario, n.backend})) continue;
    CompareRow c;
    c.scenario = n.scenario;
    c.backend = n.backend;
    c.new_status = n.status;
    c.new_median_us = n.median_time_us;
    c.new_x_floor = n.err_over_floor;
    c.new_samples = n.samples;
    c.new_device = n.device;
    c.change = CompareChange::added;
    // A new scenario that fails is a correctness regression like a passing one that starts to.
    c.regression = failing(n.status);
    rep.added_failures += c.regression;
    ++rep.added;
    rep.rows.push_back(std::move(c));
  }
  // --require-pass: whatever else a row's verdict, a failure in NEW fails the gate.
  if (opts.require_pass) {
    for (CompareRow& c : rep.rows) {
      if (!c.regression && failing(c.new_status)) {
        c.regression = true;
        ++rep.required_failures;
      }
    }
  }

  rep.pass = std::none_of(rep.rows.begin(), rep.rows.end(), [](const CompareRow& c) { return c.regression; });
  rep.nothing_checked = rep.compared == 0;
  if (rep.nothing_checked) rep.nothing_checked_why = nothing_checked_why(rep);
  rep.verdict = verdict_line(rep, opts);
  return rep;
}

std::vector<std::string> compare_headers() {
  return {"scenario", "backend", "base_us", "new_us", "change", "noise", "samples", "x_floor", "status", "verdict"};
}

std::vector<bool> compare_numeric_columns() {
  return {false, false, true, true, true, true, true, true, false, false};
}

std::vector<std::vector<std::string>> compare_cells(const CompareReport& report) {
  std::vector<std::vector<std::string>> cells;
  for (const CompareRow& c : report.rows) {
    auto time = [](double us) { return us > 0 ? fmt::format("{:.2f}", us) : std::string("-"); };
    std::string status = c.base_status.empty() ? "-> " + c.new_status
                         : c.new_status.empty() ? c.base_status + " ->"
                         : c.base_status == c.new_status ? c.base_status
                                                         : c.base_status + " -> " + c.new_status;
    std::string verdict = to_string(c.change);
    if (!c.detail.empty()) verdict += ": " + c.detail;
    if (c.few_samples) verdict += ", few samples";
    if (c.regression) verdict += " (REGRESSION)";
    // The error against the precision floor, base -> new where both rows were checked.
    auto x_floor = [](double x) { return x > 0 ? fmt::format("{:.2f}", x) : std::string("-"); };
    const std::string accuracy = c.base_x_floor > 0 && c.new_x_floor > 0
                                     ? x_floor(c.base_x_floor) + " -> " + x_floor(c.new_x_floor)
                                     : x_floor(c.new_x_floor > 0 ? c.new_x_floor : c.base_x_floor);
    // base/new sample counts: how far the noise figure can be trusted.
    auto count = [](int n) { return n > 0 ? std::to_string(n) : std::string("-"); };
    const std::string samples =
        c.base_samples > 0 || c.new_samples > 0 ? count(c.base_samples) + "/" + count(c.new_samples) : "-";
    cells.push_back({c.scenario, c.backend, time(c.base_median_us), time(c.new_median_us),
                     c.ratio > 0 ? percent(c.slowdown) : "-",
                     c.noise > 0 ? fmt::format("{:.1f}%", c.noise * 100.0) : "-", samples, accuracy, status, verdict});
  }
  return cells;
}

std::vector<std::string> compare_provenance_lines(const CompareReport& report) {
  auto line = [](const char* label, const CompareSide& s) {
    auto value = [](const std::string& v) { return v.empty() ? std::string("-") : v; };
    return fmt::format("{}{}: build {}, git_rev {}, device {}", label, s.file.empty() ? "" : " " + s.file,
                       value(s.build), value(s.git_rev), value(s.device));
  };
  return {line("BASE", report.base), line("NEW", report.next)};
}

std::string compare_device_warning(const CompareReport& report) {
  if (report.device_changes == 0) return "";
  return fmt::format("warning: {} ran on another device in NEW than in BASE ({}): timing across devices is not a "
                     "regression check",
                     count_of(report.device_changes, "row"), report.device_change_example);
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
  std::string out;
  for (const std::string& l : compare_provenance_lines(report)) out += l + '\n';
  if (const std::string w = compare_device_warning(report); !w.empty()) out += w + '\n';
  out += line(headers);
  for (const auto& row : cells) out += line(row);
  out += report.verdict + '\n';
  return out;
}

}  // namespace attn
