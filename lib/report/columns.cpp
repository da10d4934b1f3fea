#include "report/columns.hpp"

#include <charconv>
#include <cmath>
#include <functional>
#include <string_view>
#include <type_traits>

namespace attn {

namespace {

constexpr bool all_columns_named() {
  for (const ResultColumn& c : kResultColumns)
    if (c.name == nullptr || c.name[0] == '\0') return false;
  return true;
}
static_assert(all_columns_named(), "kResultColumns has an unnamed entry (size larger than the list?)");

template <class T>
bool parse_integer(std::string_view s, T& out) {
  T v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return false;
  out = v;
  return true;
}

bool parse_double(std::string_view s, double& out) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);  // from_chars rejects a leading '+'
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return false;
  out = v;
  return true;
}

}  // namespace

const char* to_string(RowStatus s) {
  switch (s) {
    case RowStatus::pass: return "pass";
    case RowStatus::fail: return "fail";
    case RowStatus::skipped: return "skipped";
    case RowStatus::error: return "error";
  }
  return "?";
}

std::optional<RowStatus> parse_row_status(std::string_view s) {
  for (RowStatus st : {RowStatus::pass, RowStatus::fail, RowStatus::skipped, RowStatus::error})
    if (s == to_string(st)) return st;
  return std::nullopt;
}

std::vector<std::string> result_column_names() {
  std::vector<std::string> names;
  names.reserve(kResultColumns.size());
  for (const ResultColumn& c : kResultColumns) names.emplace_back(c.name);
  return names;
}

std::string format_double(double x) {
  if (std::isnan(x)) return "nan";  // to_chars may print "-nan"; the sign of a NaN carries nothing
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), x);
  (void)ec;  // 32 bytes hold any shortest double
  return std::string(buf, end);
}

namespace {

// Columns [first, last] of kResultColumns, by name (the table's groups are contiguous).
constexpr size_t column_index(std::string_view name) {
  for (size_t i = 0; i < kResultColumns.size(); ++i)
    if (name == kResultColumns[i].name) return i;
  return kResultColumns.size();
}
constexpr size_t kFirstError = column_index("max_abs_err");
constexpr size_t kLastError = column_index("batch_invariant");
constexpr size_t kFirstTiming = column_index("plan_us");
constexpr size_t kLastTiming = column_index("cold_l2");
constexpr size_t kFirstRate = column_index("tflops");
constexpr size_t kLastRate = column_index("pct_read_floor");
// Settings columns that apply only to some rows (field_applies says which).
constexpr size_t kWarmup = column_index("warmup");
constexpr size_t kIterations = column_index("iterations");
constexpr size_t kHostTimeout = column_index("host_timeout_s");
constexpr size_t kTimed = column_index("timed");
constexpr size_t kCaseIndex = column_index("case_index");
static_assert(kWarmup < kResultColumns.size() && kIterations < kResultColumns.size() &&
                  kHostTimeout < kResultColumns.size() && kTimed < kResultColumns.size() &&
                  kCaseIndex < kResultColumns.size(),
              "a settings column of field_applies was renamed");
static_assert(kFirstError < kLastError && kLastError < kFirstTiming && kFirstTiming < kLastTiming &&
                  kLastTiming < kFirstRate && kFirstRate < kLastRate && kLastRate < kResultColumns.size(),
              "the errors and timing groups of kResultColumns moved: update field_applies");

// The column's index when c is an element of kResultColumns (std::less orders any two pointers),
// else kResultColumns.size().
size_t index_of(const ResultColumn& c) {
  const ResultColumn* first = kResultColumns.data();
  const ResultColumn* end = first + kResultColumns.size();
  if (std::less<const ResultColumn*>{}(&c, first) || !std::less<const ResultColumn*>{}(&c, end)) return kResultColumns.size();
  return static_cast<size_t>(&c - first);
}

bool is_setting(size_t i) {
  return i == kWarmup || i == kIterations || i == kHostTimeout || i == kTimed || i == kCaseIndex;
}

bool may_not_apply(size_t i) {
  return (i >= kFirstError && i <= kLastError) || (i >= kFirstTiming && i <= kLastTiming) ||
         (i >= kFirstRate && i <= kLastRate) || is_setting(i);
}

// The settings columns hold a value where the row's run had the setting; an empty cell reads
// back as the default that says it did not (iterations 0, host_timeout_s -1, sweep empty).
bool setting_applies(const ResultRow& row, size_t i) {
  if (i == kWarmup || i == kIterations || i == kTimed) return row.iterations > 0;  // a timed run's settings
  if (i == kHostTimeout) return row.host_timeout_s >= 0;            // 0 is a setting: no budget
  return !row.sweep.empty();                                        // case_index
}

}  // namespace

bool field_applies(const ResultRow& row, const ResultColumn& c) {
  const size_t i = index_of(c);
  if (i >= kResultColumns.size() || !may_not_apply(i)) return true;  // a copy: every column applies
  if (is_setting(i)) return setting_applies(row, i);
  const bool checked = row.status == to_string(RowStatus::pass) || row.status == to_string(RowStatus::fail);
  if (i >= kFirstError && i <= kLastError) {
    if (!checked) return false;
    return i != kLastError || row.batch_invariance_checked;
  }
  return checked && row.samples > 0;  // timings and rates of a timed row
}

std::string field_text(const ResultRow& row, const ResultColumn& c) {
  return std::visit(
      [&](auto member) -> std::string {
        const auto& v = row.*member;
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, std::string>) {
          return v;
        } else if constexpr (std::is_same_v<V, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<V, double>) {
          return format_double(v);
        } else {
          return std::to_string(v);
        }
      },
      c.field);
}

bool set_field(ResultRow& row, const ResultColumn& c, std::string_view text) {
  if (text.empty() && index_of(c) < kResultColumns.size() && may_not_apply(index_of(c)) &&
      !std::holds_alternative<std::string ResultRow::*>(c.field)) {
    if (index_of(c) == kLastError) row.batch_invariance_checked = false;
    return true;
  }
  if (index_of(c) == kLastError) row.batch_invariance_checked = true;
  return std::visit(
      [&](auto member) -> bool {
        auto& v = row.*member;
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, std::string>) {
          v.assign(text);
          return true;
        } else if constexpr (std::is_same_v<V, bool>) {
          if (text == "true" || text == "1") return v = true, true;
          if (text == "false" || text == "0") return v = false, true;
          return false;
        } else if constexpr (std::is_same_v<V, double>) {
          return parse_double(text, v);
        } else {
          return parse_integer(text, v);
        }
      },
      c.field);
}

}  // namespace attn
