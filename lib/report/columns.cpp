#include "report/columns.hpp"

#include <charconv>
#include <cmath>
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
